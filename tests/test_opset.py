"""Old opsets converted where TVM's converters need it, against onnxruntime on the original model."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from modelbuild.errors import StageError
from modelbuild.frontend import opset


def sliced_state(version: int) -> onnx.ModelProto:
    """x [4, 1, 6] -> its first two rows and its last two, added: AECMOS slices its GRUs' initial states so,
    in opset 9's form (starts and ends attributes) where `version` < 10."""
    if version < 10:
        nodes = [
            helper.make_node("Slice", ["x"], ["a"], axes=[0], starts=[0], ends=[2]),
            helper.make_node("Slice", ["x"], ["b"], axes=[0], starts=[2], ends=[4]),
        ]
        constants = []
    else:
        nodes = [
            helper.make_node("Slice", ["x", "s0", "e0", "axes"], ["a"]),
            helper.make_node("Slice", ["x", "e0", "e1", "axes"], ["b"]),
        ]
        constants = [
            onnx.numpy_helper.from_array(np.array([v], np.int64), n)
            for n, v in (("s0", 0), ("e0", 2), ("e1", 4), ("axes", 0))
        ]
    nodes.append(helper.make_node("Add", ["a", "b"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 1, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 6])],
        constants,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)])
    model.ir_version = 7
    return model


def run(model: onnx.ModelProto) -> np.ndarray:
    x = {"x": np.arange(24, dtype=np.float32).reshape(4, 1, 6)}
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]


def test_a_model_older_than_opset_10_is_converted_to_13_with_the_same_outputs():
    model = sliced_state(9)
    converted = opset.importable(model)
    assert opset.default_opset(converted) == 13
    assert [len(node.input) for node in converted.graph.node if node.op_type == "Slice"] == [4, 4]
    np.testing.assert_array_equal(run(converted), run(model))


def test_a_model_of_opset_10_or_later_is_imported_as_it_is():
    model = sliced_state(11)
    assert opset.importable(model) is model


def test_a_model_onnx_cannot_convert_is_reported_with_the_fix():
    graph = helper.make_graph(
        [helper.make_node("Crop", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)])
    with pytest.raises(StageError) as caught:
        opset.raised_to(model, 13, needed_for="per-channel quantization", fix="set per_channel = false")
    assert caught.value.message.startswith(
        "the model is opset 8; per-channel quantization needs opset 13, and onnx could not convert it ("
    )
    assert caught.value.message.endswith("(fix: re-export the model at opset 13 or later or set per_channel = false)")


def test_tvm_imports_the_converted_model_and_not_the_original(tvm):
    from modelbuild.stages import onnx_import

    declared = {"x": {"shape": [4, 1, 6], "dtype": "float32"}}
    onnx_import.to_relax(sliced_state(9), declared)  # raised "Cannot cast <class 'NoneType'> to list of Expr"
    with pytest.raises(Exception, match="Cannot cast"):
        from tvm.relax.frontend.onnx import from_onnx

        from_onnx(sliced_state(9), {"x": [4, 1, 6]}, {"x": "float32"})


def resampled(op: str, version: int, mode: str, scales: list[float]) -> onnx.ModelProto:
    """x [1, 3, 6, 8] upsampled (or an opset-10 Resize) by constant scales."""
    node = helper.make_node(op, ["x", "scales"], ["y"], name="resize", mode=mode)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.array(scales, np.float32), "scales")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)])
    model.ir_version = 7
    return model


def resample(model: onnx.ModelProto) -> np.ndarray:
    x = {"x": np.random.default_rng(0).standard_normal((1, 3, 6, 8)).astype(np.float32)}
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]


@pytest.mark.parametrize(
    "op, version, mode, scales",
    [
        ("Upsample", 9, "linear", [1, 1, 2, 2]),  # an opset-9 bilinear Upsample: off by up to 1.4 as half_pixel
        ("Upsample", 9, "nearest", [1, 1, 1.5, 2.5]),
        ("Resize", 10, "linear", [1, 1, 0.5, 2]),
        ("Resize", 10, "nearest", [1, 1, 0.5, 0.5]),  # onnxruntime rounds up where it downsamples
    ],
)
def test_an_old_resize_keeps_its_coordinates_when_converted(op, version, mode, scales):
    model = resampled(op, version, mode, scales)
    converted = opset.raised_to(model, 13, needed_for="TVM's ONNX import")
    attributes = {a.name: helper.get_attribute_value(a) for a in converted.graph.node[-1].attribute}
    assert attributes["coordinate_transformation_mode"] == b"asymmetric"
    np.testing.assert_allclose(resample(converted), resample(model), rtol=1e-6, atol=1e-6)


def test_an_old_nearest_resize_that_upsamples_one_axis_and_downsamples_another_is_refused():
    with pytest.raises(StageError, match="upsamples one axis and downsamples another by nearest neighbour"):
        opset.raised_to(resampled("Resize", 10, "nearest", [1, 1, 0.5, 2]), 13, needed_for="TVM's ONNX import")


@pytest.mark.parametrize("mode, scales", [("linear", [1, 1, 2, 2]), ("nearest", [1, 1, 0.5, 0.5])])
def test_an_opset_10_resize_is_converted_and_computes_what_onnxruntime_does(tvm, mode, scales):
    """TVM's converter read opset 11's inputs and failed: "Type <class 'NoneType'> for size is currently
    unsupported"."""
    import tvm
    from tvm import relax

    from modelbuild.stages import onnx_import

    model = resampled("Resize", 10, mode, scales)
    module = onnx_import.to_relax(model, {"x": {"shape": [1, 3, 6, 8], "dtype": "float32"}})
    vm = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
    x = np.random.default_rng(0).standard_normal((1, 3, 6, 8)).astype(np.float32)
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), resample(model), rtol=1e-5, atol=1e-6)
