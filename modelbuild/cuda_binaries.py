"""A cuda library's kernels compiled at build time, carried in the library, and loaded with no compiler.

TVM 0.27 keeps a cuda library's kernels as CUDA C and compiles them when the library is loaded, through the
`tvm_callback_cuda_compile` hook; its code generation writes a binary kernel module only where a GPU driver
is loaded, so a CPU-only CI machine could only ship source. The compile stage therefore compiles the CUDA C
itself (gpu/cuda_kernels.py) and appends the results to the source as one comment line: a cubin for the
target's architecture and its PTX. A loader (`install_loader`) answers TVM's hook with that cubin on a GPU of
the same family, or with the PTX, which the driver translates, on a newer one: no NVRTC or nvcc runs where the
library is loaded. A plain `tvm.runtime.load_module` ignores the comment and compiles the source as before.

This module imports neither TVM nor numpy until a loader is installed: the build side only formats text.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass

MARKER = "// modelbuild:prebuilt "
loaded: list[str] = []  # what each kernel module loaded in this process was answered with, in order


@dataclass(frozen=True)
class Prebuilt:
    arch: str  # sm_80, sm_90a: the cubin's architecture; the PTX is for its virtual twin (compute_80)
    compiler: str  # "nvrtc 12.9.86", "nvcc 13.0.88": what compiled both
    cubin: bytes
    ptx: bytes


def embed(source: str, prebuilt: Prebuilt) -> str:
    """`source` with its compiled kernels appended as one comment line; the line names the source's digest, so
    a source edited after the build is compiled again rather than answered with another source's binary."""
    fields = {
        "arch": prebuilt.arch,
        "compiler": prebuilt.compiler,
        "source_sha256": _digest(source),
        "cubin": _packed(prebuilt.cubin),
        "ptx": _packed(prebuilt.ptx),
    }
    return f"{source}\n{MARKER}{json.dumps(fields, sort_keys=True)}\n"


def embedded(code: str) -> Prebuilt | None:
    """The kernels `embed` appended to `code`; None where there are none or the source does not match them."""
    source, found, line = code.rstrip("\n").rpartition(f"\n{MARKER}")
    if not found:
        return None
    try:
        fields = json.loads(line)
        if fields.get("source_sha256") != _digest(source):
            return None
        return Prebuilt(fields["arch"], fields["compiler"], _unpacked(fields["cubin"]), _unpacked(fields["ptx"]))
    except (ValueError, KeyError, zlib.error):  # a damaged line: the source is compiled as if it had none
        return None


# zlib first: PTX is text, and the two binaries would otherwise add half again to a library's size
def _packed(binary: bytes) -> str:
    return base64.b64encode(zlib.compress(binary, 9)).decode()


def _unpacked(text: str) -> bytes:
    return zlib.decompress(base64.b64decode(text))


def _digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def choose(prebuilt: Prebuilt, capability: tuple[int, int]) -> tuple[str, bytes]:
    """("cubin" | "ptx", the bytes to load) on a GPU of this compute capability: the cubin on its own family
    (sm_80 runs on 8.0 and 8.6, not 9.0), the PTX on a newer GPU, which its driver compiles; an architecture
    with a suffix (sm_90a) runs on its own capability only. ValueError where the GPU is older than the build."""
    major, minor, specific = _capability_of(prebuilt.arch)
    if capability == (major, minor) or (not specific and capability[0] == major and capability[1] >= minor):
        return "cubin", prebuilt.cubin
    if not specific and capability > (major, minor):
        return "ptx", prebuilt.ptx + b"\0"  # the driver reads PTX as a C string
    runs_on = f"{major}.{minor}a only" if specific else f"{major}.{minor} or newer"
    raise ValueError(
        f"the library's kernels are for {prebuilt.arch} (compute capability {runs_on}); "
        f"this GPU is {capability[0]}.{capability[1]}: build for its arch"
    )


def _capability_of(arch: str) -> tuple[int, int, bool]:
    digits = arch.split("_", 1)[1]
    specific = digits[-1].isalpha()
    digits = digits.rstrip("abcdefghijklmnopqrstuvwxyz")
    return int(digits[:-1]), int(digits[-1]), specific


def kernels_for(code: str, capability: tuple[int, int], compile_here: Callable[[str], bytes]) -> bytes:
    """What TVM loads for the cuda module whose source is `code` on a GPU of this compute capability: the
    kernels it carries (`choose`), else what `compile_here` makes of the source. Each answer is recorded in
    `loaded`."""
    prebuilt = embedded(code)
    if prebuilt is None:
        loaded.append("compiled here by NVRTC (the library carries no kernels)")
        return compile_here(code)
    kind, binary = choose(prebuilt, capability)
    loaded.append(f"prebuilt {kind} for {prebuilt.arch} ({prebuilt.compiler})")
    return binary


def install_loader() -> None:
    """Answer TVM's hook for compiling a cuda library's kernels at load with `kernels_for` on GPU 0, NVRTC
    compiling only a library that carries none. Call it before loading the library."""
    import tvm
    import tvm_ffi
    from tvm.support import nvcc  # its import registers TVM's own hook, which this one replaces

    def answer(code: str, *_target) -> bytes:
        major, minor = (int(part) for part in tvm.cuda(0).compute_version.split(".")[:2])
        return kernels_for(code, (major, minor), lambda source: bytes(nvcc.tvm_callback_cuda_compile(source)))

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", answer, override=True)
