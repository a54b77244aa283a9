"""Where TVM's NVRTC finds CUDA's headers on a machine with no CUDA toolkit.

TVM's NVRTC compile (tvm.support.nvcc) looks for the headers under CUDA_PATH, else beside `nvcc`, else in
/usr/local/cuda, and fails ("Cannot find CUDA path") where none is: a CI runner, or an inference box with the
driver alone. pip's nvidia packages (the `cuda` extra) carry the headers NVRTC needs; this names them for TVM.
The compile stage sets them to compile a cuda library's kernels (gpu/cuda_kernels.py), and the validate
stage to load a library that carries none. A probe of the machine, as gpus.py is (no TVM import).
"""

from __future__ import annotations

import os
from pathlib import Path

TOOLKIT = Path("/usr/local/cuda")


def _toolkit_of(nvcc: str | None, toolkit: Path) -> Path:
    return Path(os.path.realpath(Path(nvcc).parent.parent)) if nvcc else toolkit


def toolkit_environment(
    environ: dict[str, str], search_path: list[str], nvcc: str | None, toolkit: Path = TOOLKIT
) -> dict[str, str]:
    """The variables to set for TVM's NVRTC callback: CUDA_PATH at pip's CUDA runtime headers and their
    companion C++ library headers (cccl) in TVM_CUDA_NVRTC_EXTRA_OPTS; {} where CUDA_PATH is set, where the
    toolkit TVM would pick (the one of the `nvcc` on the path, else /usr/local/cuda) has the headers, or
    where pip's packages are not there. An `nvcc` that is a wrapper outside its toolkit (/usr/local/bin/nvcc)
    has TVM look in /usr/local and fail: pip's headers then."""
    if "CUDA_PATH" in environ:
        return {}
    chosen = _toolkit_of(nvcc, toolkit)
    if (chosen / "include" / "cuda_runtime.h").is_file():
        return {}
    for entry in search_path:
        nvidia = Path(entry or ".") / "nvidia"
        for header in sorted(nvidia.glob("*/include/cuda_runtime.h")):
            include = header.parent
            found = {"CUDA_PATH": str(include.parent)}
            cccl = [d for d in (include / "cccl", nvidia / "cuda_cccl" / "include") if (d / "cuda" / "std").is_dir()]
            if cccl and "TVM_CUDA_NVRTC_EXTRA_OPTS" not in environ:
                found["TVM_CUDA_NVRTC_EXTRA_OPTS"] = f"-I{cccl[0]}"
            return found
    return {}
