"""A graph's nodes sorted so that each comes after what it reads, as onnxruntime runs an unsorted graph."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelbuild.frontend import node_order


def graph_of(nodes, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=[numpy_helper.from_array(np.float32(v), k) for k, v in inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def run(model: onnx.ModelProto) -> np.ndarray:
    x = {"x": np.arange(-2, 2, dtype=np.float32).reshape(1, 4)}
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]


UNSORTED = [
    helper.make_node("Relu", ["h"], ["y"], name="relu"),  # appended before what it reads, as by hand
    helper.make_node("Add", ["g", "k"], ["h"], name="add"),
    helper.make_node("Mul", ["x", "k"], ["g"], name="mul"),
]


def test_an_unsorted_graph_is_sorted_computing_what_onnxruntime_computes_of_it():
    model = graph_of(UNSORTED, [("k", 2.0)])
    ordered = node_order.topologically_sorted(model)
    assert [n.name for n in ordered.graph.node] == ["mul", "add", "relu"]
    assert [n.name for n in model.graph.node] == ["relu", "add", "mul"]  # the original is not changed
    np.testing.assert_array_equal(run(ordered), run(model))


def test_nodes_ready_at_once_keep_their_listed_order():
    nodes = [
        helper.make_node("Neg", ["x"], ["b"], name="b"),
        helper.make_node("Abs", ["x"], ["a"], name="a"),
        helper.make_node("Add", ["s", "a"], ["y"], name="sum"),
        helper.make_node("Relu", ["b"], ["s"], name="s"),
    ]
    assert [n.name for n in node_order.topologically_sorted(graph_of(nodes)).graph.node] == ["b", "a", "s", "sum"]


def test_a_subgraph_reading_a_tensor_of_the_graph_around_it_comes_after_that_tensor():
    branch = helper.make_graph(
        [helper.make_node("Identity", ["h"], ["out"])],
        "branch",
        [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4])],
    )
    nodes = [
        helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch, else_branch=branch),
        helper.make_node("Relu", ["x"], ["h"], name="h"),
        helper.make_node("Constant", [], ["c"], name="c", value=numpy_helper.from_array(np.array(True))),
    ]
    assert [n.name for n in node_order.topologically_sorted(graph_of(nodes)).graph.node] == ["h", "c", "if"]


@pytest.mark.parametrize(
    "nodes",
    [
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],  # sorted already
        [helper.make_node("Add", ["x", "nothing"], ["y"], name="add")],  # reads what nothing computes
    ],
    ids=["sorted", "unknown-input"],
)
def test_a_sorted_graph_and_one_that_cannot_be_sorted_are_returned_as_they_are(nodes):
    model = graph_of(nodes)
    assert node_order.topologically_sorted(model) is model


def test_tvm_imports_an_unsorted_graph(tvm):
    from modelbuild.stages import onnx_import

    onnx_import.to_relax(graph_of(UNSORTED, [("k", 2.0)]), {"x": {"shape": [1, 4], "dtype": "float32"}})
