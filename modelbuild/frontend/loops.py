"""Loops of a constant count, unrolled: TVM's ONNX frontend has no Loop or Scan converter.

A scripted PyTorch loop (torch.jit.script, or a loop over a range the tracer could not see through) and a
TensorFlow while_loop (through tf2onnx) export as a Loop, and the import failed on it even where its trip count
is a constant and it never stops early: a recurrent cell run for a fixed number of steps, a refinement
iterated N times. Such a Loop is written out here as its body N times over, each copy reading the values the
one before carried, its iteration number a constant, and each scan output the concatenation of the copies'
values on a new first axis, as ONNX defines them.

Unrolled only where the count is a constant of at most MAX_ITERATIONS, the loop's condition is absent or a
constant true and the body's is true at every step (a constant, or the condition it was given), and the body
holds no graph of its own (an If or a Loop in it); any other Loop is left, and the import names it.

A Scan (tf2onnx's tf.scan and tf.map_fn, older exporters' recurrent layers) runs its body once per element
of its scan inputs along their axes, carrying states from one step to the next: with the inputs' length known
when the model is built (the recipe fixes its inputs' shapes), it is written out the same way, each copy
reading its element with a Gather, and the same limits hold.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from modelbuild.frontend import inferred, node_rewrite

MAX_ITERATIONS = 256
MAX_NODES = 20000  # the unrolled graph's nodes, at most: the body times the count


def unrolled(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each Loop and Scan of its main graph that can be unrolled written out; the model itself
    when it has none."""
    kinds = {node.op_type for node in model.graph.node}
    if not kinds & {"Loop", "Scan"}:
        return model
    values = inferred.constants(model) if "Loop" in kinds else {}
    shapes = inferred.tensors(model) if "Scan" in kinds else {}
    counts = {
        i: (steps_or_refusal(node, values) if node.op_type == "Loop" else scan_steps_or_refusal(node, shapes))[0]
        for i, node in enumerate(model.graph.node)
        if node.op_type in ("Loop", "Scan")
    }
    if not any(count is not None for count in counts.values()):
        return model
    unroll = {"Loop": _unroll, "Scan": _unroll_scan}
    return node_rewrite.replaced(
        model,
        lambda index, node: (
            None
            if counts.get(index) is None
            else unroll[node.op_type](node, counts[index], f"{node.name or 'loop'}.{index}")
        ),
    )


def steps_or_refusal(node, values: dict) -> tuple[int | None, str | None]:
    """(the trip count, None) where the Loop can be unrolled, else (None, why not) with `values` the graph's
    constants."""
    body = _body(node)
    trip, condition = (list(node.input) + ["", ""])[:2]
    if not trip or trip not in values:
        return None, "its trip count is not a constant"
    if condition and not _true(values.get(condition)):
        return None, "its condition is not a constant true"
    count = int(numpy_helper.to_array(values[trip]).reshape(-1)[0])
    if not 1 <= count <= MAX_ITERATIONS:
        return None, f"modelbuild unrolls a Loop of 1 to {MAX_ITERATIONS} steps, and this one runs {count}"
    refusal = _body_refusal(body, count)
    if refusal:
        return None, refusal
    if not _stays_true(body):
        return None, "its body computes whether to go on, so it may stop early, which modelbuild does not unroll"
    return count, None


def scan_steps_or_refusal(node, shapes: dict) -> tuple[int | None, str | None]:
    """(the steps, None) where the Scan can be unrolled, else (None, why not), with `shapes` what onnx's
    shape inference found (inferred.tensors)."""
    body = _body(node)
    scanned = _scan_inputs(node)
    lengths = set()
    for name, axis in zip(scanned, _ints(node, "scan_input_axes", len(scanned))):
        dims = shapes.get(name, (None, None))[1]
        if dims is None or not dims or dims[axis % len(dims)] is None:
            return None, f"the length of its scan input {name!r} is not known when it is built"
        lengths.add(dims[axis % len(dims)])
    if len(lengths) != 1:
        return None, "its scan inputs differ in length"
    count = lengths.pop()
    if not 1 <= count <= MAX_ITERATIONS:
        return None, f"modelbuild unrolls a Scan of 1 to {MAX_ITERATIONS} steps, and this one runs {count}"
    refusal = _body_refusal(body, count)
    return (None, refusal) if refusal else (count, None)


def _scan_inputs(node) -> list[str]:
    count = next(a.i for a in node.attribute if a.name == "num_scan_inputs")
    return list(node.input[len(node.input) - count :])


def _ints(node, name: str, count: int) -> list[int]:
    """A Scan's list attribute per scan input or output: zeros (the first axis, forwards) where it is absent."""
    found = next((a for a in node.attribute if a.name == name), None)
    return list(found.ints) if found is not None else [0] * count


def _body_refusal(body, count: int) -> str | None:
    """Why a body cannot be written out `count` times, or None."""
    if count * len(body.node) > MAX_NODES:
        nodes = count * len(body.node)
        return f"unrolled, its body would be {nodes} nodes, over the {MAX_NODES} modelbuild writes"
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in body.node for a in n.attribute):
        return "its body holds a graph of its own (an If or a Loop), which modelbuild does not unroll"
    return None


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
    body = _body(node)
    carried_count = len(body.input) - 2
    carried = list(node.input[2 : 2 + carried_count])
    constants, shared = _shared_constants(body, prefix)
    true = numpy_helper.from_array(np.array(True), f"{prefix}.true")
    constants.append(true)
    nodes, scans = [], [[] for _ in body.output[1 + carried_count :]]
    for step in range(count):
        step_number = numpy_helper.from_array(np.array(step, np.int64), f"{prefix}.{step}.iteration")
        constants.append(step_number)
        names = {**shared, body.input[0].name: step_number.name, body.input[1].name: true.name}
        names.update({formal.name: actual for formal, actual in zip(body.input[2:], carried)})
        outputs = _copied_body(body, names, f"{prefix}.{step}", nodes)
        carried = outputs[1 : 1 + carried_count]
        for scan, value in zip(scans, outputs[1 + carried_count :]):
            scan.append(value)
    nodes += _identities(carried, node.output, prefix)
    for scan, name in zip(scans, node.output[carried_count:]):
        if name:
            nodes += _stacked(scan, name, 0, prefix, constants)
    return nodes, constants


def _unroll_scan(node, count: int, prefix: str) -> tuple[list, list]:
    """The scan's body `count` times, each reading the scan inputs' elements at its step (from the end where
    an input's direction is 1) and the states the copy before wrote; then its outputs: the last states, and
    each scan output the copies' values stacked along its axis (last to first where its direction is 1)."""
    body = _body(node)
    scanned = _scan_inputs(node)
    states = list(node.input[: len(node.input) - len(scanned)])
    input_axes, backwards = (_ints(node, name, len(scanned)) for name in ("scan_input_axes", "scan_input_directions"))
    outputs_count = len(body.output) - len(states)
    output_axes, reversed_outputs = (
        _ints(node, name, outputs_count) for name in ("scan_output_axes", "scan_output_directions")
    )
    constants, shared = _shared_constants(body, prefix)
    nodes, scans = [], [[] for _ in range(outputs_count)]
    for step in range(count):
        names = {**shared, **{formal.name: actual for formal, actual in zip(body.input, states)}}
        for formal, source, axis, backward in zip(body.input[len(states) :], scanned, input_axes, backwards):
            at = numpy_helper.from_array(
                np.array(count - 1 - step if backward else step, np.int64), f"{prefix}.{step}.{formal.name}.at"
            )
            constants.append(at)
            element = f"{prefix}.{step}.{formal.name}.element"
            nodes.append(helper.make_node("Gather", [source, at.name], [element], axis=axis))
            names[formal.name] = element
        outputs = _copied_body(body, names, f"{prefix}.{step}", nodes)
        states = outputs[: len(states)]
        for scan, value in zip(scans, outputs[len(states) :]):
            scan.append(value)
    nodes += _identities(states, node.output, prefix)
    for scan, name, axis, backward in zip(scans, node.output[len(states) :], output_axes, reversed_outputs):
        if name:
            nodes += _stacked(scan[::-1] if backward else scan, name, axis, prefix, constants)
    return nodes, constants


def _body(node):
    return helper.get_attribute_value(next(a for a in node.attribute if a.name == "body"))


def _shared_constants(body, prefix: str) -> tuple[list, dict]:
    """The body's initializers, renamed once for every copy of it, and the renaming."""
    return (
        [_renamed(t, f"{prefix}.{t.name}") for t in body.initializer],
        {t.name: f"{prefix}.{t.name}" for t in body.initializer},
    )


def _copied_body(body, names: dict, prefix: str, nodes: list) -> list[str]:
    """The body's nodes appended to `nodes`, reading `names` for its inputs (updated with what the copy
    writes, each under `prefix`); the names of the copy's outputs."""
    for inner in body.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.name = f"{prefix}.{inner.name or inner.output[0]}"
        copy.input[:] = [names.get(name, name) if name else "" for name in inner.input]
        for position, name in enumerate(inner.output):
            if name:
                names[name] = copy.output[position] = f"{prefix}.{name}"
        nodes.append(copy)
    return [names.get(o.name, o.name) for o in body.output]


def _identities(values: list[str], outputs, prefix: str) -> list:
    return [
        helper.make_node("Identity", [value], [name], name=f"{prefix}.out.{name}")
        for value, name in zip(values, outputs)
        if name
    ]


def _stacked(values: list[str], name: str, axis: int, prefix: str, constants: list) -> list:
    """Nodes writing `name`, the values stacked along a new `axis`."""
    at = numpy_helper.from_array(np.array([axis], np.int64), f"{prefix}.{name}.axis")
    constants.append(at)
    pieces = [f"{prefix}.{step}.{name}.stacked" for step in range(len(values))]
    return [
        *(helper.make_node("Unsqueeze", [value, at.name], [piece]) for value, piece in zip(values, pieces)),
        helper.make_node("Concat", pieces, [name], name=f"{prefix}.out.{name}", axis=axis),
    ]


def _renamed(tensor, name: str):
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    copy.name = name
    return copy
