"""Loops of a constant count unrolled: the written-out graph computes what onnxruntime computes of the Loop."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from modelbuild.frontend import inferred, loops
from tests.helpers.onnx_loops import body, feed, model, run, scan_feed, scan_model


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
