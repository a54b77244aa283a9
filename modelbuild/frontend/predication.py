"""An `If` on a computed condition, as both branches and a select: TVM's ONNX frontend has no If.

An `If` on a bound input or a constant folds away in simplification. One on the data does not:
openWakeWord's detectors run a second "verifier" network when the first one's score passes 0.5, and
`modelbuild` refused them. ONNX operators have no side effects, so where both branches return tensors of
the same static shapes the If is the same function as computing both and choosing per output with
`Where(cond, then, else)`: the branch nodes are inlined under names of their own and the library always
pays for both branches. An If whose branches return different shapes stays, and import names it.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def predicate(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every If of same-shaped branches as both branches and a Where per output; the model
    itself when there is none. A branch holding its own If is inlined, then that one is predicated in turn."""
    if not any(node.op_type == "If" for node in model.graph.node):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    while True:
        inferred = onnx.shape_inference.infer_shapes(out)
        index = next((i for i, node in enumerate(inferred.graph.node) if _selectable(node)), None)
        if index is None:
            return out
        node = inferred.graph.node[index]
        inlined, constants = _inline(node, index)
        del out.graph.node[index]
        for offset, new in enumerate(inlined):
            out.graph.node.insert(index + offset, new)
        out.graph.initializer.extend(constants)


def _selectable(node) -> bool:
    """An If whose two branches return tensors of one static shape each, equal output for output."""
    if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
        return False
    branches = _branches(node)
    shapes = [[_static_shape(value) for value in branch.output] for branch in branches.values()]
    return len(branches) == 2 and None not in shapes[0] and shapes[0] == shapes[1]


def _branches(node) -> dict[str, onnx.GraphProto]:
    return {a.name: a.g for a in node.attribute if a.name in ("then_branch", "else_branch")}


def _static_shape(value) -> list[int] | None:
    if value.type.WhichOneof("value") != "tensor_type" or not value.type.tensor_type.HasField("shape"):
        return None
    dims = value.type.tensor_type.shape.dim
    if not all(d.HasField("dim_value") for d in dims):
        return None
    return [d.dim_value for d in dims]


def _inline(node, index: int) -> tuple[list, list]:
    """Both branches' nodes and constants under names of their own (sibling branches may reuse a name), the
    condition as a scalar (a [1] condition would broadcast a scalar output to [1]), and one Where per output."""
    prefix = f"{node.name or 'If'}~{index}"
    condition = f"{prefix}/condition"
    nodes = [helper.make_node("Reshape", [node.input[0], f"{prefix}/scalar"], [condition], name=condition)]
    constants = [numpy_helper.from_array(np.zeros(0, np.int64), f"{prefix}/scalar")]
    chosen = {}
    for kind, branch in _branches(node).items():
        renamed = {name: f"{prefix}/{kind}/{name}" for name in _defined(branch)}
        constants += [_renamed_constant(tensor, renamed) for tensor in branch.initializer]
        for inner in branch.node:
            nodes.append(_renamed_node(inner, renamed, f"{prefix}/{kind}/{inner.name or inner.op_type}"))
        chosen[kind] = [renamed.get(value.name, value.name) for value in branch.output]
    for output, then_value, else_value in zip(node.output, chosen["then_branch"], chosen["else_branch"]):
        nodes.append(
            helper.make_node("Where", [condition, then_value, else_value], [output], name=f"{prefix}/{output}")
        )
    return nodes, constants


def _defined(graph) -> set[str]:
    return {t.name for t in graph.initializer} | {name for node in graph.node for name in node.output if name}


def _renamed_constant(tensor, renamed: dict) -> onnx.TensorProto:
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    copy.name = renamed[tensor.name]
    return copy


def _renamed_node(node, renamed: dict, name: str):
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.name = name
    _rename_values(copy, renamed)
    return copy


def _rename_values(node, renamed: dict) -> None:
    """Rename the node's inputs and outputs, and the outer values its own subgraphs read (ONNX forbids a
    subgraph to shadow an outer name, so every use of a renamed name is a use of that value)."""
    node.input[:] = [renamed.get(name, name) for name in node.input]
    node.output[:] = [renamed.get(name, name) for name in node.output]
    for attribute in node.attribute:
        for graph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
            for inner in graph.node:
                _rename_values(inner, renamed)
            for value in graph.output:
                value.name = renamed.get(value.name, value.name)
