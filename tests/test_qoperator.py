"""Pre-quantized QOperator models in QDQ form, against onnxruntime running the original: no TVM needed."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from modelbuild.frontend import qoperator
from tests.helpers.onnx_models import (
    INTEGER_OPS,
    conv_then_dense,
    dynamically_quantized,
    integer_op,
    mixed_ops,
    quantized_qdq,
)


def run(model, feed: dict) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]


def test_qlinear_conv_and_matmul_become_dequantize_float_op_quantize(tmp_path):
    # 7-bit weights: onnxruntime's 8-bit kernels on x86 without VNNI (AVX2: vpmaddubsw) saturate 16-bit pair
    # sums of full-range weights, and the QOperator model ran up to 5 steps from its own QDQ form on Zen 3
    path = quantized_qdq(
        conv_then_dense(tmp_path / "m.onnx"),
        tmp_path / "q.onnx",
        [1, 3, 8, 8],
        quant_format="QOperator",
        reduce_range=True,
    )
    model = onnx.load(str(path))
    assert {"QLinearConv", "QLinearMatMul"} <= {n.op_type for n in model.graph.node}
    rewritten = qoperator.to_qdq(model)
    ops = [n.op_type for n in rewritten.graph.node]
    assert not set(qoperator.QOPERATORS) & set(ops) and "Conv" in ops and "MatMul" in ops
    output_scale = next(
        onnx.numpy_helper.to_array(t)
        for t in model.graph.initializer
        if t.name == next(n for n in model.graph.node if n.op_type == "QLinearMatMul").input[6]
    )
    for seed in range(4):
        x = {"x": np.random.default_rng(50 + seed).standard_normal((1, 3, 8, 8)).astype(np.float32)}
        want, got = run(model, x), run(rewritten, x)
        # the same integer sums; the requantization may round one step apart
        assert np.abs(got - want).max() <= 1.01 * output_scale


@pytest.mark.parametrize("op", sorted(INTEGER_OPS))
def test_conv_and_matmul_integer_are_exact_with_their_zero_points(tmp_path, op):
    model = onnx.load(str(integer_op(tmp_path / "m.onnx", op)))
    rewritten = qoperator.to_qdq(model)
    x = {"x": np.random.default_rng(0).integers(0, 256, INTEGER_OPS[op][0]).astype(np.uint8)}
    want, got = run(model, x), run(rewritten, x)
    assert got.dtype == np.int32 and np.array_equal(got, want)


def test_dynamic_quantization_keeps_its_run_time_zero_points_and_its_float_sums(tmp_path):
    """The zero points DynamicQuantizeLinear computes are dequantized with the constant scale one (integer_ops
    looks for it), and Cast<float> of a MatMulInteger or ConvInteger reads the float sum directly: no
    float -> int32 -> float round trip per element."""
    model = onnx.load(str(dynamically_quantized(conv_then_dense(tmp_path / "m.onnx"), tmp_path / "q.onnx")))
    assert {"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear", "Cast"} <= {n.op_type for n in model.graph.node}
    rewritten = qoperator.to_qdq(model)
    constants = {t.name for t in rewritten.graph.initializer}
    run_time = {n.output[2] for n in rewritten.graph.node if n.op_type == "DynamicQuantizeLinear"}
    dequantized = [
        n for n in rewritten.graph.node if n.op_type == "DequantizeLinear" and n.input[2:] and n.input[2] in run_time
    ]
    assert len(dequantized) == 2 and all(n.input[1] in constants for n in dequantized)
    ops = {n.op_type for n in rewritten.graph.node}
    assert not ops & {"Cast", *qoperator.INTEGER_OPS}
    for seed in range(4):
        x = {"x": np.random.default_rng(60 + seed).standard_normal((1, 3, 8, 8)).astype(np.float32)}
        # the float sums are integers below 2^24, exact as onnxruntime's int32 sums
        assert np.array_equal(run(rewritten, x), run(model, x))


def test_a_model_without_qoperators_is_returned_as_it_is(tmp_path):
    model = onnx.load(str(conv_then_dense(tmp_path / "m.onnx")))
    assert qoperator.to_qdq(model) is model


def test_onnxruntimes_contrib_element_wise_ops_become_float_ops_between_dequantize_and_quantize(tmp_path):
    path = quantized_qdq(
        mixed_ops(tmp_path / "m.onnx"),
        tmp_path / "q.onnx",
        [1, 3, 8, 8],
        quant_format="QOperator",
        activations="QUInt8",
    )
    model = onnx.load(str(path))
    contrib = {n.op_type for n in model.graph.node if n.domain == qoperator.CONTRIB}
    assert contrib == set(qoperator.ELEMENTWISE)  # every one the rewrite knows, none it does not
    rewritten = qoperator.to_qdq(model)
    assert not any(n.domain == qoperator.CONTRIB for n in rewritten.graph.node)
    for seed in range(4):
        x = {"x": np.random.default_rng(70 + seed).standard_normal((1, 3, 8, 8)).astype(np.float32)}
        want, got = run(model, x), run(rewritten, x)
        assert np.abs(got - want).max() <= 2 / 256  # softmax probabilities, quantized to 1/256 steps
