"""Weight rounding that compensates its own error (GPTQ: Frantar et al., 2022), for a QDQ model's convs.

Rounding each weight to the nearest int8 step makes errors that are independent per weight; what matters is
the error they make together in the conv's output, E||X (W - Q)||^2 over the calibration inputs X. GPTQ
rounds one input column at a time and spreads its error over the columns not yet rounded, weighted by the
inverse of H = X^T X (OBS updates, through H^-1's Cholesky factor), so later columns correct earlier ones.
onnxruntime's scales are kept; only the int8 values change.

Measured on the bundled models (docs/guide/int8.md): with int8 activations no consistent gain, since their own
rounding error dominates; with int16 activations everywhere it takes the classifier's worst held-out line
from cosine 0.978 to 0.998 against fp32 and the detector's worst page from 0.995 to 0.999.
"""

from __future__ import annotations

import numpy as np

from modelbuild.quantization import activations

DAMPING = 0.01  # of the mean diagonal of H, added to it: H is singular where inputs are correlated
WEIGHT_LIMIT = 127  # symmetric int8 weights, as onnxruntime writes them


def round_convs(prepared, qdq, samples: list[dict]) -> int:
    """Re-round the int8 weights of every conv in `qdq` whose weights and data are dequantized, from the
    float weights of `prepared` (the model onnxruntime quantized); returns how many convs it rounded."""
    from onnx import numpy_helper

    convs = _quantized_convs(qdq)
    hessians = _hessians(prepared, convs, samples)
    floats = {t.name: t for t in prepared.graph.initializer}
    for node, _, weight, scale in convs:
        w = numpy_helper.to_array(floats[weight.name.removesuffix("_quantized")]).astype(np.float64)
        groups = _attributes(node).get("group", 1)
        out_channels = w.shape[0]
        per_group = w.reshape(groups, out_channels // groups, -1)
        scales = np.broadcast_to(np.asarray(scale, np.float64).reshape(-1), (out_channels,))
        q = rounded(per_group, scales.reshape(groups, -1), hessians[node.name])
        weight.CopyFrom(numpy_helper.from_array(q.reshape(w.shape).astype(np.int8), weight.name))
    return len(convs)


def rounded(w: np.ndarray, scales: np.ndarray, h: np.ndarray) -> np.ndarray:
    """GPTQ's int8 values of w [groups, rows, columns] with per-row `scales` [groups, rows], given each
    group's H = X^T X [groups, columns, columns]. Columns go in order of decreasing H diagonal (GPTQ's
    act-order: the inputs that matter most are rounded while the most columns remain to compensate)."""
    groups, _, columns = w.shape
    h = h.copy()
    diagonal = np.einsum("gcc->gc", h)
    g, c = np.nonzero(diagonal == 0)  # inputs that are always zero: their weights round to nearest
    h[g, c, c] = 1
    h[:, np.arange(columns), np.arange(columns)] += DAMPING * np.maximum(diagonal.mean(axis=1), 1e-12)[:, None]
    order = np.argsort(-np.einsum("gcc->gc", h), axis=1)
    w = np.take_along_axis(w, order[:, None, :], axis=2).copy()
    h = h[np.arange(groups)[:, None, None], order[:, :, None], order[:, None, :]]
    upper = np.swapaxes(np.linalg.cholesky(np.linalg.inv(h)), 1, 2)  # H^-1 = U^T U
    q = np.zeros_like(w)
    for j in range(columns):
        q[:, :, j] = np.clip(np.rint(w[:, :, j] / scales), -WEIGHT_LIMIT, WEIGHT_LIMIT)
        error = (w[:, :, j] - q[:, :, j] * scales) / upper[:, j, j][:, None]
        w[:, :, j + 1 :] -= error[:, :, None] * upper[:, None, j, j + 1 :]
    result = np.empty_like(q)
    np.put_along_axis(result, order[:, None, :], q, axis=2)
    return result


def _quantized_convs(qdq) -> list[tuple]:
    """(node, float input tensor, int8 weight initializer, weight scales) of each conv whose weights are a
    dequantized initializer and whose data is dequantized from a quantize of a float tensor."""
    from onnx import numpy_helper

    initializers = {t.name: t for t in qdq.graph.initializer}
    producers = {name: node for node in qdq.graph.node for name in node.output}
    convs = []
    for node in qdq.graph.node:
        if node.op_type != "Conv":
            continue
        weight, data = producers.get(node.input[1]), producers.get(node.input[0])
        if not (weight and weight.op_type == "DequantizeLinear" and weight.input[0] in initializers):
            continue
        if not (data and data.op_type == "DequantizeLinear" and data.input[0] in producers):
            continue
        source = producers[data.input[0]].input[0]
        convs.append(
            (node, source, initializers[weight.input[0]], numpy_helper.to_array(initializers[weight.input[1]]))
        )
    return convs


def _hessians(prepared, convs: list[tuple], samples: list[dict]) -> dict:
    """X^T X of each conv's input patches (im2col, per group) over the samples, from the float model."""
    names = sorted({source for _, source, _, _ in convs})
    sess = activations.session(activations.exposed(prepared, names))
    hessians: dict = {}
    for sample in samples:
        values = dict(zip(names, sess.run(names, activations.feed(sess, sample))))
        for node, source, weight, _ in convs:
            patches = patch_matrix(values[source].astype(np.float64), tuple(weight.dims), _attributes(node))
            hessians[node.name] = hessians.get(node.name, 0) + np.matmul(np.swapaxes(patches, 1, 2), patches)
    return hessians


def patch_matrix(x: np.ndarray, weight_shape: tuple, attributes: dict) -> np.ndarray:
    """x [N, C, H, W] as the conv's input patches, [groups, N * out_h * out_w, C/groups * kh * kw], columns in
    the order of the weights' flattened [C/groups, kh, kw]."""
    n = x.shape[0]
    _, per_group, kh, kw = weight_shape
    groups = attributes.get("group", 1)
    sh, sw = attributes.get("strides", [1, 1])
    dh, dw = attributes.get("dilations", [1, 1])
    top, left, bottom, right = attributes.get("pads", [0, 0, 0, 0])
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    windows = windows[:, :, ::sh, ::sw, ::dh, ::dw]  # N, C, out_h, out_w, kh, kw
    out_h, out_w = windows.shape[2:4]
    windows = windows.reshape(n, groups, per_group, out_h, out_w, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6)
    return windows.reshape(groups, n * out_h * out_w, per_group * kh * kw)


def _attributes(node) -> dict:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
