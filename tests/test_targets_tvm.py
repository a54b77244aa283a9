"""The CPU list that checks mcpu without importing TVM is the pinned TVM's own."""

import json
from pathlib import Path

import modelbuild

TRIPLES = {
    "x86_64": "x86_64-linux-gnu",
    "aarch64": "aarch64-linux-gnu",
    "arm": "armv7a-linux-gnueabihf",
    "riscv64": "riscv64-linux-gnu",
}


def test_llvm_cpus_json_lists_what_this_tvms_llvm_accepts():
    import tvm
    from tvm.target import codegen

    data = json.loads((Path(modelbuild.__file__).parent / "recipe" / "llvm_cpus.json").read_text())
    assert data["tvm"] == tvm.__version__ and set(data["cpus"]) == set(TRIPLES)
    for arch, triple in TRIPLES.items():
        target = tvm.target.Target({"kind": "llvm", "mtriple": triple})
        assert data["cpus"][arch] == sorted({str(c) for c in codegen.llvm_get_cpu_archlist(target)}), arch
