"""Operators TVM's ONNX frontend has no converter for, written as the operators it has.

LpNormalization is how an exporter writes an embedding's x / |x| (a face or speaker embedding's last node;
onnx_import.NORMALISING already reads it as one), and Celu is an activation of the ELU family. Each failed
the import with "operator ... is not supported by TVM's ONNX frontend". Each form here computes what
onnxruntime computes, a zero vector normalised to zeros included (tests/test_decompositions.py).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from modelbuild.frontend.opset import default_opset

REDUCTIONS = {1: "ReduceL1", 2: "ReduceL2"}  # LpNormalization's p -> the norm that divides
AXES_AS_INPUT = 18  # from this opset a reduction reads its axes as an input; an attribute is ignored


def decomposed(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each float32 LpNormalization and Celu of its main graph written out; the model itself
    when it has none (an LpNormalization of a p other than 1 or 2, or of another dtype, the import then names
    as TVM's to lack)."""
    if not any(_writes(node) for node in model.graph.node):
        return model
    float32 = _float32_tensors(model)
    if not any(_writes(node, float32) for node in model.graph.node):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes, constants = [], []
    version = default_opset(model)
    for node in out.graph.node:
        written = _writes(node, float32)
        if written is None:
            nodes.append(node)
            continue
        new_nodes, new_constants = written(node, version)
        nodes += new_nodes
        constants += new_constants
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(constants)
    return out


def _float32_tensors(model: onnx.ModelProto) -> set[str]:
    """The tensors shape inference finds float32 (the written-out forms' constants are float32)."""
    from onnx import shape_inference

    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # a model onnx cannot infer: nothing is written out, and TVM's import says what it lacks
        return set()
    values = [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
    return {v.name for v in values if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}


def _writes(node, float32: set[str] | None = None):
    """The function writing the node out, or None; with `float32`, only for a node whose input is in it."""
    if float32 is not None and not (node.input and node.input[0] in float32):
        return None
    if node.op_type == "LpNormalization" and _attribute(node, "p", 2) in REDUCTIONS:
        return _lp_normalization
    if node.op_type == "Celu":
        return _celu
    return None


def _lp_normalization(node, version: int):
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
    nodes = [norm,
             helper.make_node("Equal", [f"{name}norm", zero.name], [f"{name}is_zero"]),
             helper.make_node("Where", [f"{name}is_zero", one.name, f"{name}norm"], [f"{name}divisor"]),
             helper.make_node("Div", [x, f"{name}divisor"], [y], name=node.name)]
    return nodes, constants


def _celu(node, version: int):
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1))."""
    x, y, name = node.input[0], node.output[0], _prefix(node)
    alpha = _scalar(_attribute(node, "alpha", 1.0), f"{name}alpha")
    zero, one = _scalar(0.0, f"{name}zero"), _scalar(1.0, f"{name}one")
    nodes = [helper.make_node("Div", [x, alpha.name], [f"{name}scaled"]),
             helper.make_node("Exp", [f"{name}scaled"], [f"{name}exp"]),
             helper.make_node("Sub", [f"{name}exp", one.name], [f"{name}expm1"]),
             helper.make_node("Mul", [f"{name}expm1", alpha.name], [f"{name}elu"]),
             helper.make_node("Min", [f"{name}elu", zero.name], [f"{name}negative"]),
             helper.make_node("Relu", [x], [f"{name}positive"]),
             helper.make_node("Add", [f"{name}positive", f"{name}negative"], [y], name=node.name)]
    return nodes, [alpha, zero, one]


def _scalar(value: float, name: str):
    return numpy_helper.from_array(np.float32(value), name)


def _prefix(node) -> str:
    """Names for the written-out tensors, from the node's output (unique in a graph)."""
    return f"{node.output[0]}/{node.op_type}/"


def _attribute(node, name: str, default):
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)
