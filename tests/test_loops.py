"""Loops of a constant count unrolled: the written-out graph computes what onnxruntime computes of the Loop."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelbuild.frontend import inferred, loops

F = TensorProto.FLOAT


def body(condition_out: str = "cond_in", extra=()):
    """h' = tanh(h * w + x + i), scanned: a recurrent step reading x and w from outside and its step number."""
    nodes = [
        helper.make_node("Cast", ["i"], ["i_f"], to=F),
        helper.make_node("Mul", ["h", "w"], ["hw"]),
        helper.make_node("Add", ["hw", "x"], ["hx"]),
        helper.make_node("Add", ["hx", "i_f"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["h_next"]),
        helper.make_node("Identity", ["h_next"], ["scanned"]),
        *extra,
    ]
    return helper.make_graph(
        nodes,
        "step",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h", F, [2, 3]),
        ],
        [
            helper.make_tensor_value_info(condition_out, TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_next", F, [2, 3]),
            helper.make_tensor_value_info("scanned", F, [2, 3]),
        ],
    )


def model(step_graph, trip=None, condition="", trip_is_input=False):
    inputs = [helper.make_tensor_value_info("x", F, [2, 3]), helper.make_tensor_value_info("h0", F, [2, 3])]
    initializers = [numpy_helper.from_array(np.full((2, 3), 0.5, np.float32), "w")]
    if trip_is_input:
        inputs.append(helper.make_tensor_value_info("steps", TensorProto.INT64, []))
    else:
        initializers.append(numpy_helper.from_array(np.array(trip, np.int64), "steps"))
    if condition:
        initializers.append(numpy_helper.from_array(np.array(True), condition))
    graph = helper.make_graph(
        [helper.make_node("Loop", ["steps", condition, "h0"], ["h_last", "all_h"], body=step_graph)],
        "g",
        inputs,
        [helper.make_tensor_value_info("h_last", F, [2, 3]), helper.make_tensor_value_info("all_h", F, None)],
        initializer=initializers,
    )
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    built.ir_version = 8
    return built


def run(built, feed):
    return ort.InferenceSession(built.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)


def feed():
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((2, 3)).astype(np.float32), "h0": rng.standard_normal((2, 3)).astype(np.float32)}


def test_a_loop_of_a_constant_count_becomes_its_body_that_many_times():
    looped = model(body(), trip=5, condition="go")
    written = loops.unrolled(looped)
    ops = [n.op_type for n in written.graph.node]
    assert "Loop" not in ops and ops.count("Tanh") == 5
    for got, expected in zip(run(written, feed()), run(looped, feed())):
        np.testing.assert_array_equal(got, expected)  # the last state and the 5 states stacked, [5, 2, 3]


def test_a_body_whose_condition_is_a_constant_true_is_unrolled_too():
    keep_going = helper.make_node("Constant", [], ["again"], value=numpy_helper.from_array(np.array(True)))
    looped = model(body("again", [keep_going]), trip=3)
    written = loops.unrolled(looped)
    assert "Loop" not in [n.op_type for n in written.graph.node]
    for got, expected in zip(run(written, feed()), run(looped, feed())):
        np.testing.assert_array_equal(got, expected)


def test_loops_that_may_stop_early_or_run_a_count_known_only_at_run_time_are_left():
    stop = helper.make_node("ReduceMax", ["h_next"], ["peak"], keepdims=0)
    below = helper.make_node("Less", ["peak", "w_peak"], ["again"])
    early = model(body("again", [helper.make_node("Constant", [], ["w_peak"], value_float=0.9), stop, below]), trip=5)
    at_run_time = model(body(), trip_is_input=True)
    too_many = model(body(), trip=loops.MAX_ITERATIONS + 1)
    for looped in (early, at_run_time, too_many):
        assert loops.unrolled(looped) is looped


def scan_model(input_axes=(0,), input_directions=(0,), output_axes=(0,), output_directions=(0,), length=5):
    """A recurrent scan as tf2onnx writes tf.scan: h' = tanh(h * w + x_t), x [length, 2, 3] scanned along an
    axis (x transposed to put it there), every h' a scan output."""
    step = helper.make_graph(
        [
            helper.make_node("Mul", ["h", "w"], ["hw"]),
            helper.make_node("Add", ["hw", "x_t"], ["pre"]),
            helper.make_node("Tanh", ["pre"], ["h_next"]),
            helper.make_node("Identity", ["h_next"], ["h_out"]),
        ],
        "step",
        [helper.make_tensor_value_info("h", F, [2, 3]), helper.make_tensor_value_info("x_t", F, [2, 3])],
        [helper.make_tensor_value_info("h_next", F, [2, 3]), helper.make_tensor_value_info("h_out", F, [2, 3])],
        initializer=[numpy_helper.from_array(np.full((2, 3), 0.5, np.float32), "w")],
    )
    perm = {0: [0, 1, 2], 1: [1, 0, 2], 2: [1, 2, 0], -1: [1, 2, 0]}[input_axes[0]]
    graph = helper.make_graph(
        [
            helper.make_node("Transpose", ["x"], ["x_axis"], perm=perm),
            helper.make_node(
                "Scan",
                ["h0", "x_axis"],
                ["h_last", "all_h"],
                body=step,
                num_scan_inputs=1,
                scan_input_axes=list(input_axes),
                scan_input_directions=list(input_directions),
                scan_output_axes=list(output_axes),
                scan_output_directions=list(output_directions),
            ),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, [length, 2, 3]), helper.make_tensor_value_info("h0", F, [2, 3])],
        [helper.make_tensor_value_info("h_last", F, [2, 3]), helper.make_tensor_value_info("all_h", F, None)],
    )
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    built.ir_version = 8
    return built


def scan_feed(length=5):
    rng = np.random.default_rng(1)
    return {
        "x": rng.standard_normal((length, 2, 3)).astype(np.float32),
        "h0": rng.standard_normal((2, 3)).astype(np.float32),
    }


@pytest.mark.parametrize(
    "attributes",
    [
        {},
        {"input_axes": (1,)},
        {"input_axes": (-1,)},
        {"input_directions": (1,)},
        {"output_axes": (2,), "output_directions": (1,)},
        {"output_axes": (-1,)},
    ],
    ids=["forwards", "axis-1", "last-axis", "backwards", "stacked-last-to-first", "stacked-last"],
)
def test_a_scan_over_inputs_of_a_known_length_becomes_its_body_once_per_element(attributes):
    scanned = scan_model(**attributes)
    written = loops.unrolled(scanned)
    ops = [n.op_type for n in written.graph.node]
    assert "Scan" not in ops and ops.count("Tanh") == 5
    for got, expected in zip(run(written, scan_feed()), run(scanned, scan_feed())):
        np.testing.assert_array_equal(got, expected)


def test_a_scan_too_long_to_write_out_is_left_and_says_why():
    too_long = scan_model(length=loops.MAX_ITERATIONS + 1)
    assert loops.unrolled(too_long) is too_long
    scan = next(n for n in too_long.graph.node if n.op_type == "Scan")
    count, why = loops.scan_steps_or_refusal(scan, inferred.tensors(too_long))
    assert count is None and f"runs {loops.MAX_ITERATIONS + 1}" in why
