"""Loops of a constant count, unrolled: TVM's ONNX frontend has no Loop converter.

A scripted PyTorch loop (torch.jit.script, or a loop over a range the tracer could not see through) and a
TensorFlow while_loop (through tf2onnx) export as a Loop, and the import failed on it even where its trip count
is a constant and it never stops early: a recurrent cell run for a fixed number of steps, a refinement
iterated N times. Such a Loop is written out here as its body N times over, each copy reading the values the
one before carried, its iteration number a constant, and each scan output the concatenation of the copies'
values on a new first axis, as ONNX defines them.

Unrolled only where the count is a constant of at most MAX_ITERATIONS, the loop's condition is absent or a
constant true and the body's is true at every step (a constant, or the condition it was given), and the body
holds no graph of its own (an If or a Loop in it); any other Loop is left, and the import names it.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from modelbuild.frontend import inferred, node_rewrite

MAX_ITERATIONS = 256
MAX_NODES = 20000  # the unrolled graph's nodes, at most: the body times the count


def unrolled(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each Loop of its main graph that can be unrolled written out; the model itself when it
    has none."""
    values = inferred.constants(model)
    counts = {i: _count(node, values) for i, node in enumerate(model.graph.node) if node.op_type == "Loop"}
    if not any(count is not None for count in counts.values()):
        return model
    return node_rewrite.replaced(model, lambda index, node: None if counts.get(index) is None else
                                 _unroll(node, counts[index], f"{node.name or 'loop'}.{index}"))


def _count(node, values: dict) -> int | None:
    """The loop's trip count where it can be unrolled, else None."""
    count, _ = steps_or_refusal(node, values)
    return count


def steps_or_refusal(node, values: dict) -> tuple[int | None, str | None]:
    """(the trip count, None) where the Loop can be unrolled, else (None, why not) with `values` the graph's
    constants."""
    body = helper.get_attribute_value(next(a for a in node.attribute if a.name == "body"))
    trip, condition = (list(node.input) + ["", ""])[:2]
    if not trip or trip not in values:
        return None, "its trip count is not a constant"
    if condition and not _true(values.get(condition)):
        return None, "its condition is not a constant true"
    count = int(numpy_helper.to_array(values[trip]).reshape(-1)[0])
    if not 1 <= count <= MAX_ITERATIONS:
        return None, f"modelbuild unrolls a Loop of 1 to {MAX_ITERATIONS} steps, and this one runs {count}"
    if count * len(body.node) > MAX_NODES:
        nodes = count * len(body.node)
        return None, f"unrolled, its body would be {nodes} nodes, over the {MAX_NODES} modelbuild writes"
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in body.node for a in n.attribute):
        return None, "its body holds a graph of its own (an If or a Loop), which modelbuild does not unroll"
    if not _stays_true(body):
        return None, "its body computes whether to go on, so it may stop early, which modelbuild does not unroll"
    return count, None


def _true(tensor) -> bool:
    return tensor is not None and bool(numpy_helper.to_array(tensor).reshape(-1)[0])


def _stays_true(body) -> bool:
    """Whether the body's condition output is true at every step: the condition it is given (true, as the
    loop's is), or a constant true."""
    condition_in, condition_out = body.input[1].name, body.output[0].name
    if condition_out == condition_in:
        return True
    producer = next((n for n in body.node if condition_out in n.output), None)
    if producer is not None and producer.op_type == "Identity" and producer.input[0] == condition_in:
        return True
    constant = {**inferred.constants(helper.make_model(body)), **{t.name: t for t in body.initializer}}
    return _true(constant.get(condition_out))


def _unroll(node, count: int, prefix: str) -> tuple[list, list]:
    """The loop's body `count` times, then its outputs: the last values carried, and each scan output the
    copies' values stacked on a new first axis."""
    body = helper.get_attribute_value(next(a for a in node.attribute if a.name == "body"))
    carried_count = len(body.input) - 2
    carried = list(node.input[2:2 + carried_count])
    constants = [_renamed(t, f"{prefix}.{t.name}") for t in body.initializer]
    shared = {t.name: f"{prefix}.{t.name}" for t in body.initializer}
    true = numpy_helper.from_array(np.array(True), f"{prefix}.true")
    constants.append(true)
    nodes, scans = [], [[] for _ in body.output[1 + carried_count:]]
    for step in range(count):
        step_number = numpy_helper.from_array(np.array(step, np.int64), f"{prefix}.{step}.iteration")
        constants.append(step_number)
        names = {**shared, body.input[0].name: step_number.name, body.input[1].name: true.name}
        names.update({formal.name: actual for formal, actual in zip(body.input[2:], carried)})
        for inner in body.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(inner)
            copy.name = f"{prefix}.{step}.{inner.name or inner.output[0]}"
            copy.input[:] = [names.get(name, name) if name else "" for name in inner.input]
            for position, name in enumerate(inner.output):
                if name:
                    names[name] = copy.output[position] = f"{prefix}.{step}.{name}"
            nodes.append(copy)
        outputs = [names.get(o.name, o.name) for o in body.output]
        carried = outputs[1:1 + carried_count]
        for scan, value in zip(scans, outputs[1 + carried_count:]):
            scan.append(value)
    nodes += [helper.make_node("Identity", [value], [name], name=f"{prefix}.out.{name}")
              for value, name in zip(carried, node.output) if name]
    axis = numpy_helper.from_array(np.array([0], np.int64), f"{prefix}.axis")
    constants.append(axis)
    for scan, name in zip(scans, node.output[carried_count:]):
        if not name:
            continue
        stacked = [f"{prefix}.{step}.{name}.stacked" for step in range(count)]
        nodes += [helper.make_node("Unsqueeze", [value, axis.name], [piece]) for value, piece in zip(scan, stacked)]
        nodes.append(helper.make_node("Concat", stacked, [name], name=f"{prefix}.out.{name}", axis=0))
    return nodes, constants


def _renamed(tensor, name: str):
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    copy.name = name
    return copy
