"""Every node of a model under a name of its own.

ONNX leaves a node's name optional and does not require names to be unique; generated and hand-written models
often have none (onnx.helper's make_node names nothing). The quantize stage finds layers by name (the convs it
smooths, the nodes a recipe leaves in float or widens to int16, its per-layer figures), so with every name
empty a smoothed conv's factors were looked for on the Sigmoid after it, and the stage died with an IndexError.
"""

from __future__ import annotations


def unique_node_names(model):
    """The model itself where every node's name is its own, else a copy in which each node with no name, or
    with a name an earlier node has, is called by its operator and position (as layer_names.label calls it),
    made unique."""
    import onnx

    names = [node.name for node in model.graph.node]
    if all(names) and len(set(names)) == len(names):
        return model
    named = onnx.ModelProto()
    named.CopyFrom(model)
    taken, seen = set(names), set()
    for index, node in enumerate(named.graph.node):
        if node.name and node.name not in seen:
            seen.add(node.name)
            continue
        base = f"{node.op_type}_{index}"
        name, suffix = base, 1
        while name in taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        node.name = name
        taken.add(name)
        seen.add(name)
    return named
