"""Per-layer sensitivity: how much of the int8 model's output error each quantized layer causes on its own.

The SQNR table (quantize.layer_sqnr) shows where the error is, not where it comes from: every layer after
the first noisy one inherits its error. Here each quantized layer is quantized alone (its input and weights
as in the QDQ model, every other layer in float, its bias corrected for its own mean error when the recipe
corrects biases) and the error it leaves in the model's outputs (before a final Softmax: see
measured_outputs) is measured on calibration samples. Where rounding errors of different layers are
independent, these error powers add up to the whole QDQ model's, and a layer's share is about what leaving
it in float removes: on the bundled classifier they summed to 0.64-0.93x the whole model's over three
windows of 16 lines. They need not: on the bundled detector the layers alone summed to 4.9x the whole
model's error, whose bias corrections also absorb the mean error of the layers before them; there the
shares only rank the layers. The sum over the whole is recorded, and the report says which case it is.
"""

from __future__ import annotations

import numpy as np

from modelbuild.quantization import activations, bias_correction
from modelbuild.quantization.smoothing import drop_unused_initializers
from modelbuild.validation.metrics import sqnr_db

# Two model runs per quantized layer and sample. A classifier has a few outputs per sample where a dense
# map has many, so it needs more samples, and its small inputs make them cheap: as many samples as fit
# SAMPLE_ELEMENTS input values, between 4 (the detector, 1.2M values a page: ~40 s) and 16 (the
# classifier, 28k a line: ~8 s). Counted, not timed, so every machine measures the same samples.
MIN_SAMPLES, MAX_SAMPLES, SAMPLE_ELEMENTS = 4, 16, 500_000


def sample_count(sample: dict) -> int:
    """How many samples like `sample` the sensitivity measure reads."""
    elements = sum(int(np.asarray(value).size) for value in sample.values())
    return max(MIN_SAMPLES, min(MAX_SAMPLES, SAMPLE_ELEMENTS // max(elements, 1)))


# Conv's and Gemm's third input is the bias: its int32 rounding is negligible, and bias correction
# (bias_correction.py) tuned it to cancel the error of the layers before, which are in float here
DATA_AND_WEIGHTS, DATA = (0, 1), (0,)


def isolated(qdq, float_model, keep: str | None, kept_inputs: tuple[int, ...] = DATA_AND_WEIGHTS):
    """A copy of `qdq` in which only the node named `keep` reads quantize/dequantize pairs (for its inputs
    `kept_inputs`, its data and weights by default; its bias is the float one); every other quantized node
    reads the tensors it reads in `float_model` (the model onnxruntime quantized, node names shared). With
    keep None, the result computes `float_model`'s function."""
    import onnx
    from onnx import numpy_helper

    floats = {node.name: node for node in float_model.graph.node}
    float_constants = {t.name: t for t in float_model.graph.initializer}
    producers = {name: node for node in qdq.graph.node for name in node.output}
    model = onnx.ModelProto()
    model.CopyFrom(qdq)
    constants = {}
    for node in model.graph.node:
        if node.name not in floats:
            continue
        for i, name in enumerate(node.input):
            if producers.get(name) is None or producers[name].op_type != "DequantizeLinear":
                continue
            if node.name == keep and i in kept_inputs:
                continue
            source = floats[node.name].input[i]
            if source in float_constants:
                # onnxruntime names a dequantized bias as the float bias was: the float copy needs its own name
                constants[source + FLOAT_SUFFIX] = numpy_helper.to_array(float_constants[source])
                source += FLOAT_SUFFIX
            node.input[i] = source
    model.graph.initializer.extend(numpy_helper.from_array(value, name) for name, value in constants.items())
    _prune(model)
    return model


FLOAT_SUFFIX = "/float"
BIAS_INPUT = 2


def _prune(model) -> None:
    """Drop the nodes and initializers nothing reads any more."""
    graph = model.graph
    needed = {o.name for o in graph.output}
    kept = []
    for node in reversed(graph.node):
        if any(name in needed for name in node.output):
            kept.append(node)
            needed.update(node.input)
    del graph.node[:]
    graph.node.extend(reversed(kept))
    drop_unused_initializers(model)


def quantized_nodes(qdq) -> list[str]:
    """Names of the nodes that read a dequantized tensor, in execution order."""
    producers = {name: node.op_type for node in qdq.graph.node for name in node.output}
    return [
        node.name
        for node in qdq.graph.node
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear")
        and any(producers.get(name) == "DequantizeLinear" for name in node.input)
    ]


def layer_shares(
    qdq, float_model, samples: list[dict], *, corrected: bool = True, kept_inputs: tuple[int, ...] = DATA_AND_WEIGHTS
) -> dict:
    """Per quantized node, in execution order ("layers"): the output error power it causes alone (its inputs
    `kept_inputs` quantized), as SQNR of the outputs (dB) and as a share of the sum over all nodes; and that
    sum over the whole QDQ model's error power ("sum_over_whole": near 1 where the layers' errors add up).
    With `corrected`, each layer alone first has its own mean error taken out of its bias, as bias
    correction does in the whole model."""
    samples = samples[: sample_count(samples[0])]
    nodes = quantized_nodes(qdq)
    outputs = measured_outputs(float_model)
    tensors = {node.name: node.output[0] for node in qdq.graph.node if node.name in nodes}
    reference_sess = activations.session(activations.exposed(float_model, [*tensors.values(), *outputs]))
    reference = [
        dict(
            zip(
                [o.name for o in reference_sess.get_outputs()],
                reference_sess.run(None, activations.feed(reference_sess, s)),
            )
        )
        for s in samples
    ]
    want = _flat(reference, outputs)
    ops = {node.name: node.op_type for node in qdq.graph.node}
    rows = []
    for name in nodes:
        got = _flat(
            _alone(isolated(qdq, float_model, name, kept_inputs), name, tensors[name], samples, reference, corrected),
            outputs,
        )
        rows.append(
            {
                "node": name,
                "op": ops[name],
                "error_power": float(np.mean((got - want) ** 2)),
                "sqnr_db": sqnr_db(got, want),
            }
        )
    total = sum(r["error_power"] for r in rows)
    for r in rows:
        r["share"] = r["error_power"] / total if total else 0.0
    whole = activations.session(activations.exposed(qdq, outputs))
    error = float(
        np.mean(
            (
                _flat([dict(zip(outputs, whole.run(outputs, activations.feed(whole, s)))) for s in samples], outputs)
                - want
            )
            ** 2
        )
    )
    return {"layers": rows, "samples": len(samples), "sum_over_whole": total / error if error else None}


def _alone(model, name: str, tensor: str, samples: list[dict], reference: list[dict], corrected: bool) -> list[dict]:
    """The outputs of `model` (one layer quantized) on each sample; with `corrected` and a float bias, after
    that layer's mean error per channel (its output `tensor` against `reference`) is taken out of the bias."""
    import onnx
    from onnx import numpy_helper

    node = next(n for n in model.graph.node if n.name == name)
    constants = {t.name: t for t in model.graph.initializer}
    bias = constants.get(node.input[BIAS_INPUT]) if corrected and len(node.input) > BIAS_INPUT else None
    probe = activations.exposed(model, [tensor, *measured_outputs(model)])
    if bias is not None:  # an input overrides its initializer: one session serves both runs
        probe.graph.input.append(onnx.helper.make_tensor_value_info(bias.name, bias.data_type, list(bias.dims)))
    sess = activations.session(probe)
    names = [o.name for o in sess.get_outputs()]
    extra = {}
    if bias is not None:
        value = numpy_helper.to_array(bias)
        runs = [sess.run([tensor], {**activations.feed(sess, s), bias.name: value})[0] for s in samples]
        errors = np.stack([got - want[tensor] for got, want in zip(runs, reference)])
        extra = {bias.name: (value - bias_correction.channel_mean(errors)).astype(value.dtype)}
    return [dict(zip(names, sess.run(None, {**activations.feed(sess, s), **extra}))) for s in samples]


def measured_outputs(model) -> list[str]:
    """The model's outputs, each taken before a Softmax that makes it: probabilities weigh an error by
    p (1 - p), so a few near-tie samples would decide the ranking (on the bundled classifier, three windows of
    16 calibration lines put three different layers on top; its logits agree)."""
    producers = {name: node for node in model.graph.node for name in node.output}
    names = []
    for output in model.graph.output:
        node = producers.get(output.name)
        names.append(node.input[0] if node is not None and node.op_type == "Softmax" else output.name)
    return names


def _flat(results: list[dict], names: list[str]) -> np.ndarray:
    """The tensors `names` of every sample, flattened into one float64 vector."""
    return np.concatenate([r[name].astype(np.float64).ravel() for r in results for name in names])


SUGGESTED_SHARE = 0.5  # the layers a report suggests leaving in float: the fewest causing half the error


def largest(rows: list[dict], share: float = SUGGESTED_SHARE) -> list[dict]:
    """The fewest rows, largest shares first, whose shares add up to at least `share`."""
    chosen, total = [], 0.0
    for row in sorted(rows, key=lambda r: r["share"], reverse=True):
        if total >= share:
            break
        chosen.append(row)
        total += row["share"]
    return chosen
