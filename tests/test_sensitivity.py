"""Per-layer sensitivity: each quantized layer alone, and its share of the output error."""

from __future__ import annotations

import numpy as np
import onnx

from modelbuild.quantization import activations, sensitivity
from modelbuild.recipe.schema import QuantizationSpec
from modelbuild.stages.quantize import quantized
from tests.helpers.onnx_models import spread_inside

CHANNELS = 8  # spread_inside's default


SAMPLES = [
    {"x": np.random.default_rng(seed).standard_normal((1, CHANNELS, 16, 16)).astype(np.float32)} for seed in range(4)
]


def quantize(model):
    spec = QuantizationSpec(smoothing=False, bias_correction=False)
    return quantized(model, SAMPLES, spec)


def run(model) -> np.ndarray:
    sess = activations.session(model)
    return np.concatenate([sess.run(None, activations.feed(sess, s))[0].ravel() for s in SAMPLES])


def dequantized_inputs(model, node_name: str) -> list[int]:
    producers = {name: n.op_type for n in model.graph.node for name in n.output}
    node = next(n for n in model.graph.node if n.name == node_name)
    return [i for i, name in enumerate(node.input) if producers.get(name) == "DequantizeLinear"]


def test_with_no_layer_kept_the_copy_computes_the_float_model_exactly(tmp_path):
    result = quantize(spread_inside(tmp_path / "m.onnx"))
    alone = sensitivity.isolated(result.qdq, result.prepared, None)
    assert not any(n.op_type == "DequantizeLinear" for n in alone.graph.node)
    np.testing.assert_array_equal(run(alone), run(result.prepared))


def test_the_kept_layer_alone_reads_dequantized_data_and_weights_and_a_float_bias(tmp_path):
    result = quantize(spread_inside(tmp_path / "m.onnx"))
    assert sensitivity.quantized_nodes(result.qdq) == ["depthwise", "pointwise"]
    assert dequantized_inputs(result.qdq, "pointwise") == [0, 1, 2]  # onnxruntime's int32 bias too
    alone = sensitivity.isolated(result.qdq, result.prepared, "pointwise")
    assert dequantized_inputs(alone, "pointwise") == [0, 1]
    assert dequantized_inputs(alone, "depthwise") == []
    assert not np.array_equal(run(alone), run(result.prepared))


def test_the_layer_that_reads_the_spread_channels_causes_nearly_all_the_error(tmp_path):
    result = quantize(spread_inside(tmp_path / "m.onnx"))
    shares = sensitivity.layer_shares(result.qdq, result.prepared, SAMPLES, corrected=False)
    rows = {r["node"]: r for r in shares["layers"]}
    assert rows["pointwise"]["share"] > 0.85 and rows["pointwise"]["op"] == "Conv"
    assert rows["pointwise"]["sqnr_db"] < rows["depthwise"]["sqnr_db"] - 6
    assert sensitivity.largest(list(rows.values())) == [rows["pointwise"]]
    # the layers' errors add up to the whole model's, so a share is what leaving a layer in float removes
    whole = float(np.mean((run(result.qdq) - run(result.prepared)) ** 2))
    assert np.isclose(shares["sum_over_whole"], sum(r["error_power"] for r in rows.values()) / whole)
    assert 0.9 < shares["sum_over_whole"] < 1.1


def test_a_layer_alone_is_measured_after_its_own_bias_correction_as_the_whole_model_is_built(tmp_path):
    result = quantize(spread_inside(tmp_path / "m.onnx"))

    def errors(corrected: bool) -> dict:
        return {
            r["node"]: r["error_power"]
            for r in sensitivity.layer_shares(result.qdq, result.prepared, SAMPLES, corrected=corrected)["layers"]
        }

    plain, corrected = errors(False), errors(True)
    # the pooled output shows each layer's mean error, which the bias takes out
    assert corrected["pointwise"] < 0.9 * plain["pointwise"] and corrected["depthwise"] < plain["depthwise"]


def test_measured_on_its_data_alone_a_layer_leaves_out_its_weights_error(tmp_path):
    """What int16 inputs would remove: with per-tensor weights, the depthwise conv's channels 1 to 1000 apart
    round badly, but its data does not."""
    spec = QuantizationSpec(smoothing=False, bias_correction=False, per_channel=False)
    result = quantized(spread_inside(tmp_path / "m.onnx"), SAMPLES, spec)
    alone = sensitivity.isolated(result.qdq, result.prepared, "depthwise", sensitivity.DATA)
    assert dequantized_inputs(alone, "depthwise") == [0]

    def error_power(kept_inputs) -> dict:
        return {
            r["node"]: r["error_power"]
            for r in sensitivity.layer_shares(
                result.qdq, result.prepared, SAMPLES, corrected=False, kept_inputs=kept_inputs
            )["layers"]
        }

    both, data = error_power(sensitivity.DATA_AND_WEIGHTS), error_power(sensitivity.DATA)
    assert data["depthwise"] < 0.1 * both["depthwise"]
    assert data["pointwise"] > 0.8 * both["pointwise"]  # its weights round well: its error is its data's


def test_an_output_a_softmax_makes_is_measured_before_it(tmp_path):
    """Probabilities weigh each sample's error by p (1 - p): a few near-ties would decide the ranking."""
    model = spread_inside(tmp_path / "m.onnx")
    graph = model.graph
    graph.node.extend(
        [
            onnx.helper.make_node("Flatten", ["y"], ["logits"], name="flatten"),
            onnx.helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax"),
        ]
    )
    del graph.output[:]
    graph.output.extend([onnx.helper.make_tensor_value_info("probabilities", onnx.TensorProto.FLOAT, [1, CHANNELS])])
    assert sensitivity.measured_outputs(model) == ["logits"]
    assert sensitivity.measured_outputs(spread_inside(tmp_path / "plain.onnx")) == ["y"]
    result = quantize(model)
    shares = sensitivity.layer_shares(result.qdq, result.prepared, SAMPLES, corrected=False)
    assert max(shares["layers"], key=lambda r: r["share"])["node"] == "pointwise"
    assert 0.9 < shares["sum_over_whole"] < 1.1  # the logits' errors add up as the pooled map's did


def test_small_inputs_get_more_samples_than_large_ones_counted_not_timed():
    line, page = {"x": np.zeros((1, 3, 48, 192), np.float32)}, {"x": np.zeros((1, 3, 640, 640), np.float32)}
    assert sensitivity.sample_count(line) == 16 and sensitivity.sample_count(page) == 4
    assert sensitivity.sample_count({"x": np.zeros((1, 3, 160, 160), np.float32)}) == 6


def test_the_fewest_layers_that_cause_the_share_come_largest_first():
    rows = [{"node": n, "share": s} for n, s in (("a", 0.1), ("b", 0.45), ("c", 0.3), ("d", 0.15))]
    assert [r["node"] for r in sensitivity.largest(rows, 0.45)] == ["b"]
    assert [r["node"] for r in sensitivity.largest(rows, 0.5)] == ["b", "c"]
    assert [r["node"] for r in sensitivity.largest(rows, 1.0)] == ["b", "c", "d", "a"]
