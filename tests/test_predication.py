"""An If on computed data as both branches and a select, against onnxruntime running the If: no TVM."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from modelbuild.frontend import predication
from tests.helpers.onnx_models import branch_on_rate, branch_on_score, conv_relu

# the sum picks the branch, the max the nested one: every combination of the two
INPUTS = {
    "negative": -np.ones((2, 4)),
    "small positive": np.full((2, 4), 0.5),
    "large positive": np.eye(2, 4) * 3,
    "mixed": np.array([[2.0, -1, 0, 0], [0, 0, -0.5, 0]]),
}


def run(model, x: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x.astype(np.float32)})


@pytest.mark.parametrize("nested", [False, True])
def test_an_if_on_the_data_computes_both_branches_and_selects_what_the_if_returned(tmp_path, nested):
    model = onnx.load(str(branch_on_score(tmp_path / "m.onnx", nested=nested)))
    selected = predication.predicate(model)
    assert "If" not in {node.op_type for node in selected.graph.node}
    assert [n.op_type for n in selected.graph.node].count("Where") == 1 + nested
    onnx.checker.check_model(selected, full_check=True)
    for name, x in INPUTS.items():
        for got, want in zip(run(selected, x), run(model, x)):
            np.testing.assert_array_equal(got, want, err_msg=name)


def test_a_one_element_condition_selects_scalars_without_broadcasting_them(tmp_path):
    from onnx import TensorProto, helper

    def branch(name, node):
        return helper.make_graph([node], name, [], [helper.make_tensor_value_info(name, TensorProto.FLOAT, [])])

    graph = helper.make_graph(
        [
            helper.make_node("Greater", ["x", "zero"], ["cond"]),
            helper.make_node(
                "If",
                ["cond"],
                ["y"],
                then_branch=branch("sum", helper.make_node("ReduceSum", ["x"], ["sum"], keepdims=0)),
                else_branch=branch("max", helper.make_node("ReduceMax", ["x"], ["max"], keepdims=0)),
            ),
        ],
        "scalar",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        initializer=[onnx.numpy_helper.from_array(np.zeros(1, np.float32), "zero")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    selected = onnx.shape_inference.infer_shapes(predication.predicate(model), strict_mode=True)
    assert selected.graph.output[0].type.tensor_type.shape.dim == []
    for x in (np.array([2.0]), np.array([-2.0])):
        assert run(selected, x)[0].shape == ()
        np.testing.assert_array_equal(run(selected, x), run(model, x))


def test_branches_of_different_shapes_stay_an_if(tmp_path):
    model = onnx.load(str(branch_on_rate(tmp_path / "m.onnx", else_repeats=2)))
    kept = predication.predicate(model)
    assert [node.op_type for node in kept.graph.node] == ["Equal", "If"]


def test_a_model_without_an_if_is_returned_as_it_is(tmp_path):
    model = onnx.load(str(conv_relu(tmp_path / "m.onnx")))
    assert predication.predicate(model) is model
