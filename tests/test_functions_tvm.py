"""Functions through the import stage: the library computes what onnxruntime computes of the original."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.test_functions import outputs, saved


def built(model, tmp_path, shapes: dict):
    """main() of the model (its float32 inputs' shapes) imported by the import stage, onnxslim included, and
    compiled for this host."""
    import tvm
    from tvm import relax

    from modelbuild.compiler import lowering
    from modelbuild.stages import onnx_import

    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    params = {
        "inputs": {name: {"shape": shape, "dtype": "float32"} for name, shape in shapes.items()},
        "simplify": True,
    }
    onnx_import.run(inputs={"model": path}, params=params, out=tmp_path)
    module = tvm.ir.load_json((tmp_path / onnx_import.IR_FILE).read_text())
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, target, fuse=True, layout="auto", schedule=True)
        executable = tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))
    return relax.VirtualMachine(executable, tvm.cpu())["main"], json.loads((tmp_path / "signature.json").read_text())


def test_a_center_crop_pad_imports_and_matches_onnxruntime(tmp_path):
    """TVM has no CenterCropPad converter: the import failed naming it."""
    import tvm

    model = saved(
        [helper.make_node("CenterCropPad", ["x", "shape"], ["y"], axes=[2, 3])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 20, 13])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializers=[numpy_helper.from_array(np.array([16, 16], np.int64), "shape")],
    )
    main, _ = built(model, tmp_path, {"x": [1, 3, 20, 13]})
    x = np.random.default_rng(0).standard_normal((1, 3, 20, 13)).astype(np.float32)
    np.testing.assert_array_equal(main(tvm.runtime.tensor(x)).numpy(), outputs(model, {"x": x})[0])


def test_a_model_whose_modules_are_its_own_functions_imports(tmp_path):
    """TorchScript's export_modules_as_functions: the import stopped at the functions' domain."""
    import tvm

    block = helper.make_function(
        "mymodules",
        "Block",
        ["a", "w"],
        ["b"],
        [helper.make_node("Conv", ["a", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["b"])],
        [helper.make_opsetid("", 18)],
    )
    weights = np.random.default_rng(1).standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3
    model = saved(
        [
            helper.make_node("Block", ["x", "w"], ["h"], domain="mymodules"),
            helper.make_node("Block", ["h", "w"], ["y"], domain="mymodules"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        initializers=[numpy_helper.from_array(weights, "w")],
        local=[block],
    )
    main, _ = built(model, tmp_path, {"x": [1, 4, 8, 8]})
    x = np.random.default_rng(2).standard_normal((1, 4, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(main(tvm.runtime.tensor(x)).numpy(), outputs(model, {"x": x})[0], rtol=1e-5, atol=1e-5)
