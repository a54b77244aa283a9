"""ONNX Loop and Scan models and their feeds, for the tests of unrolling them."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

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
