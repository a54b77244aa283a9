"""Bias correction: the mean error int8 leaves in each conv's output, measured and taken out of its bias."""

from __future__ import annotations

import numpy as np
import onnx

from modelbuild.quantization import activations, bias_correction
from modelbuild.quantization.bias_correction import _corrected
from modelbuild.recipe.schema import QuantizationSpec
from modelbuild.stages.quantize import quantized
from tests.helpers.onnx_models import (
    quantized_without_and_with,
    two_convs,
    uneven_channels,
    uneven_input,
)

SAMPLES = [uneven_input(seed) for seed in range(8)]


def mean_error(model, qdq) -> np.ndarray:
    """Per channel, the pooled output's error averaged over held-out samples."""
    samples = [uneven_input(seed) for seed in range(100, 116)]
    return np.mean(
        [activations.compute(qdq, s, ["y"])["y"] - activations.compute(model, s, ["y"])["y"] for s in samples], axis=0
    ).ravel()


def test_correction_takes_out_most_of_the_mean_error(tmp_path):
    model = onnx.load(str(uneven_channels(tmp_path / "m.onnx")))
    plain, corrected = quantized_without_and_with(model, SAMPLES, "bias_correction")
    assert (plain.corrected, corrected.corrected) == (0, 2)
    before, after = np.abs(mean_error(model, plain.qdq)), np.abs(mean_error(model, corrected.qdq))
    assert after.mean() < 0.3 * before.mean(), (before, after)


def test_only_convs_with_quantized_data_and_an_int32_bias_are_corrected(tmp_path):
    with_biases = onnx.load(str(uneven_channels(tmp_path / "m.onnx")))
    spec = QuantizationSpec(smoothing=False, bias_correction=False)
    qdq = quantized(with_biases, SAMPLES, spec).qdq
    assert [node.name for node, _, _ in bias_correction.correctable(qdq)] == ["depthwise", "pointwise"]
    one_quantized = quantized(with_biases, SAMPLES, spec.model_copy(update={"exclude_nodes": ["pointwise"]})).qdq
    assert [node.name for node, _, _ in bias_correction.correctable(one_quantized)] == ["depthwise"]
    without_biases = onnx.load(str(two_convs(tmp_path / "n.onnx")))
    samples = [{"x": np.random.default_rng(i).standard_normal((1, 3, 8, 8)).astype(np.float32)} for i in range(2)]
    assert bias_correction.correctable(quantized(without_biases, samples, spec).qdq) == []


def test_a_corrected_bias_moves_by_whole_steps_and_stays_int32():
    bias = np.array([10, -10, 2**31 - 2], np.int32)
    steps = np.array([0.5, 0.25, 1.0])
    assert _corrected(bias, np.array([1.0, -1.0, -5.0]), steps).tolist() == [8, -6, 2**31 - 1]
    assert _corrected(bias, np.array([0.2, 0.0, 0.0]), np.array(0.5)).tolist() == [10, -10, 2**31 - 2]
