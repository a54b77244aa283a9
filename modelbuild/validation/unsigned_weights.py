"""A pre-quantized model's int8 weights as uint8, so that onnxruntime's reference for it is exact on every CPU.

onnxruntime multiplies uint8 activations by int8 weights, on x86 CPUs without VNNI (AVX2), with `vpmaddubsw`,
whose 16-bit sums of two products saturate when the weights use their full range (its documentation's answer
is `reduce_range`: 7-bit weights). On a Zen 4 VM without VNNI that put a QOperator classifier's softmax 0.066
from its exact value and changed its top-1 answer, so an exact int8 library failed its gates against a wrong
reference. uint8 by uint8 takes another kernel there (both widened to 16 bits), whose sums are exact. A weight
w with zero point z and the weight w + 128 with zero point z + 128 are the same real numbers, so the rewritten
model is the same model, and where onnxruntime was exact already (VNNI, Arm) it gives the same answer.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

# op -> (activation, its zero point, weight, its zero point): positions among the node's inputs
SLOTS = {
    "QLinearConv": (0, 2, 3, 5),
    "QLinearMatMul": (0, 2, 3, 5),
    "ConvInteger": (0, 2, 1, 3),
    "MatMulInteger": (0, 2, 1, 3),
}
SHIFT = 128


def unsigned_weights(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """The model with the int8 weights of its integer ops on uint8 activations as uint8 (and their zero
    points shifted with them), or None where it has none. Weights must be initializers; one read elsewhere
    too keeps its int8 form for those readers (the uint8 copy is a new initializer)."""
    constants = {t.name: t for t in model.graph.initializer}
    signed = [i for i, node in enumerate(model.graph.node) if _signed_weight(node, constants)]
    types = _activation_types(model, [model.graph.node[i] for i in signed], constants)
    chosen = [i for i, kind in zip(signed, types) if kind == TensorProto.UINT8]
    if not chosen:
        return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    added: set[str] = set()
    for i in chosen:
        node = out.graph.node[i]
        _, _, weight_at, zero_at = SLOTS[node.op_type]
        inputs = list(node.input) + [""] * (zero_at + 1 - len(node.input))
        weight, zero = inputs[weight_at], inputs[zero_at]
        inputs[weight_at] = _add(out, added, f"{weight}~u8", _shifted(constants[weight]))
        inputs[zero_at] = (
            _add(out, added, f"{zero}~u8", _shifted(constants[zero]))
            if zero
            else _add(out, added, "int8_zero~u8", np.uint8(SHIFT))
        )  # absent: int8 zero
        del node.input[:]
        node.input.extend(inputs)
    _drop_unread(out.graph, {name.removesuffix("~u8") for name in added})
    return out


def _drop_unread(graph, replaced: set[str]) -> None:
    """The int8 originals no node reads any more: onnxruntime warns of each unused initializer."""
    read = _read_names(graph) | {o.name for o in graph.output}
    kept = [t for t in graph.initializer if t.name not in replaced or t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)


def _read_names(graph) -> set[str]:
    """Every name a node reads, in subgraphs (If, Loop) too."""
    names = set()
    for node in graph.node:
        names.update(node.input)
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                names |= _read_names(attribute.g)
            for sub in attribute.graphs:
                names |= _read_names(sub)
    return names


def _signed_weight(node, constants: dict) -> bool:
    if node.domain not in ("", "ai.onnx") or node.op_type not in SLOTS:
        return False
    _, _, weight_at, zero_at = SLOTS[node.op_type]
    if weight_at >= len(node.input) or node.input[weight_at] not in constants:
        return False
    zero = node.input[zero_at] if zero_at < len(node.input) else ""
    return constants[node.input[weight_at]].data_type == TensorProto.INT8 and (not zero or zero in constants)


def _activation_types(model: onnx.ModelProto, nodes: list, constants: dict) -> list[int]:
    """Each node's activation element type: its zero point's where it has one (QLinear ops always do), else
    what ONNX's type inference says (run once, only then)."""
    typed = {}
    found = []
    for node in nodes:
        activation_at, zero_at, _, _ = SLOTS[node.op_type]
        zero = node.input[zero_at] if zero_at < len(node.input) else ""
        if zero in constants:
            found.append(constants[zero].data_type)
            continue
        if not typed:
            graph = onnx.shape_inference.infer_shapes(model).graph
            typed = {v.name: v.type.tensor_type.elem_type for v in (*graph.input, *graph.value_info)}
        found.append(typed.get(node.input[activation_at], TensorProto.UNDEFINED))
    return found


def _shifted(tensor) -> np.ndarray:
    return (numpy_helper.to_array(tensor).astype(np.int16) + SHIFT).astype(np.uint8)


def _add(model, added: set, name: str, values: np.ndarray) -> str:
    if name not in added:
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(values), name))
        added.add(name)
    return name
