"""ONNX models through the import stage, compiled for this host: what a user's model becomes."""

from __future__ import annotations

import json

import onnx


def built(model, tmp_path, shapes: dict):
    """main() of the model (its float32 inputs' shapes) imported by the import stage, onnxslim included, and
    compiled for this host."""
    import tvm
    from tvm import relax

    from modelbuild.compiler import lowering
    from modelbuild.stages import contracts, onnx_import

    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    params = {
        "inputs": {name: {"shape": shape, "dtype": "float32"} for name, shape in shapes.items()},
        "simplify": True,
    }
    onnx_import.run(inputs={"model": path}, params=params, out=tmp_path)
    module = tvm.ir.load_json((tmp_path / contracts.IR).read_text())
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, target, fuse=True, layout="auto", schedule=True)
        executable = tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))
    return relax.VirtualMachine(executable, tvm.cpu())["main"], json.loads((tmp_path / "signature.json").read_text())
