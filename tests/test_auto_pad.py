"""A Conv's SAME padding made explicit, against onnxruntime's own SAME padding: no TVM."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelbuild.frontend import auto_pad


def same_conv(
    mode: str, *, kernel: int, stride: int, size: tuple[int, int], dims: list | None = None
) -> onnx.ModelProto:
    weight = np.random.default_rng(0).standard_normal((4, 3, kernel, kernel)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", auto_pad=mode, strides=[stride, stride])
    graph = helper.make_graph(
        [node],
        "same",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims or [1, 3, *size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(weight, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize(
    "kernel, stride, size",
    [  # no dilation: onnxruntime refuses it with SAME padding
        (2, 1, (24, 160)),  # the v6 recogniser's stem: one pixel of padding, at one end
        (3, 2, (7, 10)),  # odd and even sizes under a stride
        (4, 3, (11, 9)),
    ],
)
def test_explicit_pads_compute_what_same_padding_does(mode, kernel, stride, size):
    model = same_conv(mode, kernel=kernel, stride=stride, size=size)
    resolved = auto_pad.resolve(model)
    attributes = {a.name for a in resolved.graph.node[0].attribute}
    assert "auto_pad" not in attributes and "pads" in attributes
    x = np.random.default_rng(1).standard_normal((1, 3, *size)).astype(np.float32)
    np.testing.assert_allclose(run(resolved, x), run(model, x), rtol=1e-5, atol=1e-5)


def test_the_odd_pixel_goes_at_the_end_for_same_upper_and_the_beginning_for_same_lower():
    assert auto_pad.same_pads([24, 160], [2, 2], [1, 1], [1, 1], upper=True) == [0, 0, 1, 1]
    assert auto_pad.same_pads([24, 160], [2, 2], [1, 1], [1, 1], upper=False) == [1, 1, 0, 0]


def test_a_conv_of_unknown_input_size_and_a_model_without_same_padding_are_left_alone():
    unknown = same_conv("SAME_UPPER", kernel=2, stride=1, size=(8, 8), dims=[1, 3, "h", "w"])
    assert [a.name for a in auto_pad.resolve(unknown).graph.node[0].attribute if a.name == "auto_pad"] == ["auto_pad"]
    plain = same_conv("NOTSET", kernel=3, stride=1, size=(8, 8))
    assert auto_pad.resolve(plain) is plain
