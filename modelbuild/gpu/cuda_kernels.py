"""A cuda library's kernels compiled while it is built, for the library to carry (modelbuild/cuda_binaries.py).

TVM's CUDA code generation passes each module's CUDA C through the `tvm_callback_cuda_postproc` hook before
it keeps it; while `carried_in_source` is active, that hook compiles the source with this machine's CUDA
compiler (NVRTC from the `cuda` extra, else nvcc) and returns it with the cubin and PTX appended.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from modelbuild import cuda_binaries
from modelbuild.errors import StageEnvironmentError, StageError, last_line
from modelbuild.host.nvrtc import toolkit_environment

POSTPROC = "tvm_callback_cuda_postproc"


@contextmanager
def carried_in_source(compiler: dict) -> Iterator[None]:
    """Within it, every cuda module TVM generates carries its kernels compiled by `compiler` ({name, version}
    as recipe/targets.cuda_compiler found it); a compiler's failure is raised as a StageError on leaving."""
    import tvm_ffi

    failures: list[Exception] = []

    def carry(code: str, target) -> str:
        try:
            return cuda_binaries.embed(code, compiled(code, target, compiler))
        except Exception as err:  # noqa: BLE001  (raised again, whole, once TVM has returned)
            failures.append(err)
            return code

    tvm_ffi.register_global_func(POSTPROC, carry, override=True)
    try:
        yield
    finally:
        tvm_ffi.registry.remove_global_func(POSTPROC)
    if failures:
        err = failures[0]
        if isinstance(err, StageError):
            raise err
        raise StageError(f"{compiler['name']} could not compile the kernels: {last_line(err)}") from err


def compiled(code: str, target, compiler: dict) -> cuda_binaries.Prebuilt:
    """The cubin for the cuda `target`'s arch and the PTX for its virtual architecture, compiled from `code`
    by `compiler`."""
    from tvm.support import nvcc

    name, arch = compiler["name"], str(target.attrs["arch"])
    with target, _headers_for_nvrtc() if name == "nvrtc" else nullcontext():  # nvcc reads the arch's family off it
        try:
            cubin = nvcc.compile_cuda(code, target_format="cubin", arch=arch, compiler=name)
            ptx = nvcc.compile_cuda(code, target_format="ptx", arch=arch.replace("sm_", "compute_"), compiler=name)
        except (ImportError, FileNotFoundError) as err:
            raise StageEnvironmentError(f"{name} cannot run here: {last_line(err)}") from err
    return cuda_binaries.Prebuilt(arch, f"{name} {compiler['version']}", bytes(cubin), bytes(ptx))


@contextmanager
def _headers_for_nvrtc() -> Iterator[None]:
    """CUDA_PATH and NVRTC's include options at pip's headers where no toolkit has them (host/nvrtc.py)."""
    found = toolkit_environment(dict(os.environ), sys.path, shutil.which("nvcc"))
    before = {name: os.environ.get(name) for name in found}
    os.environ.update(found)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value
