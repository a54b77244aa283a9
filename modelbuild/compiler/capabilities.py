"""What this TVM can do here, for `modelbuild doctor`: run as `python -m modelbuild.compiler.capabilities`,
so the command line itself never imports TVM. Prints one JSON object."""

from __future__ import annotations

import json
import sys

import tvm


def capabilities() -> dict:
    info = tvm.support.libinfo()
    cuda_codegen = info.get("USE_CUDA") == "ON"
    cuda_runtime = tvm.runtime.enabled("cuda")
    return {
        "tvm": tvm.__version__,
        "llvm": info.get("USE_LLVM") not in (None, "OFF"),
        "llvm_version": tvm.target.codegen.llvm_version_major() if tvm.runtime.enabled("llvm") else None,
        "cuda_codegen": cuda_codegen,
        # the driver is what a library needs to run; the wheel has CUDA code generation without it
        "cuda_device": bool(cuda_runtime and tvm.cuda().exist),
    }


if __name__ == "__main__":
    sys.stdout.write(json.dumps(capabilities()) + "\n")  # to the parent process (pipeline/doctor.py), not a person
