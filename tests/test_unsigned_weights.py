"""int8 weights as uint8 for onnxruntime's reference: the same model, computed exactly (no TVM needed)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

from modelbuild.frontend import qoperator
from modelbuild.validation.unsigned_weights import unsigned_weights
from tests.helpers.onnx_models import INTEGER_OPS, conv_then_dense, integer_op, quantized_qdq


def run(model: onnx.ModelProto, feed: dict, *, optimised: bool = True) -> np.ndarray:
    options = ort.SessionOptions()
    if not optimised:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feed)[
        0
    ]


def exact(op: str, model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The integer op's sums in int64, from its own initializers: what ONNX says it computes."""
    constants = {t.name: onnx.numpy_helper.to_array(t).astype(np.int64) for t in model.graph.initializer}
    node = model.graph.node[0]
    shifted_x = x.astype(np.int64) - constants[node.input[2]]
    shifted_w = constants[node.input[1]] - (constants[node.input[3]] if len(node.input) > 3 else 0)
    if op == "MatMulInteger":
        return shifted_x @ shifted_w
    padded = np.pad(shifted_x, ((0, 0), (0, 0), (1, 1), (1, 1)))  # pads with the zero point: 0 once shifted
    windows = np.lib.stride_tricks.sliding_window_view(padded, shifted_w.shape[2:], axis=(2, 3))
    return np.einsum("ncyxkl,ockl->noyx", windows, shifted_w)


@pytest.mark.parametrize("weight_zero", [True, False], ids=["weight-zero-point", "none"])
@pytest.mark.parametrize("op", sorted(INTEGER_OPS))
def test_integer_ops_weights_become_uint8_and_their_sums_exact(tmp_path, op, weight_zero):
    model = onnx.load(str(integer_op(tmp_path / "m.onnx", op)))
    if not weight_zero:
        model.graph.node[0].input.pop()
    rewritten = unsigned_weights(model)
    node = rewritten.graph.node[0]
    constants = {t.name: t for t in rewritten.graph.initializer}
    assert node.input[1] in constants and constants[node.input[1]].data_type == TensorProto.UINT8
    assert constants[node.input[3]].data_type == TensorProto.UINT8
    assert "w" not in constants and ("w_zero" not in constants or not weight_zero)  # int8 originals unread: gone
    # 255 everywhere: any two full-range int8 weights of one sign overflow a 16-bit pair sum
    for x in (
        np.full(INTEGER_OPS[op][0], 255, np.uint8),
        np.random.default_rng(1).integers(0, 256, INTEGER_OPS[op][0]).astype(np.uint8),
    ):
        got = run(rewritten, {"x": x})
        assert got.dtype == np.int32 and np.array_equal(got, exact(op, model, x))


def test_qlinear_conv_and_matmul_on_uint8_activations_agree_with_their_exact_qdq_form(tmp_path):
    path = quantized_qdq(
        conv_then_dense(tmp_path / "m.onnx"),
        tmp_path / "q.onnx",
        [1, 3, 8, 8],
        quant_format="QOperator",
        activations="QUInt8",
    )
    model = onnx.load(str(path))
    rewritten = unsigned_weights(model)
    assert [n.op_type for n in rewritten.graph.node] == [n.op_type for n in model.graph.node]
    constants = {t.name: t for t in rewritten.graph.initializer}
    weights = [n.input[3] for n in rewritten.graph.node if n.op_type in ("QLinearConv", "QLinearMatMul")]
    assert len(weights) == 2 and all(constants[w].data_type == TensorProto.UINT8 for w in weights)
    qdq = qoperator.to_qdq(model)  # dequantize, float op, quantize: no 8-bit kernel to saturate
    output_scale = next(
        onnx.numpy_helper.to_array(constants[n.input[6]]) for n in model.graph.node if n.op_type == "QLinearMatMul"
    )
    for seed in range(4):
        x = {"x": (np.random.default_rng(90 + seed).standard_normal((1, 3, 8, 8)) * 3).astype(np.float32)}
        # the same integer sums; the requantization may round one step apart
        assert np.abs(run(rewritten, x) - run(qdq, x, optimised=False)).max() <= 1.01 * output_scale


def test_int8_activations_and_float_models_are_left_as_they_are(tmp_path):
    float_model = conv_then_dense(tmp_path / "m.onnx")
    signed = quantized_qdq(
        float_model, tmp_path / "q.onnx", [1, 3, 8, 8], quant_format="QOperator", activations="QInt8"
    )
    assert "QLinearConv" in {n.op_type for n in onnx.load(str(signed)).graph.node}
    assert unsigned_weights(onnx.load(str(signed))) is None
    assert unsigned_weights(onnx.load(str(float_model))) is None
