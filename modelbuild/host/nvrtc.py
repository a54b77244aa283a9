"""Where TVM's NVRTC callback finds CUDA's headers on a machine with a GPU driver but no CUDA toolkit.

Loading a cuda library compiles its CUDA C (stages/compile.py keeps it as source) through TVM's
tvm_callback_cuda_compile, which looks for the headers under CUDA_PATH, else beside `nvcc`, else in
/usr/local/cuda, and fails ("Cannot find CUDA path") where none is: an inference box often has the driver
alone. pip's nvidia packages (the `cuda` extra) carry the headers NVRTC needs; this names them for TVM.
Checked without a GPU: with nvidia-cuda-nvrtc-cu12 12.9 and these variables, the CUDA C of a library built
for sm_80 and sm_90 compiled to cubins of those architectures; on an H200 with the CUDA 13 toolkit, TVM
found its headers itself. A probe of the machine, as gpus.py is (no TVM import): `modelbuild doctor` asks it
what loading would use, the validate stage sets what it finds.
"""

from __future__ import annotations

import os
from pathlib import Path

TOOLKIT = Path("/usr/local/cuda")


def loader_here(
    environ: dict[str, str], search_path: list[str], nvcc: str | None, toolkit: Path = TOOLKIT
) -> dict[str, str | None]:
    """What loading a cuda library needs on this machine, found without importing it: cuda-bindings' version
    (its NVRTC compiles the CUDA C) and the folder of the cuda_runtime.h TVM's callback will use; None where
    missing. Read by `modelbuild doctor` on a machine whose GPU could run the library."""
    from modelbuild.versions import dist_info_version

    bindings = dist_info_version("cuda-bindings", search_path)
    found = toolkit_environment(environ, search_path, nvcc, toolkit)
    root = environ.get("CUDA_PATH") or found.get("CUDA_PATH") or str(_toolkit_of(nvcc, toolkit))
    headers = Path(root) / "include"
    return {"bindings": bindings, "headers": str(headers) if (headers / "cuda_runtime.h").is_file() else None}


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
