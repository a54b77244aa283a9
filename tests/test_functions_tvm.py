"""Functions through the import stage: the library computes what onnxruntime computes of the original."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.helpers.onnx_builds import built
from tests.helpers.onnx_models import outputs, saved


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
