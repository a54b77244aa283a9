"""This machine's CUDA GPUs, asked of the driver itself, and whether a cuda target's library can run on one.

The driver (libcuda) is asked through ctypes, not through TVM: every plan with a cuda target asks, and
importing TVM would cost a no-op build most of a second. Validation runs on the first GPU the driver lists
(CUDA_VISIBLE_DEVICES chooses another), so that one is the machine a cuda build's timings belong to.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from functools import cache

DRIVER = "libcuda.so.1"
_CAPABILITY_MAJOR, _CAPABILITY_MINOR = 75, 76  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_*
_NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE
# what a machine needs to load a cuda library: TVM compiles its CUDA C with NVRTC, through cuda-bindings
# (pyproject.toml's `cuda` extra names the same)
NVRTC_PACKAGES = "pip install 'cuda-bindings<13' nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12 nvidia-cuda-cccl-cu12"


@dataclass(frozen=True)
class Gpu:
    name: str
    capability: tuple[int, int]
    driver: str  # the CUDA version the driver supports, "13.0"

    def describe(self) -> dict:
        """As reports and the validate key show the machine."""
        return {"gpu": self.name, "compute_capability": ".".join(map(str, self.capability)), "cuda_driver": self.driver}

    @classmethod
    def described(cls, fields: dict) -> Gpu:
        major, minor = fields["compute_capability"].split(".")
        return cls(fields["gpu"], (int(major), int(minor)), fields["cuda_driver"])


@cache
def local_gpus(driver: str = DRIVER) -> tuple[tuple[Gpu, ...], str]:
    """(the GPUs the CUDA driver sees, in its order; why there are none, where there are none)."""
    try:
        cuda = ctypes.CDLL(driver)
    except OSError:
        return (), f"no CUDA driver on this machine ({driver} not found)"
    status = cuda.cuInit(0)
    if status == _NO_DEVICE:
        return (), "the CUDA driver on this machine sees no GPU"
    if status != 0:
        return (), f"the CUDA driver on this machine failed to start (cuInit error {status})"
    version, count = ctypes.c_int(), ctypes.c_int()
    cuda.cuDriverGetVersion(ctypes.byref(version))
    cuda.cuDeviceGetCount(ctypes.byref(count))
    driver_version = f"{version.value // 1000}.{version.value % 1000 // 10}"
    gpus = []
    for ordinal in range(count.value):
        device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGet(ctypes.byref(device), ordinal)
        cuda.cuDeviceGetName(name, len(name), device)
        cuda.cuDeviceGetAttribute(ctypes.byref(major), _CAPABILITY_MAJOR, device)
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), _CAPABILITY_MINOR, device)
        gpus.append(Gpu(name.value.decode(errors="replace"), (major.value, minor.value), driver_version))
    return tuple(gpus), "" if gpus else "the CUDA driver on this machine sees no GPU"


def capability_of(arch: str) -> tuple[tuple[int, int], bool] | None:
    """("sm_90a" ->) ((9, 0), True): the compute capability an arch needs and whether only exactly that one
    runs it (the `a` architectures' instructions exist on no later GPU); None for a spelling not known."""
    match = re.fullmatch(r"(?:sm|compute)_(\d+)(\d)([af]?)", arch)
    if not match:
        return None
    return (int(match[1]), int(match[2])), match[3] == "a"


def why_not_on_gpu(target: dict, gpus: tuple[Gpu, ...], reason: str) -> str | None:
    """Why a cuda target's library cannot run on this machine's first GPU; None when it can.

    The library carries its kernels as CUDA C (compile.py), compiled where it is loaded for the GPU there,
    so any GPU at least as new as the target's arch runs it."""
    if not gpus:
        return reason
    gpu = gpus[0]
    arch = str(target.get("arch", ""))
    needed = capability_of(arch) if arch else None
    if needed is None:
        return None  # TVM's own default arch: the oldest it builds for
    capability, exactly = needed
    if gpu.capability == capability or (gpu.capability > capability and not exactly):
        return None
    have = "".join(map(str, gpu.capability))
    return f"built for {arch}; this machine's GPU ({gpu.name}) is sm_{have}"
