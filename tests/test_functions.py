"""Functions expanded into their operators: a model's own, and ONNX's where TVM lacks the operator; the
expanded model computes what onnxruntime computes of the original."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from modelbuild.frontend import functions
from tests.helpers.onnx_models import outputs, saved


def ops(model) -> list[str]:
    return [f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in model.graph.node]


def test_a_center_crop_pad_becomes_the_pad_and_slice_onnx_defines_it_as():
    """Opset 18's CenterCropPad, a context-dependent function: a [10, 7, 3] image cropped to 6 rows and
    padded to 9 columns."""
    model = saved(
        [helper.make_node("CenterCropPad", ["x", "shape"], ["y"], axes=[0, 1])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10, 7, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializers=[numpy_helper.from_array(np.array([6, 9], np.int64), "shape")],
    )
    expanded = functions.expanded(model, supported={"Pad", "Slice"})
    assert "CenterCropPad" not in ops(expanded) and {"Pad", "Slice"} <= set(ops(expanded))
    assert not expanded.functions and [o.domain for o in expanded.opset_import] == [""]
    feed = {"x": np.random.default_rng(0).standard_normal((10, 7, 3)).astype(np.float32)}
    np.testing.assert_array_equal(outputs(expanded, feed)[0], outputs(model, feed)[0])


def test_an_attribute_the_node_omits_takes_the_schemas_default():
    """Celu's body reads alpha by reference; a node without it means alpha = 1."""
    model = saved(
        [helper.make_node("Celu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    expanded = functions.expanded(model, supported=set())
    assert "Celu" not in ops(expanded)
    feed = {"x": np.linspace(-4, 4, 64, dtype=np.float32)}
    np.testing.assert_allclose(outputs(expanded, feed)[0], outputs(model, feed)[0], rtol=1e-6)


def test_operators_tvm_converts_are_left_as_they_are():
    model = saved(
        [helper.make_node("Celu", ["x"], ["y"], alpha=2.0)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    assert functions.expanded(model, supported={"Celu"}) is model


def test_a_models_own_function_is_inlined_under_names_that_do_not_collide():
    """A module exported as a function of the model (TorchScript's export_modules_as_functions), called
    twice: each call's values keep names of their own."""
    block = helper.make_function(
        "mymodules",
        "ScaledRelu",
        ["a"],
        ["b"],
        [
            helper.make_node("Constant", [], ["two"], value_float=2.0),
            helper.make_node("Mul", ["a", "two"], ["t"]),
            helper.make_node("Relu", ["t"], ["b"]),
        ],
        [helper.make_opsetid("", 18)],
    )
    model = saved(
        [
            helper.make_node("ScaledRelu", ["x"], ["h"], domain="mymodules"),
            helper.make_node("ScaledRelu", ["h"], ["y"], domain="mymodules"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])],
        local=[block],
    )
    inlined = functions.inlined(model)
    assert ops(inlined) == ["Constant", "Mul", "Relu"] * 2 and not inlined.functions
    onnx.checker.check_model(inlined)
    feed = {"x": np.linspace(-2, 2, 8, dtype=np.float32)}
    np.testing.assert_array_equal(outputs(inlined, feed)[0], outputs(model, feed)[0])


def test_a_function_the_inliner_cannot_inline_is_left_for_the_import_to_name(tmp_path):
    """A call with more inputs than its function takes: onnx's inliner asserts; the import says, in one line,
    that the call's operator is not supported."""
    import pytest

    from modelbuild.errors import StageError
    from modelbuild.stages import onnx_import

    one_input = helper.make_function(
        "mymodules", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])], [helper.make_opsetid("", 18)]
    )
    model = saved(
        [helper.make_node("Twice", ["x", "x"], ["y"], domain="mymodules", name="call")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        local=[one_input],
    )
    assert functions.inlined(model) is model
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    with pytest.raises(StageError, match=r"^operator mymodules\.Twice \(node 'call'\) is not supported by TVM$"):
        onnx_import.run(inputs={"model": path}, params={"inputs": {}, "simplify": True}, out=tmp_path)
