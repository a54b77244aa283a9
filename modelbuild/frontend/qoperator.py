"""Pre-quantized models in onnxruntime's QOperator format as QDQ: the form modelbuild's integer kernels take.

TVM's ONNX frontend imports QuantizeLinear / DequantizeLinear but has no QLinearConv, QLinearMatMul or
ConvInteger. Each becomes the same operator in float between dequantize and quantize, which is what the
quantize stage's own QDQ models look like, so integer_ops then turns it back into an int8 x int8 -> int32
kernel with one rescale. The integer sums are exact; what can differ from onnxruntime is the rounding of that
rescale, one step of the output's quantization at most.

- QLinearConv(x, sx, zx, w, sw, zw, sy, zy, B) -> Q(Conv(DQ(x), DQ(w), B * sx * sw), sy, zy)
- QLinearMatMul(a, sa, za, b, sb, zb, sy, zy) -> Q(MatMul(DQ(a), DQ(b)), sy, zy)
- ConvInteger(x, w, zx, zw) -> Cast<int32>(Conv(DQ(x, 1, zx), DQ(w, 1, zw))): exact while |sum| < 2^24,
  and MatMulInteger likewise with MatMul (dynamic quantization writes it)
- onnxruntime's contrib element-wise ops, which its quantizer emits between those (com.microsoft QLinearAdd,
  QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, QLinearGlobalAveragePool,
  QLinearAveragePool, QLinearConcat) -> Q(op(DQ(inputs))): they compute in float, as TVM would anyway.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from modelbuild.errors import StageError
from modelbuild.frontend import opset

CONTRIB = "com.microsoft"
# contrib op -> (float op, how many quantized inputs; None: QLinearConcat's variadic list)
ELEMENTWISE = {
    "QLinearAdd": ("Add", 2),
    "QLinearMul": ("Mul", 2),
    "QLinearSigmoid": ("Sigmoid", 1),
    "QLinearLeakyRelu": ("LeakyRelu", 1),
    "QLinearSoftmax": ("Softmax", 1),
    "QLinearGlobalAveragePool": ("GlobalAveragePool", 1),
    "QLinearAveragePool": ("AveragePool", 1),
    "QLinearConcat": ("Concat", None),
}
QOPERATORS = ("QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", *ELEMENTWISE)
PER_AXIS_OPSET = 13  # DequantizeLinear's axis, for per-channel weights


def to_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every QOperator node in QDQ form; the model itself when it has none."""
    if not any(_rewritten(node) for node in model.graph.node):
        return model
    model = opset.raised_to(model, PER_AXIS_OPSET, needed_for="the QOperator model's per-channel dequantize")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    scalars = _scalars(model)
    for index, node in enumerate(model.graph.node):
        if not _rewritten(node):
            out.graph.node.append(node)
            continue
        prefix = f"{node.name or node.op_type}~{index}"
        if node.domain == CONTRIB:
            nodes, constants = _elementwise(node, prefix)
        elif node.op_type in INTEGER_OPS:
            nodes, constants = _integer_op(node, prefix, *INTEGER_OPS[node.op_type], scalars=scalars)
        else:
            nodes, constants = REWRITES[node.op_type](node, prefix)
        out.graph.node.extend(nodes)
        out.graph.initializer.extend(constants)
    return _float_casts_bypassed(out)


def _scalars(model) -> set[str]:
    """Names of tensors known to be scalars: 0-d initializers and DynamicQuantizeLinear's scale and zero point."""
    names = {t.name for t in model.graph.initializer if not t.dims}
    for node in model.graph.node:
        if node.op_type == "DynamicQuantizeLinear":
            names.update(node.output[1:3])
    return names


def _float_casts_bypassed(model):
    """Cast<float>(y) of an integer op's int32 y as the float sum y was cast from: the same value (the sum is
    an integer below 2^24, or int32 rounded to float as the Cast rounds it), and no float -> int32 -> float
    round trip in every element of the epilogue (TVM writes Cast<int32> as a wrap in int64). Dynamic
    quantization follows every MatMulInteger with this Cast. The int32 Cast goes once nothing reads it."""
    sums = {n.output[0]: n.input[0] for n in model.graph.node if n.name.endswith(INTEGER_CAST)}
    nodes = []
    for node in model.graph.node:
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        if node.op_type == "Cast" and node.input[0] in sums and to == TensorProto.FLOAT:
            node = helper.make_node("Identity", [sums[node.input[0]]], list(node.output), name=node.name)
        nodes.append(node)
    read = {name for n in nodes for name in n.input} | {o.name for o in model.graph.output}
    del model.graph.node[:]
    model.graph.node.extend(n for n in nodes if not n.name.endswith(INTEGER_CAST) or n.output[0] in read)
    return model


def _rewritten(node) -> bool:
    if node.domain == CONTRIB:
        return node.op_type in ELEMENTWISE
    return node.domain in ("", "ai.onnx") and (node.op_type in REWRITES or node.op_type in INTEGER_OPS)


def _elementwise(node, prefix: str):
    """Q(op(DQ(x) for each quantized input)), the op's own attributes kept (LeakyRelu's alpha, pooling's)."""
    op, arity = ELEMENTWISE[node.op_type]
    attributes = _attributes(node)
    if attributes.pop("channels_last", 0):
        raise StageError(f"operator {node.op_type} (node {node.name!r}) with channels_last = 1 is not supported")
    if node.op_type == "QLinearSoftmax" and attributes.pop("opset", 13) < 13 and attributes.get("axis", -1) != -1:
        raise StageError(
            f"operator {node.op_type} (node {node.name!r}) has Softmax's opset < 13 semantics on a "
            f"middle axis; re-export at opset 13 or later"
        )
    inputs = list(node.input)
    if arity is None:  # QLinearConcat: the output's scale and zero point first, then (x, scale, zero) each
        (out_scale, out_zero), triples = inputs[:2], [inputs[i : i + 3] for i in range(2, len(inputs), 3)]
    else:
        triples, (out_scale, out_zero) = (
            [inputs[3 * i : 3 * i + 3] for i in range(arity)],
            inputs[3 * arity : 3 * arity + 2],
        )
    nodes, floats = [], []
    for i, (x, scale, zero) in enumerate(triples):
        floats.append(f"{prefix}/x{i}")
        nodes.append(
            helper.make_node(
                "DequantizeLinear", [x, scale] + ([zero] if zero else []), [floats[-1]], name=f"{prefix}/dq{i}"
            )
        )
    nodes += [
        helper.make_node(op, floats, [f"{prefix}/y"], name=f"{prefix}/{op}", **attributes),
        helper.make_node(
            "QuantizeLinear",
            [f"{prefix}/y", out_scale] + ([out_zero] if out_zero else []),
            [node.output[0]],
            name=f"{prefix}/q_y",
        ),
    ]
    return nodes, []


def _attributes(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _qlinear_conv(node, prefix: str):
    x, sx, zx, w, sw, zw, sy, zy, *bias = list(node.input)
    nodes = [
        helper.make_node("DequantizeLinear", [x, sx, zx], [f"{prefix}/x"], name=f"{prefix}/dq_x"),
        helper.make_node("DequantizeLinear", [w, sw, zw], [f"{prefix}/w"], name=f"{prefix}/dq_w", axis=0),
    ]
    conv_inputs = [f"{prefix}/x", f"{prefix}/w"]
    if bias and bias[0]:  # int32 at scale sx * sw, zero point 0
        nodes += [
            helper.make_node("Mul", [sx, sw], [f"{prefix}/bias_scale"], name=f"{prefix}/bias_scale"),
            helper.make_node(
                "Cast", [bias[0]], [f"{prefix}/bias_int"], name=f"{prefix}/bias_cast", to=TensorProto.FLOAT
            ),
            helper.make_node(
                "Mul", [f"{prefix}/bias_int", f"{prefix}/bias_scale"], [f"{prefix}/bias"], name=f"{prefix}/bias"
            ),
        ]
        conv_inputs.append(f"{prefix}/bias")
    nodes += [
        helper.make_node("Conv", conv_inputs, [f"{prefix}/y"], name=f"{prefix}/conv", **_attributes(node)),
        helper.make_node("QuantizeLinear", [f"{prefix}/y", sy, zy], [node.output[0]], name=f"{prefix}/q_y"),
    ]
    return nodes, []


def _qlinear_matmul(node, prefix: str):
    a, sa, za, b, sb, zb, sy, zy = list(node.input)
    nodes = [
        helper.make_node("DequantizeLinear", [a, sa, za], [f"{prefix}/a"], name=f"{prefix}/dq_a"),
        helper.make_node("DequantizeLinear", [b, sb, zb], [f"{prefix}/b"], name=f"{prefix}/dq_b", axis=1),
        helper.make_node("MatMul", [f"{prefix}/a", f"{prefix}/b"], [f"{prefix}/y"], name=f"{prefix}/matmul"),
        helper.make_node("QuantizeLinear", [f"{prefix}/y", sy, zy], [node.output[0]], name=f"{prefix}/q_y"),
    ]
    return nodes, []


def _integer_op(node, prefix: str, op: str, weight_axis: int, *, scalars: set[str]):
    x, w, *zeros = list(node.input) + ["", ""]
    one = f"{prefix}/one"
    constants = [
        numpy_helper.from_array(np.float32(1.0), one),
        numpy_helper.from_array(np.float32(0.0), f"{prefix}/zero"),
    ]
    nodes = []
    for role, tensor, zero, axis in (("x", x, zeros[0], 1), ("w", w, zeros[1], weight_axis)):
        scale = one
        # a scale of ones in the zero point's shape (per output channel where it is); a scalar's is the constant
        # one, which integer_ops needs to find the dequantize of a zero point computed at run time
        if zero and zero not in scalars:
            nodes += [
                helper.make_node(
                    "Cast", [zero], [f"{prefix}/{role}_zero"], name=f"{prefix}/{role}_zero", to=TensorProto.FLOAT
                ),
                helper.make_node(
                    "Mul",
                    [f"{prefix}/{role}_zero", f"{prefix}/zero"],
                    [f"{prefix}/{role}_zeros"],
                    name=f"{prefix}/{role}_zeros",
                ),
                helper.make_node(
                    "Add", [f"{prefix}/{role}_zeros", one], [f"{prefix}/{role}_scale"], name=f"{prefix}/{role}_scale"
                ),
            ]
            scale = f"{prefix}/{role}_scale"
        nodes.append(
            helper.make_node(
                "DequantizeLinear",
                [tensor, scale] + ([zero] if zero else []),
                [f"{prefix}/{role}"],
                name=f"{prefix}/dq_{role}",
                axis=axis,
            )
        )
    nodes += [
        helper.make_node(
            op, [f"{prefix}/x", f"{prefix}/w"], [f"{prefix}/y"], name=f"{prefix}/{op}", **_attributes(node)
        ),
        helper.make_node(
            "Cast", [f"{prefix}/y"], [node.output[0]], name=f"{prefix}{INTEGER_CAST}", to=TensorProto.INT32
        ),
    ]
    return nodes, constants


INTEGER_CAST = "/int32_cast"  # how _integer_op names the Cast of its float sum to the op's int32 output


REWRITES = {"QLinearConv": _qlinear_conv, "QLinearMatMul": _qlinear_matmul}
INTEGER_OPS = {"ConvInteger": ("Conv", 0), "MatMulInteger": ("MatMul", 1)}  # op -> (float op, weight's axis)
