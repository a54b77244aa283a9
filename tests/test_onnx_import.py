"""The import stage's simplification, against onnxruntime on the original model: no TVM."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from modelbuild.stages import onnx_import


def reshaped_to_its_own_shape(declared: list) -> onnx.ModelProto:
    """x [1, 2, 3] -> Transpose -> [3, 1, 2], reshaped to its own runtime shape, the output declared `declared`:
    ddddocr's recogniser ends so, computing [32, 1, 8210] where it declares [1, seqlen]."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
             helper.make_node("Shape", ["t"], ["s"]),
             helper.make_node("Reshape", ["t", "s"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, declared)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def run(model: onnx.ModelProto) -> np.ndarray:
    x = {"x": np.arange(6, dtype=np.float32).reshape(1, 2, 3)}
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]


def test_simplification_keeps_what_the_graph_computes_when_the_declared_output_shape_contradicts_it():
    model = reshaped_to_its_own_shape([1, "n"])
    assert run(model).shape == (3, 1, 2)
    simplified = onnx_import._simplify(model)
    np.testing.assert_array_equal(run(simplified), run(model))
    assert [d.dim_value for d in simplified.graph.output[0].type.tensor_type.shape.dim] == [3, 1, 2]
    assert [d.dim_param for d in model.graph.output[0].type.tensor_type.shape.dim] == ["", "n"]  # not modified


def test_an_output_shape_simplification_cannot_infer_stays_as_declared():
    node = helper.make_node("Mystery", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)])
    simplified = onnx_import._simplify(model)
    assert [d.dim_value for d in simplified.graph.output[0].type.tensor_type.shape.dim] == [1, 6]
