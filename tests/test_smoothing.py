"""Activation smoothing: exact in float, and what it buys int8 when channels differ in scale."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from modelbuild.quantization import activations, smoothing
from modelbuild.validation.metrics import sqnr_db
from tests.helpers.onnx_models import quantized_without_and_with, uneven_channels, uneven_input

SAMPLES = [uneven_input(seed) for seed in range(4)]
HELD_OUT = uneven_input(99)


def smoothed(model):
    convs = smoothing.conv_inputs(model)
    return smoothing.smooth(model, smoothing.channel_ranges(model, SAMPLES, sorted(convs)), convs)


def output(model, sample=HELD_OUT) -> np.ndarray:
    return activations.compute(model, sample, ["y"])["y"]


def test_a_smoothed_model_computes_the_same_function_in_float(tmp_path):
    model = onnx.load(str(uneven_channels(tmp_path / "m.onnx")))
    result = smoothed(model)
    assert [n.name for n in result.graph.node if n.op_type == "Mul"] == ["depthwise/smoothed", "pointwise/smoothed"]
    np.testing.assert_allclose(output(result), output(model), rtol=1e-4, atol=1e-3)
    # the replaced float weights are gone, not carried along as dead initializers
    assert {t.name for t in result.graph.initializer} & {"dw_w", "pw_w"} == set()


def test_smoothing_divides_each_channel_by_its_calibrated_magnitude(tmp_path):
    model = onnx.load(str(uneven_channels(tmp_path / "m.onnx")))
    ranges = smoothing.channel_ranges(model, SAMPLES, ["x"])
    assert ranges["x"].shape == (8,) and ranges["x"][-1] / ranges["x"][0] > 500  # the 1..1000 spread, seen
    result = smoothed(model)
    divided = activations.compute(result, HELD_OUT, ["depthwise/smoothed/input"])["depthwise/smoothed/input"]
    per_channel = np.abs(divided).max(axis=(0, 2, 3))
    assert per_channel.max() / per_channel.min() < 3  # from 1000x to about even


def test_smoothing_makes_int8_accurate_where_channels_differ_in_scale(tmp_path):
    model = onnx.load(str(uneven_channels(tmp_path / "m.onnx")))
    plain, smooth = quantized_without_and_with(model, SAMPLES, "smoothing")
    assert (plain.smoothed, smooth.smoothed) == (0, 2)
    # the depthwise conv's output, channel by channel: one scale for all leaves the small channels few levels
    want = activations.compute(model, HELD_OUT, ["d"])["d"][0]

    def worst_channel(qdq) -> float:
        got = activations.compute(qdq, HELD_OUT, ["d"])["d"][0]
        return min(sqnr_db(g.ravel(), w.ravel()) for g, w in zip(got, want))

    before, after = worst_channel(plain.qdq), worst_channel(smooth.qdq)
    assert after > before + 20, (before, after)


def test_grouped_convs_and_unseen_inputs_are_left_alone(tmp_path):
    model = onnx.load(str(uneven_channels(tmp_path / "m.onnx")))
    grouped = next(n for n in model.graph.node if n.name == "pointwise")
    grouped.attribute.append(helper.make_attribute("group", 2))
    weight = next(t for t in model.graph.initializer if t.name == "pw_w")
    weight.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(weight)[:, :4], "pw_w"))
    convs = smoothing.conv_inputs(model)
    result = smoothing.smooth(model, {}, convs)  # no ranges: nothing was calibrated
    assert [n.op_type for n in result.graph.node] == ["Conv", "Conv", "GlobalAveragePool"]
    ranges = smoothing.channel_ranges(model, SAMPLES, sorted(convs))
    result = smoothing.smooth(model, ranges, convs)
    assert [n.name for n in result.graph.node if n.op_type == "Mul"] == ["depthwise/smoothed"]


def test_a_1d_conv_is_smoothed_with_a_divisor_of_its_own_rank():
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv1d", pads=[1, 1])],
        "conv1d",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 32])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 6, 32])],
        initializer=[onnx.numpy_helper.from_array(rng.standard_normal((6, 4, 3)).astype(np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    samples = [{"x": (rng.standard_normal((1, 4, 32)) * [[[1], [10], [100], [1000]]]).astype(np.float32)}]
    convs = smoothing.conv_inputs(model)
    result = smoothing.smooth(model, smoothing.channel_ranges(model, samples, sorted(convs)), convs)
    np.testing.assert_allclose(output(result, samples[0]), output(model, samples[0]), rtol=1e-4, atol=1e-2)


def sparse_channel_input(seed: int) -> dict:
    """[1, 4, 64, 64]: three channels of ordinary noise, and a fourth that is zero but at one pixel (as a
    ReLU channel that almost never fires), where it is 4x the others' largest values."""
    rng = np.random.default_rng(seed)
    x = np.abs(rng.standard_normal((1, 4, 64, 64))).astype(np.float32)
    x[0, 3] = 0.0
    x[0, 3, rng.integers(64), rng.integers(64)] = 4 * x[0, :3].max()
    return {"x": x}


def test_a_channel_that_almost_never_fires_does_not_set_the_divided_tensors_range():
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="depthwise", pads=[1, 1, 1, 1], group=4)],
        "sparse",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 64, 64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 64, 64])],
        initializer=[onnx.numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype(np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    samples = [sparse_channel_input(seed) for seed in range(4)]
    ranges = smoothing.channel_ranges(model, samples, ["x"])["x"]
    # its 99.9th percentile is 0; its one value may exceed what it is divided by only OUTLIER_HEADROOM times
    peak = max(float(s["x"][0, 3].max()) for s in samples)
    assert ranges[3] == peak / smoothing.OUTLIER_HEADROOM
    # so int8 keeps the ordinary channels: divided by a percentile near 0, the one pixel became the int8
    # range, and every other value rounded to 0 (SQNR about 0 dB)
    from modelbuild.recipe.schema import QuantizationSpec
    from modelbuild.stages.quantize import quantized

    qdq = quantized(model, samples, QuantizationSpec(bias_correction=False)).qdq
    held_out = sparse_channel_input(99)
    want, got = output(model, held_out)[0, :3], output(qdq, held_out)[0, :3]
    assert sqnr_db(got.ravel(), want.ravel()) > 30
