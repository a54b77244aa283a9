"""Operators TVM's ONNX frontend has no converter for, written as the operators it has.

LpNormalization is how an exporter writes an embedding's x / |x| (a face or speaker embedding's last node;
onnx_import.NORMALISING already reads it as one); Celu and opset 24's Swish are activations; opset 23's
Attention is scaled dot-product attention as one operator and its RotaryEmbedding the rotation of queries
and keys (both in the torch.onnx exporter's LLM graphs at that opset); opset 17's STFT is how torch.stft
exports (an audio model's spectrogram front end: a strided Conv1d by the windowed cosines and sines here),
DFT how torch.fft's transforms do (MatMuls by the cosines and sines), ReverseSequence how tf2onnx writes
a bidirectional RNN over sequences of several lengths (a GatherElements), opset 24's TensorScatter an
LLM's KV-cache update (a GatherElements and a Where), opset 18's Col2Im how torch.nn.Fold does (a
transposed conv by one-hot kernels), Det of 1x1 to 3x3 matrices (a pose or camera model's rotations: the
cofactor expansion), opset 26's CumProd (a product over a triangular mask) and DeformConv (a deformable
detector's conv: its taps sampled by GridSample, then a 1x1 conv). Each failed the import with
"operator ... is not supported by TVM's ONNX frontend". Each form here computes what onnxruntime computes,
a zero vector normalised to zeros included (tests/test_decompositions.py).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from modelbuild.errors import StageError
from modelbuild.frontend import inferred, node_rewrite
from modelbuild.frontend.opset import default_opset

REDUCTIONS = {1: "ReduceL1", 2: "ReduceL2"}  # LpNormalization's p -> the norm that divides
AXES_AS_INPUT = 18  # from this opset a reduction reads its axes as an input; an attribute is ignored


def decomposed(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each float32 node of its main graph whose operator is one of OPERATORS written out; the
    model itself when it has none (an LpNormalization of a p other than 1 or 2, or a node of another dtype,
    the import then names as TVM's to lack). One it cannot write out (an Attention with past states, an STFT of
    a complex signal, ...) is a StageError with the fix."""
    if not any(_writes(node) for node in model.graph.node):
        return model
    tensors = inferred.tensors(model)  # the written-out forms' constants are float32: only float32 nodes
    float32 = {name for name, (dtype, _) in tensors.items() if dtype == onnx.TensorProto.FLOAT}
    if not any(_writes(node, float32) for node in model.graph.node):
        return model
    version = default_opset(model)
    values = _Constants(inferred.constants(model))

    def replacement(_index, node):
        written = _writes(node, float32)
        return None if written is None else written(node, version, tensors, values)

    return node_rewrite.replaced(model, replacement)


def _writes(node, float32: set[str] | None = None):
    """The function writing the node out, or None; with `float32`, only for a node whose input is in it."""
    if float32 is not None and not (node.input and node.input[0] in float32):
        return None
    if node.domain not in ("", "ai.onnx"):  # onnxruntime's contrib Attention is TVM's own
        return None
    if node.op_type == "LpNormalization" and _attribute(node, "p", 2) not in REDUCTIONS:
        return None
    return _WRITERS.get(node.op_type)


def _lp_normalization(node, version: int, tensors: dict, values: dict):
    """x / norm(x) along the axis, where a zero norm divides by one (onnxruntime's zeros); the reduction's
    axes in the form of the model's opset."""
    x, y, name = node.input[0], node.output[0], _prefix(node)
    axis, p = _attribute(node, "axis", -1), _attribute(node, "p", 2)
    zero, one = _scalar(0.0, f"{name}zero"), _scalar(1.0, f"{name}one")
    constants = [zero, one]
    if version >= AXES_AS_INPUT:
        constants.append(numpy_helper.from_array(np.array([axis], np.int64), f"{name}axes"))
        norm = helper.make_node(REDUCTIONS[p], [x, f"{name}axes"], [f"{name}norm"], keepdims=1)
    else:
        norm = helper.make_node(REDUCTIONS[p], [x], [f"{name}norm"], axes=[axis], keepdims=1)
    nodes = [
        norm,
        helper.make_node("Equal", [f"{name}norm", zero.name], [f"{name}is_zero"]),
        helper.make_node("Where", [f"{name}is_zero", one.name, f"{name}norm"], [f"{name}divisor"]),
        helper.make_node("Div", [x, f"{name}divisor"], [y], name=node.name),
    ]
    return nodes, constants


def _celu(node, version: int, tensors: dict, values: dict):
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1))."""
    x, y, name = node.input[0], node.output[0], _prefix(node)
    alpha = _scalar(_attribute(node, "alpha", 1.0), f"{name}alpha")
    zero, one = _scalar(0.0, f"{name}zero"), _scalar(1.0, f"{name}one")
    nodes = [
        helper.make_node("Div", [x, alpha.name], [f"{name}scaled"]),
        helper.make_node("Exp", [f"{name}scaled"], [f"{name}exp"]),
        helper.make_node("Sub", [f"{name}exp", one.name], [f"{name}expm1"]),
        helper.make_node("Mul", [f"{name}expm1", alpha.name], [f"{name}elu"]),
        helper.make_node("Min", [f"{name}elu", zero.name], [f"{name}negative"]),
        helper.make_node("Relu", [x], [f"{name}positive"]),
        helper.make_node("Add", [f"{name}positive", f"{name}negative"], [y], name=node.name),
    ]
    return nodes, [alpha, zero, one]


def _swish(node, version: int, tensors: dict, values: dict):
    """Opset 24's Swish: x sigmoid(alpha x)."""
    x, y, name = node.input[0], node.output[0], _prefix(node)
    alpha = _scalar(_attribute(node, "alpha", 1.0), f"{name}alpha")
    nodes = [
        helper.make_node("Mul", [x, alpha.name], [f"{name}scaled"]),
        helper.make_node("Sigmoid", [f"{name}scaled"], [f"{name}gate"]),
        helper.make_node("Mul", [x, f"{name}gate"], [y], name=node.name),
    ]
    return nodes, [alpha]


def _attention(node, version: int, tensors: dict, values: dict):
    """Opset 23's Attention on 4-D inputs: softmax(Q K^T scale + mask) V. TVM's frontend has a converter of
    that name, for onnxruntime's own com.microsoft Attention (one input projected by a weight), and it took
    this one for that: "TVM could not import the model: 'num_heads'"."""
    q, k, v = node.input[:3]
    mask = node.input[3] if len(node.input) > 3 else ""
    refusal = _attention_refusal(node, tensors)
    if refusal:
        raise StageError(
            f"Attention node {node.name!r}: {refusal} (fix: export the model at opset 22 or earlier, "
            f"where exporters write attention as MatMul and Softmax)"
        )
    y, name = node.output[0], _prefix(node)
    head_size, q_length, kv_length = tensors[q][1][3], tensors[q][1][2], tensors[k][1][2]
    scale = _scalar(_attribute(node, "scale", head_size**-0.5), f"{name}scale")
    constants = [scale]
    nodes = [
        helper.make_node("Transpose", [k], [f"{name}kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", [q, f"{name}kt"], [f"{name}qk"]),
        helper.make_node("Mul", [f"{name}qk", scale.name], [f"{name}scores"]),
    ]
    scores = f"{name}scores"
    if mask and tensors.get(mask, (None,))[0] == onnx.TensorProto.BOOL:  # else added (TVM names a wrong type)
        constants.append(_scalar(float("-inf"), f"{name}masked"))
        nodes.append(helper.make_node("Where", [mask, scores, f"{name}masked"], [f"{name}kept"]))
        scores = f"{name}kept"
    elif mask:
        nodes.append(helper.make_node("Add", [scores, mask], [f"{name}added"]))
        scores = f"{name}added"
    if _attribute(node, "is_causal", 0):
        causal = np.triu(np.full((q_length, kv_length), -np.inf, np.float32), 1)
        constants.append(numpy_helper.from_array(causal, f"{name}causal"))
        nodes.append(helper.make_node("Add", [scores, f"{name}causal"], [f"{name}causal_scores"]))
        scores = f"{name}causal_scores"
    nodes += [
        helper.make_node("Softmax", [scores], [f"{name}weights"], axis=-1),
        helper.make_node("MatMul", [f"{name}weights", v], [y], name=node.name),
    ]
    return nodes, constants


def _rotary_embedding(node, version: int, tensors: dict, values: dict):
    """Opset 23's RotaryEmbedding as its definition computes it: x as [batch, seq, heads, head], the cos and
    sin caches gathered at the position ids, the first rotary_embedding_dim features in two halves (or even
    and odd ones, interleaved) rotated, (x1 cos - x2 sin, x1 sin + x2 cos), the rest passed through."""
    x, cos_cache, sin_cache = node.input[:3]
    positions = node.input[3] if len(node.input) > 3 and node.input[3] else None
    shape = tensors.get(x, (None, None))[1]
    if (
        shape is None
        or None in shape
        or len(shape) not in (3, 4)
        or (len(shape) == 3 and not _attribute(node, "num_heads", 0))
    ):
        raise StageError(
            f"RotaryEmbedding node {node.name!r}: only an input of known shape, 4-D or 3-D with "
            f"num_heads, is written out (fix: give the model's inputs fixed shapes in the recipe)"
        )
    y, name = node.output[0], _prefix(node)
    if len(shape) == 4:
        batch, heads, seq, head = shape
    else:
        heads = _attribute(node, "num_heads", 0)
        batch, seq, head = shape[0], shape[1], shape[2] // heads
    rotated = _attribute(node, "rotary_embedding_dim", 0) or head
    half = rotated // 2
    constants = []

    def const(label: str, value) -> str:
        if not any(c.name == f"{name}{label}" for c in constants):  # an axis both halves use is one constant
            constants.append(numpy_helper.from_array(np.asarray(value, np.int64), f"{name}{label}"))
        return f"{name}{label}"

    def sliced(source: str, label: str, start: int, end: int, step: int = 1) -> str:
        nodes.append(
            helper.make_node(
                "Slice",
                [
                    source,
                    const(f"{label}_s", [start]),
                    const(f"{label}_e", [end]),
                    const(f"{label}_a", [-1]),
                    const(f"{label}_st", [step]),
                ],
                [f"{name}{label}"],
            )
        )
        return f"{name}{label}"

    nodes = [
        helper.make_node("Transpose", [x], [f"{name}bshd"], perm=[0, 2, 1, 3])
        if len(shape) == 4
        else helper.make_node("Reshape", [x, const("bshd_shape", [batch, seq, heads, head])], [f"{name}bshd"])
    ]
    tables = []
    for cache, label in ((cos_cache, "cos"), (sin_cache, "sin")):
        if positions:
            nodes.append(helper.make_node("Gather", [cache, positions], [f"{name}{label}_at"]))
            cache = f"{name}{label}_at"
        nodes.append(
            helper.make_node(
                "Unsqueeze", [sliced(cache, f"{label}_half", 0, half), const("heads_axis", [2])], [f"{name}{label}"]
            )
        )
        tables.append(f"{name}{label}")
    cos, sin = tables
    interleaved = _attribute(node, "interleaved", 0)
    x1 = sliced(f"{name}bshd", "x1", 0, rotated, 2) if interleaved else sliced(f"{name}bshd", "x1", 0, half)
    x2 = sliced(f"{name}bshd", "x2", 1, rotated, 2) if interleaved else sliced(f"{name}bshd", "x2", half, rotated)
    for out, (a, b, op) in (("real", ((cos, x1), (sin, x2), "Sub")), ("imag", ((sin, x1), (cos, x2), "Add"))):
        nodes += [
            helper.make_node("Mul", list(a), [f"{name}{out}_a"]),
            helper.make_node("Mul", list(b), [f"{name}{out}_b"]),
            helper.make_node(op, [f"{name}{out}_a", f"{name}{out}_b"], [f"{name}{out}"]),
        ]
    if interleaved:  # (real, imag) pairs back in even and odd places
        nodes += [
            helper.make_node("Unsqueeze", [f"{name}{part}", const("pair_axis", [-1])], [f"{name}{part}_pair"])
            for part in ("real", "imag")
        ]
        nodes += [
            helper.make_node("Concat", [f"{name}real_pair", f"{name}imag_pair"], [f"{name}pairs"], axis=-1),
            helper.make_node(
                "Reshape", [f"{name}pairs", const("rot_shape", [batch, seq, heads, rotated])], [f"{name}turned"]
            ),
        ]
    else:
        nodes.append(helper.make_node("Concat", [f"{name}real", f"{name}imag"], [f"{name}turned"], axis=-1))
    turned = f"{name}turned"
    if rotated < head:
        nodes.append(
            helper.make_node(
                "Concat", [turned, sliced(f"{name}bshd", "kept", rotated, head)], [f"{name}whole"], axis=-1
            )
        )
        turned = f"{name}whole"
    nodes.append(
        helper.make_node("Transpose", [turned], [y], name=node.name, perm=[0, 2, 1, 3])
        if len(shape) == 4
        else helper.make_node("Reshape", [turned, const("out_shape", shape)], [y], name=node.name)
    )
    return nodes, constants


def _attention_refusal(node, tensors: dict) -> str | None:
    """Why this Attention is not written out, or None: only 4-D query, key and value of as many heads, no
    past state, no output but Y, no softcap, and a causal mask over as many queries as keys."""
    shapes = [tensors.get(name, (None, None))[1] for name in node.input[:3]]
    if any(shape is None or len(shape) != 4 or None in shape for shape in shapes):
        return "only 4-D query, key and value of known shapes are written out"
    if shapes[0][1] != shapes[1][1]:
        return "grouped-query attention (fewer key and value heads than query heads) is not written out"
    if any(node.input[4:]) or any(node.output[1:]):
        return "past key and value states and outputs other than Y are not written out"
    if _attribute(node, "softcap", 0.0):
        return "a softcap is not written out"
    if _attribute(node, "is_causal", 0) and shapes[0][2] != shapes[1][2]:
        return "a causal mask over fewer queries than keys is not written out"
    return None


def _stft(node, version: int, tensors: dict, values: dict):
    """A real signal [batch, length, 1]'s STFT as a Conv1d of stride frame_step by 2 x bins kernels, the window
    times cos(2 pi k n / N) and times -sin(2 pi k n / N) (N the frame length, k each bin: N / 2 + 1 of them
    onesided, else N), then [batch, 2, bins, frames] turned to ONNX's [batch, frames, bins, 2]."""
    signal = node.input[0]
    step, window, length = (node.input[i] if len(node.input) > i else "" for i in (1, 2, 3))
    refusal = _stft_refusal(signal, step, window, length, tensors, values)
    if refusal:
        raise StageError(
            f"STFT node {node.name!r}: {refusal} (fix: compute the spectrogram before the model, or "
            f"give the STFT a real signal [batch, length, 1] and constant step, window and length)"
        )
    taps = values[window].astype(np.float64) if window else np.ones(int(values[length]))
    frame = len(taps)
    bins = frame // 2 + 1 if _attribute(node, "onesided", 1) else frame
    angle = 2 * np.pi * np.outer(np.arange(bins), np.arange(frame)) / frame
    kernels = np.concatenate([taps * np.cos(angle), -taps * np.sin(angle)])[:, None, :].astype(np.float32)
    y, name = node.output[0], _prefix(node)
    shape = numpy_helper.from_array(np.array([0, 2, bins, -1], np.int64), f"{name}shape")
    nodes = [
        helper.make_node("Transpose", [signal], [f"{name}rows"], perm=[0, 2, 1]),
        helper.make_node("Conv", [f"{name}rows", f"{name}kernels"], [f"{name}spectrum"], strides=[int(values[step])]),
        helper.make_node("Reshape", [f"{name}spectrum", shape.name], [f"{name}parts"]),
        helper.make_node("Transpose", [f"{name}parts"], [y], name=node.name, perm=[0, 3, 2, 1]),
    ]
    return nodes, [numpy_helper.from_array(kernels, f"{name}kernels"), shape]


def _stft_refusal(signal: str, step: str, window: str, length: str, tensors: dict, values: dict) -> str | None:
    """Why this STFT is not written out, or None: a real signal, constant step, and a constant window or
    length (of equal sizes where both are given)."""
    shape = tensors.get(signal, (None, None))[1]
    if shape is None or len(shape) != 3 or shape[2] != 1:
        return "only a real signal of shape [batch, length, 1] is written out"
    if step not in values or (window and window not in values) or (length and length not in values):
        return "only a constant frame step, window and frame length are written out"
    if not window and not length:
        return "neither a window nor a frame length says how long a frame is"
    if window and length and len(values[window]) != int(values[length]):
        return f"its window has {len(values[window])} taps but its frame length is {int(values[length])}"
    return None


DFT_AXIS_AS_INPUT = 20  # from this opset DFT reads its axis as an input (default -2); before, an attribute (1)


def _dft(node, version: int, tensors: dict, values: dict):
    """DFT along one axis as two MatMuls by the cosines and sines of 2 pi k n / N: the axis moved last, the
    real and imaginary parts multiplied apart and put back as the last axis of 2. torch.fft.rfft, fft and
    ifft export as it."""
    x, y, name = node.input[0], node.output[0], _prefix(node)
    shape = tensors.get(x, (None, None))[1]
    axis, length, refusal = _dft_axis_and_length(node, version, shape, values)
    if refusal:
        raise StageError(
            f"DFT node {node.name!r}: {refusal} (fix: give the DFT a constant axis and dft_length "
            f"and a known shape, or compute the transform outside the model)"
        )
    inverse, onesided = _attribute(node, "inverse", 0), _attribute(node, "onesided", 0)
    bins = length // 2 + 1 if onesided else length
    angle = 2 * np.pi * np.outer(np.arange(length), np.arange(bins)) / length
    scale = 1 / length if inverse else 1.0
    sign = 1.0 if inverse else -1.0  # e^(-i angle) forward, e^(+i angle) inverse
    cos, sin = np.cos(angle) * scale, sign * np.sin(angle) * scale
    rank = len(shape)
    moved = [*[d for d in range(rank - 1) if d != axis], axis, rank - 1]  # the axis, then the parts, last
    back = list(np.argsort([*[d for d in range(rank - 1) if d != axis], axis]))
    constants = [
        numpy_helper.from_array(cos.astype(np.float32), f"{name}cos"),
        numpy_helper.from_array(sin.astype(np.float32), f"{name}sin"),
        numpy_helper.from_array(np.array(0, np.int64), f"{name}zero"),
        numpy_helper.from_array(np.array(1, np.int64), f"{name}one"),
        numpy_helper.from_array(np.array([-1], np.int64), f"{name}last"),
    ]
    nodes = [
        helper.make_node("Transpose", [x], [f"{name}moved"], perm=moved),
        helper.make_node("Gather", [f"{name}moved", f"{name}zero"], [f"{name}re"], axis=-1),
    ]
    if shape[-1] == 1:  # real: x (cos + i sin)
        parts = [
            ("MatMul", [f"{name}re", f"{name}cos"], f"{name}out_re"),
            ("MatMul", [f"{name}re", f"{name}sin"], f"{name}out_im"),
        ]
    else:  # complex: (re + i im)(cos + i sin) = re cos - im sin + i (im cos + re sin)
        nodes.append(helper.make_node("Gather", [f"{name}moved", f"{name}one"], [f"{name}im"], axis=-1))
        parts = [
            ("MatMul", [f"{name}re", f"{name}cos"], f"{name}re_cos"),
            ("MatMul", [f"{name}im", f"{name}sin"], f"{name}im_sin"),
            ("Sub", [f"{name}re_cos", f"{name}im_sin"], f"{name}out_re"),
            ("MatMul", [f"{name}im", f"{name}cos"], f"{name}im_cos"),
            ("MatMul", [f"{name}re", f"{name}sin"], f"{name}re_sin"),
            ("Add", [f"{name}im_cos", f"{name}re_sin"], f"{name}out_im"),
        ]
    nodes += [helper.make_node(op, inputs, [out]) for op, inputs, out in parts]
    nodes += [
        helper.make_node("Unsqueeze", [f"{name}out_re", f"{name}last"], [f"{name}re_last"]),
        helper.make_node("Unsqueeze", [f"{name}out_im", f"{name}last"], [f"{name}im_last"]),
        helper.make_node("Concat", [f"{name}re_last", f"{name}im_last"], [f"{name}joined"], axis=-1),
        helper.make_node("Transpose", [f"{name}joined"], [y], name=node.name, perm=[*[int(d) for d in back], rank - 1]),
    ]
    return nodes, constants


def _dft_axis_and_length(node, version: int, shape, values: dict) -> tuple[int, int, str | None]:
    """(the axis, as a non-negative index; the transform's length; why it is not written out, or None)."""
    if shape is None or None in shape or len(shape) < 2 or shape[-1] not in (1, 2):
        return 0, 0, "only an input of known shape whose last axis is 1 (real) or 2 (complex) is written out"
    if version >= DFT_AXIS_AS_INPUT:
        named = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if named is not None and named not in values:
            return 0, 0, "only a constant axis is written out"
        axis = int(values[named]) if named else -2
    else:
        axis = _attribute(node, "axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis < len(shape) - 1:
        return 0, 0, f"its axis {axis} is not one of the signal's"
    length_name = node.input[1] if len(node.input) > 1 and node.input[1] else None
    if length_name is not None and (length_name not in values or int(values[length_name]) != shape[axis]):
        return 0, 0, "only a dft_length equal to the axis's size is written out"
    if _attribute(node, "onesided", 0) and (shape[-1] != 1 or _attribute(node, "inverse", 0)):
        return 0, 0, "a onesided transform is written out only forward, of a real signal"
    return axis, shape[axis], None


def _reverse_sequence(node, version: int, tensors: dict, values: dict):
    """Each batch entry's first sequence_lens[b] steps reversed, as a GatherElements along the time axis whose
    index is (L - 1 - t where t < L, else t), L the run-time lengths. tf2onnx writes a bidirectional RNN over
    sequences of several lengths with it."""
    x, lengths = node.input[:2]
    y, name = node.output[0], _prefix(node)
    shape = tensors.get(x, (None, None))[1]
    if shape is None or None in shape or len(shape) < 2:
        raise StageError(
            f"ReverseSequence node {node.name!r}: only an input of known shape is written out (fix: "
            f"give the model's inputs fixed shapes in the recipe)"
        )
    time = _attribute(node, "time_axis", 0)  # ONNX: the batch axis is the other of 0 and 1
    steps = np.arange(shape[time], dtype=np.int64).reshape([-1, 1] if time == 0 else [1, -1])
    constants = [
        numpy_helper.from_array(steps, f"{name}steps"),
        numpy_helper.from_array(np.array([1, -1] if time == 0 else [-1, 1], np.int64), f"{name}across"),
        numpy_helper.from_array(np.array(1, np.int64), f"{name}one"),
        numpy_helper.from_array(np.arange(2, len(shape), dtype=np.int64), f"{name}inner"),
        numpy_helper.from_array(np.array(shape, np.int64), f"{name}shape"),
    ]
    nodes = [
        helper.make_node("Reshape", [lengths, f"{name}across"], [f"{name}lengths"]),
        helper.make_node("Less", [f"{name}steps", f"{name}lengths"], [f"{name}inside"]),
        helper.make_node("Sub", [f"{name}lengths", f"{name}one"], [f"{name}last"]),
        helper.make_node("Sub", [f"{name}last", f"{name}steps"], [f"{name}reversed"]),
        helper.make_node("Where", [f"{name}inside", f"{name}reversed", f"{name}steps"], [f"{name}index"]),
    ]
    index = f"{name}index"
    if len(shape) > 2:
        nodes.append(helper.make_node("Unsqueeze", [index, f"{name}inner"], [f"{name}index_inner"]))
        index = f"{name}index_inner"
    nodes += [
        helper.make_node("Expand", [index, f"{name}shape"], [f"{name}index_full"]),
        helper.make_node("GatherElements", [x, f"{name}index_full"], [y], name=node.name, axis=time),
    ]
    return nodes, constants


def _tensor_scatter(node, version: int, tensors: dict, values: dict):
    """Opset 24's TensorScatter (an LLM's KV-cache update) as a select: position s of the sequence axis takes
    update[s - w[b]] where 0 <= s - w[b] < the update's length (modulo the cache's length, circular), else the
    past cache's own value; w the run-time write indices (zeros where absent). A GatherElements of the
    update by the clamped offsets, then a Where."""
    past, update = node.input[:2]
    write = node.input[2] if len(node.input) > 2 and node.input[2] else None
    shape, update_shape = (tensors.get(n, (None, None))[1] for n in (past, update))
    if any(s is None or None in s for s in (shape, update_shape)):
        raise StageError(
            f"TensorScatter node {node.name!r}: only caches of known shapes are written out (fix: "
            f"give the model's inputs fixed shapes in the recipe)"
        )
    y, name = node.output[0], _prefix(node)
    axis = _attribute(node, "axis", -2) % len(shape)
    length, written = shape[axis], update_shape[axis]
    along = [1] * len(shape)
    along[axis] = length
    per_batch = [-1] + [1] * (len(shape) - 1)
    constants = [
        numpy_helper.from_array(np.arange(length, dtype=np.int64).reshape(along), f"{name}steps"),
        numpy_helper.from_array(np.array(per_batch, np.int64), f"{name}per_batch"),
        numpy_helper.from_array(np.array(0, np.int64), f"{name}zero"),
        numpy_helper.from_array(np.array(length, np.int64), f"{name}length"),
        numpy_helper.from_array(np.array(written, np.int64), f"{name}written"),
        numpy_helper.from_array(np.array(shape, np.int64), f"{name}shape"),
    ]
    offset = f"{name}steps"
    nodes = []
    if write:
        nodes += [
            helper.make_node("Reshape", [write, f"{name}per_batch"], [f"{name}write"]),
            helper.make_node("Sub", [f"{name}steps", f"{name}write"], [f"{name}offset"]),
        ]
        offset = f"{name}offset"
    if _attribute(node, "mode", b"linear") in (b"circular", "circular"):
        nodes.append(helper.make_node("Mod", [offset, f"{name}length"], [f"{name}wrapped"]))  # sign of the divisor
        offset = f"{name}wrapped"
    nodes += [
        helper.make_node("GreaterOrEqual", [offset, f"{name}zero"], [f"{name}from"]),
        helper.make_node("Less", [offset, f"{name}written"], [f"{name}before_end"]),
        helper.make_node("And", [f"{name}from", f"{name}before_end"], [f"{name}inside"]),
        helper.make_node("Where", [f"{name}inside", offset, f"{name}zero"], [f"{name}clamped"]),
        helper.make_node("Expand", [f"{name}clamped", f"{name}shape"], [f"{name}index"]),
        helper.make_node("Expand", [f"{name}inside", f"{name}shape"], [f"{name}taken"]),
        helper.make_node("GatherElements", [update, f"{name}index"], [f"{name}updated"], axis=axis),
        helper.make_node("Where", [f"{name}taken", f"{name}updated", past], [y], name=node.name),
    ]
    return nodes, constants


def _col2im(node, version: int, tensors: dict, values: dict):
    """Col2Im of 2-D blocks: the columns [N, C * kh * kw, L] as a map of the blocks' grid, [N, C * kh * kw,
    rows, columns], summed into the image by a transposed conv of C groups whose kernel for column
    (c, i, j) is one at tap (i, j): what Col2Im adds at an image pixel is what that conv adds there. The
    grid's last row and column reach to the image's edge by output_padding where the strides leave a
    remainder. torch.nn.Fold exports as it."""
    x, image, block = node.input[:3]
    y, name = node.output[0], _prefix(node)
    shape = tensors.get(x, (None, None))[1]
    if (
        image not in values
        or block not in values
        or shape is None
        or len(shape) != 3
        or None in shape[1:]
        or len(values[image]) != 2
    ):
        raise StageError(
            f"Col2Im node {node.name!r}: only 2-D blocks of constant image and block shapes over "
            f"columns of known shape are written out (fix: give the model's inputs fixed shapes in the "
            f"recipe, or fold the columns before the model)"
        )
    (height, width), (kh, kw) = [int(v) for v in values[image]], [int(v) for v in values[block]]
    dilations, strides = _attribute(node, "dilations", [1, 1]), _attribute(node, "strides", [1, 1])
    pads = _attribute(node, "pads", [0, 0, 0, 0])
    reach = [
        size + pads[d] + pads[d + 2] - dilations[d] * (k - 1) - 1
        for d, (size, k) in enumerate(((height, kh), (width, kw)))
    ]
    grid = [r // stride + 1 for r, stride in zip(reach, strides)]
    taps, channels = kh * kw, shape[1]
    if channels % taps or grid[0] * grid[1] != shape[2]:
        raise StageError(
            f"Col2Im node {node.name!r}: its columns {shape} are not the {kh}x{kw} blocks of a "
            f"{height}x{width} image (fix: the exporter's Fold parameters)"
        )
    kernels = np.zeros((channels, 1, kh, kw), np.float32)
    kernels[np.arange(channels), 0, np.arange(channels) % taps // kw, np.arange(channels) % kw] = 1
    grid_shape = numpy_helper.from_array(np.array([0, channels, *grid], np.int64), f"{name}grid")
    nodes = [
        helper.make_node("Reshape", [x, grid_shape.name], [f"{name}map"]),
        helper.make_node(
            "ConvTranspose",
            [f"{name}map", f"{name}kernels"],
            [y],
            name=node.name,
            group=channels // taps,
            strides=strides,
            dilations=dilations,
            pads=pads,
            output_padding=[r % stride for r, stride in zip(reach, strides)],
        ),
    ]
    return nodes, [numpy_helper.from_array(kernels, f"{name}kernels"), grid_shape]


DET_MAX_ORDER = 3  # Det's matrices are written out by the cofactor expansion up to 3x3


def _det(node, version: int, tensors: dict, values: dict):
    """The determinant of each matrix [..., n, n] for n of 1 to 3 by the cofactor expansion along its first
    row, the matrix's elements gathered from its rows flattened: a(ei - fh) - b(di - fg) + c(dh - eg) for a
    3x3. onnxruntime's LU factorisation rounds otherwise, within 1e-5 of it."""
    x, y, name = node.input[0], node.output[0], _prefix(node)
    shape = tensors.get(x, (None, None))[1]
    if shape is None or None in shape or len(shape) < 2 or shape[-1] != shape[-2] or shape[-1] > DET_MAX_ORDER:
        raise StageError(
            f"Det node {node.name!r}: only matrices of 1x1 to {DET_MAX_ORDER}x{DET_MAX_ORDER} of known "
            f"shape are written out, and its input is {shape} (fix: give the model's inputs fixed "
            f"shapes in the recipe, or compute the determinant after the model)"
        )
    order = shape[-1]
    flat = numpy_helper.from_array(np.array([*shape[:-2], order * order], np.int64), f"{name}flat")
    nodes, constants = [helper.make_node("Reshape", [x, flat.name], [f"{name}rows"])], [flat]

    def element(row: int, column: int) -> str:
        out = f"{name}m{row}{column}"
        if not any(out in n.output for n in nodes):
            at = numpy_helper.from_array(np.array(row * order + column, np.int64), f"{out}.at")
            constants.append(at)
            nodes.append(helper.make_node("Gather", [f"{name}rows", at.name], [out], axis=-1))
        return out

    def written(op: str, a: str, b: str, out: str = "") -> str:
        out = out or f"{name}{op}{len(nodes)}"
        nodes.append(helper.make_node(op, [a, b], [out]))
        return out

    def expansion(rows: list[int], columns: list[int], out: str = "") -> str:
        if len(rows) == 1:
            return element(rows[0], columns[0])
        terms = [
            written("Mul", element(rows[0], c), expansion(rows[1:], [d for d in columns if d != c])) for c in columns
        ]
        total = terms[0]
        for k, term in enumerate(terms[1:], 1):
            last = out if k == len(terms) - 1 else ""
            total = written("Sub" if k % 2 else "Add", total, term, last)
        return total

    if order == 1:
        nodes.append(helper.make_node("Identity", [element(0, 0)], [y]))
    else:
        expansion(list(range(order)), list(range(order)), y)
    return nodes, constants


CUMULATIVE_MAX_ELEMENTS = 1 << 24  # the masked [..., L, L, ...] tensor a CumProd is written with, at most


def _cumulative_product(node, version: int, tensors: dict, values: dict):
    """Each prefix's product along the axis as a product over a triangular mask: x spread to [..., L, L, ...]
    (output position i, input position j), 1 where j is not in i's prefix (j <= i; j < i exclusive; from the
    end with reverse), multiplied along j. Forwards the factors are taken in onnxruntime's order."""
    x, axis_input = node.input[:2]
    y, name = node.output[0], _prefix(node)
    shape = tensors.get(x, (None, None))[1]
    if (
        shape is None
        or None in shape
        or axis_input not in values
        or math.prod(shape) * shape[int(values[axis_input]) % len(shape)] > CUMULATIVE_MAX_ELEMENTS
    ):
        raise StageError(
            f"CumProd node {node.name!r}: only a constant axis of an input of known shape whose "
            f"length times its size is at most {CUMULATIVE_MAX_ELEMENTS} is written out, and its input "
            f"is {shape} (fix: give the model's inputs fixed shapes in the recipe)"
        )
    axis = int(values[axis_input]) % len(shape)
    length = shape[axis]
    i, j = np.arange(length)[:, None], np.arange(length)[None, :]
    inside = j >= i if _attribute(node, "reverse", 0) else j <= i
    if _attribute(node, "exclusive", 0):
        inside &= i != j
    mask = inside.reshape([length, length] + [1] * (len(shape) - axis - 1))
    constants = [
        numpy_helper.from_array(mask, f"{name}mask"),
        _scalar(1.0, f"{name}one"),
        numpy_helper.from_array(np.array([axis], np.int64), f"{name}at"),
        numpy_helper.from_array(np.array([axis + 1], np.int64), f"{name}along"),
    ]
    nodes = [
        helper.make_node("Unsqueeze", [x, f"{name}at"], [f"{name}spread"]),
        helper.make_node("Where", [f"{name}mask", f"{name}spread", f"{name}one"], [f"{name}factors"]),
        helper.make_node("ReduceProd", [f"{name}factors", f"{name}along"], [y], name=node.name, keepdims=0),
    ]
    return nodes, constants


GRID_SAMPLE_LINEAR = 20  # from this opset GridSample's bilinear mode is named "linear"


def _deform_conv(node, version: int, tensors: dict, values: dict):
    """A deformable conv as its taps sampled, then a 1x1 conv: tap k = (i, j) of output pixel (oy, ox) reads
    the input bilinearly at (oy * stride - pad + i * dilation + dy, likewise x) with (dy, dx) the offsets of
    its offset group, zero outside the map (GridSample, zeros padding, corners aligned, the offset groups as
    its batch), scaled by the mask where there is one; the samples [N, C * kh * kw, oh, ow] then meet the
    weights as a 1x1 conv of the same groups."""
    x, weights, offsets = node.input[:3]
    bias, mask = (node.input[i] if len(node.input) > i and node.input[i] else "" for i in (3, 4))
    y, name = node.output[0], _prefix(node)
    x_shape, w_shape = tensors.get(x, (None, None))[1], tensors.get(weights, (None, None))[1]
    o_shape = tensors.get(offsets, (None, None))[1]
    if any(s is None or None in s or len(s) != 4 for s in (x_shape, w_shape, o_shape)) or min(x_shape[2:]) < 2:
        raise StageError(
            f"DeformConv node {node.name!r}: only a 2-D deformable conv over a map of known shape, "
            f"2x2 or larger, is written out (fix: give the model's inputs fixed shapes in the recipe)"
        )
    (batch, channels, height, width), (_, _, kh, kw), (_, _, rows, columns) = x_shape, w_shape, o_shape
    taps, groups = kh * kw, _attribute(node, "offset_group", 1)
    strides, dilations = _attribute(node, "strides", [1, 1]), _attribute(node, "dilations", [1, 1])
    pads = _attribute(node, "pads", [0, 0, 0, 0])
    k = np.arange(taps)
    base = [
        (
            np.arange(size)[None, :, None] * strides[d]
            - pads[d]
            + (k // kw if d == 0 else k % kw)[:, None, None] * dilations[d]
        ).reshape(1, 1, taps, rows if d == 0 else 1, 1 if d == 0 else columns)
        for d, size in ((0, rows), (1, columns))
    ]
    scale = [2.0 / (height - 1), 2.0 / (width - 1)]  # pixel -> GridSample's [-1, 1], corners aligned

    def const(array, label: str) -> str:
        constants.append(
            numpy_helper.from_array(
                np.asarray(array, np.float32 if np.asarray(array).dtype.kind == "f" else np.int64), f"{name}{label}"
            )
        )
        return f"{name}{label}"

    def emit(op: str, inputs: list[str], label: str, **attributes) -> str:
        nodes.append(helper.make_node(op, inputs, [f"{name}{label}"], **attributes))
        return f"{name}{label}"

    nodes, constants = [], []
    pairs = emit("Reshape", [offsets, const([batch, groups, taps, 2, rows, columns], "pairs_shape")], "pairs")
    coordinates = []
    for d, axis_name in ((1, "x"), (0, "y")):  # GridSample's last axis is (x, y)
        delta = emit("Gather", [pairs, const(np.array(d), f"{axis_name}_at")], f"d{axis_name}", axis=3)
        at = emit("Add", [delta, const(base[d].astype(np.float32), f"{axis_name}_base")], f"{axis_name}_pixel")
        normal = emit(
            "Sub",
            [
                emit("Mul", [at, const(np.float32(scale[d]), f"{axis_name}_scale")], f"{axis_name}_scaled"),
                const(np.float32(1), f"{axis_name}_one"),
            ],
            f"{axis_name}_normal",
        )
        coordinates.append(emit("Unsqueeze", [normal, const([-1], f"{axis_name}_last")], f"{axis_name}_point"))
    grid = emit(
        "Reshape",
        [
            emit("Concat", coordinates, "points", axis=-1),
            const([batch * groups, taps * rows, columns, 2], "grid_shape"),
        ],
        "grid",
    )
    maps = emit("Reshape", [x, const([batch * groups, channels // groups, height, width], "maps_shape")], "maps")
    sampled = emit(
        "GridSample",
        [maps, grid],
        "sampled",
        align_corners=1,
        padding_mode="zeros",
        mode="linear" if version >= GRID_SAMPLE_LINEAR else "bilinear",
    )
    samples = emit(
        "Reshape",
        [sampled, const([batch, groups, channels // groups, taps, rows, columns], "samples_shape")],
        "samples",
    )
    if mask:
        weights_of = emit("Reshape", [mask, const([batch, groups, 1, taps, rows, columns], "mask_shape")], "masks")
        samples = emit("Mul", [samples, weights_of], "masked")
    unfolded = emit("Reshape", [samples, const([batch, channels * taps, rows, columns], "columns_shape")], "columns")
    kernel = emit("Reshape", [weights, const([w_shape[0], w_shape[1] * taps, 1, 1], "kernel_shape")], "kernel")
    nodes.append(
        helper.make_node(
            "Conv",
            [unfolded, kernel, *([bias] if bias else [])],
            [y],
            name=node.name,
            group=_attribute(node, "group", 1),
        )
    )
    return nodes, constants


class _Constants(dict):
    """A graph's constants by name, each read into numpy only when a rewrite asks for it: converting every
    initializer would copy a model's weights to write out one node."""

    def __getitem__(self, name: str):
        return numpy_helper.to_array(super().__getitem__(name))


def _scalar(value: float, name: str):
    return numpy_helper.from_array(np.float32(value), name)


def _prefix(node) -> str:
    """Names for the written-out tensors, from the node's output (unique in a graph)."""
    return f"{node.output[0]}/{node.op_type}/"


def _attribute(node, name: str, default):
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


# each operator this module writes out (float32 nodes of it) and the function writing it out
_WRITERS = {
    "LpNormalization": _lp_normalization,
    "Celu": _celu,
    "Swish": _swish,
    "Attention": _attention,
    "RotaryEmbedding": _rotary_embedding,
    "STFT": _stft,
    "DFT": _dft,
    "ReverseSequence": _reverse_sequence,
    "TensorScatter": _tensor_scatter,
    "Col2Im": _col2im,
    "Det": _det,
    "CumProd": _cumulative_product,
    "DeformConv": _deform_conv,
}
OPERATORS = tuple(_WRITERS)
