"""Activation smoothing: per-channel activation ranges moved into the weights before int8 quantization.

An int8 activation has one scale for the whole tensor, so a channel whose values are 100x smaller than the
largest channel's keeps only a few of its 256 levels. MobileNet-style models (both bundled ones) have such
spreads after their depthwise convs and hard-swish; onnxruntime's QDQ result on the detector lost most of its
accuracy to it (cosine median 0.955 against fp32).

Each quantized conv's input x is divided per channel by s_c, its calibrated magnitude, and its weights are
multiplied by s_c along the input-channel axis: conv(x / s, w * s) = conv(x, w), exactly in float. Quantized
per tensor, x / s then uses the full range in every channel; the weights are quantized per output channel,
so a depthwise conv's weights lose nothing, and an ordinary conv's spread moves into weights that are
quantized more finely (SmoothQuant, Xiao et al. 2023, with migration strength 1, which measured best here).

The division is a float Mul on the conv's input edge; it fuses into the quantize kernel that follows, where
it is one more multiply per element.
"""

from __future__ import annotations

import numpy as np

from modelbuild.quantization import activations

RANGE_PERCENTILE = 99.9  # per-channel magnitude: a few outlier pixels must not set a channel's scale
# ... but they may exceed it at most this many times: the divided tensor has one int8 scale, set by its
# largest value in any channel. A channel that is zero almost everywhere has a 99.9th percentile near zero,
# and dividing by it made its rare values the whole tensor's range (ocr_det_v6: one channel of 48 at 8060x
# its percentile, an int8 step of 221 for values near 3.5, every other channel rounded to 0: cosine 0.32
# against fp32). Most channels peak at 1.2-1.4x their percentile. 2 measured best on the zoo (bench/zoo.py
# --int8): 4 left the v6 detector at cosine 0.984 and the layout net at 0.9897, under the 0.99 gate, where
# 2 passes both (0.994, 0.993); the bundled detector, 35 of whose 7285 channels peak at 2-3.9x, loses a
# little (worst held-out page 0.9914 -> 0.9907).
OUTLIER_HEADROOM = 2.0
SMOOTHED_SUFFIX = "/smoothed"


def conv_inputs(model) -> dict[str, list]:
    """Convs that can be smoothed, by the tensor they read: groups 1 or depthwise, weights an initializer."""
    weights = {t.name for t in model.graph.initializer}
    found: dict[str, list] = {}
    for node in model.graph.node:
        if node.op_type == "Conv" and len(node.input) > 1 and node.input[1] in weights:
            found.setdefault(node.input[0], []).append(node)
    return found


def channel_ranges(model, samples: list[dict], names: list[str]) -> dict[str, np.ndarray]:
    """Per channel (axis 1) of each tensor, the magnitude it is divided by: the largest over samples of its
    RANGE_PERCENTILE of |x|, raised where needed so that its largest |x| is at most OUTLIER_HEADROOM times
    it."""
    sess = activations.session(activations.exposed(model, names))
    high: dict[str, np.ndarray] = {}
    peak: dict[str, np.ndarray] = {}
    for sample in samples:
        feed = activations.feed(sess, sample)
        for name, value in zip(names, sess.run(names, feed)):
            magnitudes = np.abs(np.moveaxis(value, 1, 0).reshape(value.shape[1], -1))
            high[name] = np.maximum(high.get(name, 0.0), np.percentile(magnitudes, RANGE_PERCENTILE, axis=1))
            peak[name] = np.maximum(peak.get(name, 0.0), magnitudes.max(axis=1))
    return {name: np.maximum(high[name], peak[name] / OUTLIER_HEADROOM) for name in high}


def smooth(model, ranges: dict[str, np.ndarray], nodes: dict[str, list]):
    """A copy of `model` with each conv in `nodes` reading x / s and holding w * s (see the module text)."""
    import onnx
    from onnx import numpy_helper

    smoothed = onnx.ModelProto()
    smoothed.CopyFrom(model)
    weights = {t.name: t for t in smoothed.graph.initializer}
    chosen = {node.name for convs in nodes.values() for node in convs}
    graph_nodes = []
    for node in smoothed.graph.node:
        factors = _factors(node, weights, ranges) if node.name in chosen else None
        if factors is not None:
            weight = numpy_helper.to_array(weights[node.input[1]]).astype(np.float64)
            axis = 0 if _groups(node) > 1 else 1  # depthwise: [C, 1, kh, kw]; ordinary: [O, C, kh, kw]
            shape = [1] * weight.ndim
            shape[axis] = -1
            prefix = node.name + SMOOTHED_SUFFIX
            smoothed.graph.initializer.extend(
                [
                    numpy_helper.from_array((weight * factors.reshape(shape)).astype(np.float32), prefix + "/weight"),
                    # x has the weights' rank: [N, C, spatial...] for 1-d, 2-d and 3-d convs alike
                    numpy_helper.from_array(
                        (1.0 / factors).astype(np.float32).reshape([1, -1] + [1] * (weight.ndim - 2)),
                        prefix + "/divisor",
                    ),
                ]
            )
            graph_nodes.append(
                onnx.helper.make_node("Mul", [node.input[0], prefix + "/divisor"], [prefix + "/input"], name=prefix)
            )
            node.input[0], node.input[1] = prefix + "/input", prefix + "/weight"
        graph_nodes.append(node)
    del smoothed.graph.node[:]
    smoothed.graph.node.extend(graph_nodes)
    drop_unused_initializers(smoothed)
    return smoothed


def drop_unused_initializers(model) -> None:
    """Drop the initializers no node reads: here, the float weights each smoothed conv replaced; they would
    otherwise count as weights."""
    used = {name for node in model.graph.node for name in node.input}
    kept = [t for t in model.graph.initializer if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)


def _groups(node) -> int:
    return next((a.i for a in node.attribute if a.name == "group"), 1)


def _factors(node, weights: dict, ranges: dict[str, np.ndarray]) -> np.ndarray | None:
    """s per input channel, normalised to geometric mean 1 (only the ratios matter to int8), or None when the
    conv is neither ordinary nor depthwise or its input was never seen."""
    magnitude = ranges.get(node.input[0])
    in_per_group = weights[node.input[1]].dims[1]
    groups = _groups(node)
    if magnitude is None or magnitude.ndim != 1 or not (groups == 1 or in_per_group == 1):
        return None
    if groups > 1 and groups != magnitude.size:
        return None
    positive = magnitude[magnitude > 0]
    if positive.size == 0:
        return None
    floor = positive.max() * 1e-6  # an all-zero channel keeps a finite factor
    factors = np.maximum(magnitude.astype(np.float64), floor)
    return factors / np.exp(np.log(factors).mean())
