"""The quantize stage's ONNX half (no TVM): what the recipe's calibration fields do to onnxruntime's QDQ."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from modelbuild.errors import StageError
from modelbuild.recipe.schema import CalibrationSpec, QuantizationSpec
from modelbuild.stages.quantize import quantized
from tests.helpers.onnx_models import conv_then_upsample, spread_inside, uneven_channels, uneven_input

SAMPLES = [uneven_input(seed) for seed in range(4)]


def input_scale(qdq) -> float:
    """The scale of the QuantizeLinear that reads the model's input x."""
    initializers = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    node = next(n for n in qdq.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    return float(initializers[node.input[1]])


def test_the_calibration_percentile_reaches_onnxruntime(tmp_path):
    model = onnx.load(str(uneven_channels(tmp_path / "m.onnx")))

    def scale(percentile: float) -> float:
        calibration = CalibrationSpec(method="percentile", percentile=percentile)
        spec = QuantizationSpec(calibration=calibration, smoothing=False, bias_correction=False)
        return input_scale(quantized(model, SAMPLES, spec).qdq)

    everything = float(np.abs(np.concatenate([s["x"].ravel() for s in SAMPLES])).max()) / 127
    assert np.isclose(scale(100.0), everything, rtol=0.01)  # nothing clipped: the largest |x| sets the scale
    assert scale(90.0) < 0.5 * scale(100.0)  # the input's channels span 1..1000: the top 10% are far out


def test_entropy_calibration_clips_a_rare_outlier_that_minmax_keeps(tmp_path):
    """onnxruntime's quantize_static runs its entropy calibrator with 128 bins, where the only candidate
    range is the whole histogram: without the stage's own 2048-bin run, entropy gave minmax's scales."""
    model = onnx.load(str(uneven_channels(tmp_path / "m.onnx")))
    samples = [
        {"x": np.random.default_rng(seed).standard_normal((1, 8, 16, 16)).astype(np.float32)} for seed in range(4)
    ]
    samples[0]["x"][0, 0, 0, 0] = 1000.0  # one value in 8192, far out

    def scale(method: str) -> float:
        spec = QuantizationSpec(calibration=CalibrationSpec(method=method), smoothing=False, bias_correction=False)
        return input_scale(quantized(model, samples, spec).qdq)

    assert np.isclose(scale("minmax"), 1000.0 / 127, rtol=0.01)
    assert scale("entropy") < 0.2 * scale("minmax")  # 2048 bins over +-1000: no window under 64 bins a side


def test_a_node_to_leave_in_float_that_the_model_does_not_have_is_an_error(tmp_path):
    """onnxruntime ignores names it does not find: a name from before simplification left the layer
    quantized without a word."""
    model = onnx.load(str(uneven_channels(tmp_path / "m.onnx")))
    conv = next(n.name for n in model.graph.node if n.op_type == "Conv")
    spec = QuantizationSpec(exclude_nodes=["p2o.Conv.0"], smoothing=False, bias_correction=False)
    with pytest.raises(StageError, match=rf"exclude_nodes: no node named 'p2o.Conv.0'.*'{conv}'"):
        quantized(model, SAMPLES, spec)
    spec = spec.model_copy(update={"exclude_nodes": [conv]})
    qdq = quantized(model, SAMPLES, spec).qdq
    producers = {output: n.op_type for n in qdq.graph.node for output in n.output}
    kept = next(n for n in qdq.graph.node if n.name == conv)
    assert not any(producers.get(i) == "DequantizeLinear" for i in kept.input)  # left in float


def test_int16_nodes_read_int16_inputs_with_twice_the_calibrated_range(tmp_path):
    from modelbuild.quantization import activations
    from modelbuild.stages.quantize import INT16_HEADROOM

    model = onnx.load(str(uneven_channels(tmp_path / "m.onnx")))
    spec = QuantizationSpec(int16_nodes=["pointwise"], smoothing=False, bias_correction=False)
    result = quantized(model, SAMPLES, spec)
    initializers = {t.name: numpy_helper.to_array(t) for t in result.qdq.graph.initializer}
    quantizers = {n.output[0]: n for n in result.qdq.graph.node if n.op_type == "QuantizeLinear"}
    by_input = {n.input[0]: n for n in quantizers.values()}
    pointwise = next(n for n in model.graph.node if n.name == "pointwise")
    q16, q8 = by_input[pointwise.input[0]], by_input["x"]
    assert initializers[q16.input[2]].dtype == np.int16 and initializers[q8.input[2]].dtype == np.int8
    largest = max(
        float(np.abs(activations.compute(model, s, [pointwise.input[0]])[pointwise.input[0]]).max()) for s in SAMPLES
    )
    assert np.isclose(float(initializers[q16.input[1]]), INT16_HEADROOM * largest / 32767, rtol=1e-3)
    assert result.int16_nodes == ["pointwise"]


def test_int16_most_sensitive_picks_the_layer_whose_int8_quantization_loses_most(tmp_path):
    model = spread_inside(tmp_path / "m.onnx")
    even = [{"x": np.random.default_rng(seed).standard_normal((1, 8, 16, 16)).astype(np.float32)} for seed in range(4)]
    spec = QuantizationSpec(int16_most_sensitive=1, smoothing=False, bias_correction=False)
    assert quantized(model, even, spec).int16_nodes == ["pointwise"]


def test_int16_for_every_node_and_unknown_int16_names(tmp_path):
    model = onnx.load(str(uneven_channels(tmp_path / "m.onnx")))
    spec = QuantizationSpec(int16_nodes=["*"], smoothing=False, bias_correction=False)
    assert quantized(model, SAMPLES, spec).int16_nodes == ["depthwise", "pointwise"]
    spec = spec.model_copy(update={"int16_nodes": ["pointwize"]})
    with pytest.raises(StageError, match="int16_nodes: no node named 'pointwize'"):
        quantized(model, SAMPLES, spec)


def test_a_model_whose_nodes_have_no_names_or_the_same_name_is_quantized_as_a_named_one(tmp_path):
    """onnx.helper names no node: every conv's name was "", and smoothing looked for a conv's weights on the
    node after it (IndexError)."""
    model = onnx.load(str(uneven_channels(tmp_path / "m.onnx")))
    expected = quantized(model, SAMPLES, QuantizationSpec())
    for names in (["", "", ""], ["conv", "conv", "pool"]):
        for node, name in zip(model.graph.node, names):
            node.name = name
        result = quantized(model, SAMPLES, QuantizationSpec())
        assert (result.smoothed, result.corrected) == (expected.smoothed, expected.corrected) == (2, 2)
        assert len({n.name for n in result.model.graph.node}) == len(result.model.graph.node)


def test_a_transposed_conv_is_quantized_by_default(tmp_path):
    """Its input and weights dequantized from int8, as a conv's: float, a U-Net's 2x2 upsamplings ran
    channels-last and were read back in NCHW by the skips' concatenations (unet_ish's int8 library 0.72x
    quantized)."""
    model = onnx.load(str(conv_then_upsample(tmp_path / "m.onnx")))
    samples = [{"x": np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)} for seed in range(4)]
    qdq = quantized(model, samples, QuantizationSpec()).qdq
    made_by = {out: node.op_type for node in qdq.graph.node for out in node.output}
    upsample = next(n for n in qdq.graph.node if n.op_type == "ConvTranspose")
    assert [made_by.get(name) for name in upsample.input[:2]] == ["DequantizeLinear", "DequantizeLinear"]
