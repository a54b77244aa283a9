"""A graph's nodes in an order where each comes after the nodes whose outputs it reads.

ONNX asks for that order, and onnxruntime runs a graph without it (it sorts the nodes itself); TVM's
importer reads the nodes as listed and failed at the first input not yet computed (a model edited by hand,
a node appended after its consumers), with only the tensor's name for a message. onnxslim sorts the graph
it simplifies; with `simplify = false` nothing else did.
"""

from __future__ import annotations

import heapq

import onnx


def topologically_sorted(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its main graph's nodes sorted (the listed order wherever it allows); the model itself
    when they already are, or when some input is computed by no node or the nodes form a cycle (the import
    then says what is wrong)."""
    order = _order(model.graph)
    if order is None or order == list(range(len(model.graph.node))):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = [out.graph.node[i] for i in order]
    copies = [onnx.NodeProto() for _ in nodes]
    for copy, node in zip(copies, nodes):
        copy.CopyFrom(node)
    del out.graph.node[:]
    out.graph.node.extend(copies)
    return out


def _order(graph) -> list[int] | None:
    """Indices of the nodes in a sorted order, the lowest listed index first among those ready (Kahn's
    algorithm); None if some node reads a tensor that nothing computes."""
    available = {
        "",
        *(i.name for i in graph.input),
        *(t.name for t in graph.initializer),
        *(t.values.name for t in graph.sparse_initializer),
    }
    producer = {name: i for i, node in enumerate(graph.node) for name in node.output}
    consumers: list[list[int]] = [[] for _ in graph.node]
    waiting_on = []
    for i, node in enumerate(graph.node):
        reads = [name for name in _reads(node) if name not in available]
        if any(name not in producer for name in reads):
            return None
        sources = {producer[name] for name in reads}
        for source in sources:
            consumers[source].append(i)
        waiting_on.append(len(sources))
    ready = [i for i, count in enumerate(waiting_on) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for consumer in consumers[i]:
            waiting_on[consumer] -= 1
            if waiting_on[consumer] == 0:
                heapq.heappush(ready, consumer)
    return order if len(order) == len(graph.node) else None  # short: a cycle


def _reads(node) -> list[str]:
    """The tensors a node reads, those its subgraphs read from the graph around them included."""
    names = list(node.input)
    for attribute in node.attribute:
        for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
            inner = {*(i.name for i in subgraph.input), *(t.name for t in subgraph.initializer)}
            for inner_node in subgraph.node:
                names += [n for n in _reads(inner_node) if n not in inner]
                inner.update(inner_node.output)
    return names
