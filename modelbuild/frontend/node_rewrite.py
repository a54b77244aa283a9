"""One way to replace nodes of an ONNX model's main graph, shared by the rewrites that write an operator out
as others (decompositions.py, loops.py, recurrent.py)."""

from __future__ import annotations

import onnx


def replaced(model: onnx.ModelProto, replacement) -> onnx.ModelProto:
    """A copy of the model (the caller's stays as it was) in which each node of the main graph that
    `replacement(index, node)` answers with (nodes, initializers) is replaced by those nodes and the
    initializers are added; a node it answers None for is kept, in its place."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes, initializers = [], []
    for index, node in enumerate(out.graph.node):
        written = replacement(index, node)
        if written is None:
            nodes.append(node)
            continue
        nodes += written[0]
        initializers += written[1]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(initializers)
    return out
