"""Every node under a name of its own, as the quantize stage finds layers by name."""

from __future__ import annotations

from onnx import TensorProto, helper

from modelbuild.frontend.node_names import unique_node_names


def relus(names: list[str]):
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=name) for i, name in enumerate(names)]
    graph = helper.make_graph(
        nodes,
        "relus",
        [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(f"t{len(names)}", TensorProto.FLOAT, [4])],
    )
    return helper.make_model(graph)


def test_nodes_with_no_name_are_called_by_operator_and_position():
    named = unique_node_names(relus(["", "b", ""]))
    assert [n.name for n in named.graph.node] == ["Relu_0", "b", "Relu_2"]


def test_a_repeated_name_is_kept_by_its_first_node_only():
    named = unique_node_names(relus(["a", "a", "a"]))
    assert [n.name for n in named.graph.node] == ["a", "Relu_1", "Relu_2"]


def test_a_made_up_name_never_takes_one_the_model_has():
    named = unique_node_names(relus(["", "Relu_0"]))
    assert [n.name for n in named.graph.node] == ["Relu_0_1", "Relu_0"]


def test_a_model_whose_names_are_its_own_is_returned_as_it_is():
    model = relus(["a", "b"])
    assert unique_node_names(model) is model
    unnamed = relus(["", ""])
    unique_node_names(unnamed)
    assert [n.name for n in unnamed.graph.node] == ["", ""]  # the caller's model is not changed
