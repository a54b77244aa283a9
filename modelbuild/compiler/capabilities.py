"""What this TVM can do here, for `modelbuild doctor`: run as `python -m modelbuild.compiler.capabilities`,
so the command line itself never imports TVM. Prints one JSON object."""

from __future__ import annotations

import json
import sys

import tvm


def capabilities() -> dict:
    info = tvm.support.libinfo()
    cuda_codegen = info.get("USE_CUDA") == "ON"
    return {
        "tvm": tvm.__version__,
        "llvm": info.get("USE_LLVM") not in (None, "OFF"),
        "llvm_version": tvm.target.codegen.llvm_version_major() if tvm.runtime.enabled("llvm") else None,
        "cuda_codegen": cuda_codegen,
    }


if __name__ == "__main__":
    sys.stdout.write(json.dumps(capabilities()) + "\n")  # to the parent process (pipeline/doctor.py), not a person
