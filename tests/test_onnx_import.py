"""The import stage's simplification, against onnxruntime on the original model: no TVM."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from modelbuild.errors import InputError, StageError
from modelbuild.frontend import facts
from modelbuild.frontend import inputs as model_inputs
from modelbuild.stages import onnx_import


def reshaped_to_its_own_shape(declared: list) -> onnx.ModelProto:
    """x [1, 2, 3] -> Transpose -> [3, 1, 2], reshaped to its own runtime shape, the output declared `declared`:
    ddddocr's recogniser ends so, computing [32, 1, 8210] where it declares [1, seqlen]."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
        helper.make_node("Shape", ["t"], ["s"]),
        helper.make_node("Reshape", ["t", "s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, declared)],
    )
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
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)])
    simplified = onnx_import._simplify(model)
    assert [d.dim_value for d in simplified.graph.output[0].type.tensor_type.shape.dim] == [1, 6]


def logistic_regression(path, *, zipmap: bool):
    """A classifier as skl2onnx writes one (ai.onnx.ml operators), its probabilities a sequence of maps unless
    `zipmap` is off, as onnxruntime's own logreg_iris.onnx has them."""
    ml = dict(domain="ai.onnx.ml")
    nodes = [
        helper.make_node(
            "LinearClassifier",
            ["x"],
            ["label", "scores"],
            name="lin",
            coefficients=[0.5] * 6,
            intercepts=[0.0, 0.1, 0.2],
            classlabels_ints=[0, 1, 2],
            **ml,
        )
    ]
    outputs = [helper.make_tensor_value_info("label", TensorProto.INT64, [2])]
    if zipmap:
        nodes.append(helper.make_node("ZipMap", ["scores"], ["probabilities"], classlabels_int64s=[0, 1, 2], **ml))
        outputs.append(
            helper.make_value_info(
                "probabilities",
                helper.make_sequence_type_proto(
                    helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
                ),
            )
        )
    else:
        outputs.append(helper.make_tensor_value_info("scores", TensorProto.FLOAT, [2, 3]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 1)])
    onnx.save(model, str(path))
    return path


def test_an_output_that_is_no_tensor_is_named_with_the_fix_not_a_traceback(tmp_path):
    with pytest.raises(InputError) as caught:
        facts.model_facts(logistic_regression(tmp_path / "m.onnx", zipmap=True))
    assert caught.value.message == (
        "output 'probabilities' is a sequence of maps, not a tensor, and a library takes and returns tensors only "
        "(fix: export the model with tensor outputs, e.g. skl2onnx's options={'zipmap': False} for a classifier's "
        "probabilities)"
    )


def test_an_operator_of_a_domain_tvm_lacks_is_named_before_simplification(tmp_path):
    model = logistic_regression(tmp_path / "m.onnx", zipmap=False)
    with pytest.raises(StageError) as caught:  # onnxslim itself failed on it, saying nothing of the operator
        onnx_import.run(inputs={"model": model}, params={"inputs": {}, "simplify": True}, out=tmp_path)
    assert caught.value.message == (
        "operator ai.onnx.ml.LinearClassifier (node 'lin') is not supported by TVM; it is a classical "
        "machine-learning operator (scikit-learn's, through skl2onnx), and TVM compiles neural networks: run this "
        "model with onnxruntime"
    )


def test_the_fix_for_an_undeclared_dynamic_input_quotes_a_name_toml_cannot_take_bare():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["serving_default_x:0"], ["y"])],
        "g",
        [helper.make_tensor_value_info("serving_default_x:0", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
    )
    with pytest.raises(
        InputError,
        match=r'\(fix: inputs\."serving_default_x:0" = \{ shape = \[\.\.\.\], dtype = '
        r'"float32" \} under the model\)',
    ):
        model_inputs.freeze_inputs(helper.make_model(graph), {})


def pooled_then(*tail: str) -> onnx.ModelProto:
    """x [1, 3, 8, 8] -> Conv -> GlobalAveragePool -> Flatten, then `tail` (op types): features, or scores."""
    rng = np.random.default_rng(0)
    weights = {
        "w": rng.standard_normal((4, 3, 3, 3)),
        "fc": rng.standard_normal((4, 5)),
        "two": np.array(2.0),
        "s": np.ones(4),
        "b": np.zeros(4),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("GlobalAveragePool", ["c"], ["p"]),
        helper.make_node("Flatten", ["p"], ["t0"]),
    ]
    for i, op in enumerate(tail):
        second = {"MatMul": ["fc"], "Div": ["two"], "BatchNormalization": ["s", "b", "b", "s"]}.get(op, [])
        nodes.append(helper.make_node(op, [f"t{i}", *second], [f"t{i + 1}"]))
    nodes.append(helper.make_node("Identity", [f"t{len(tail)}"], ["y"]))
    initializers = [onnx.numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize(
    "tail, features",
    [
        (("Div",), True),
        (("BatchNormalization", "Div"), True),
        ((), False),
        (("MatMul",), False),
        (("Div", "MatMul"), False),
        (("MatMul", "Softmax"), False),
        (("Relu",), False),
    ],
)
def test_normalised_pooled_features_are_an_embedding_and_a_layer_after_them_or_no_normalisation_is_not(tail, features):
    """A bare pooling can be a classifier's logits (SqueezeNet pools its last conv's 1000 channels)."""
    model = pooled_then(*tail)
    assert facts.feature_outputs(model) == (("y",) if features else ())
    assert facts.signature_of(model, {}).outputs["y"].get("features", False) is features


def test_the_facts_init_reads_say_whether_a_model_arrives_quantized(tmp_path):
    from tests.helpers.onnx_models import conv_relu, quantized_qdq

    float_model = conv_relu(tmp_path / "f.onnx")
    quantized = quantized_qdq(float_model, tmp_path / "q.onnx", [1, 3, 8, 8])
    read = [facts.model_facts(path) for path in (float_model, quantized)]
    assert [f.quantized for f in read] == [False, True] and [f.float16 for f in read] == [False, False]
    assert list(read[1].signature.inputs) == ["x"]


def test_a_model_tvm_fails_on_that_is_not_valid_onnx_is_told_so_by_onnxs_checker(tvm):
    """A graph output no node computes failed as "TVM could not import the model: 'y'"."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["c"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(StageError, match="not valid ONNX: Graph output 'y' is not an output of any node"):
        onnx_import.to_relax(model, {"x": {"shape": [1, 4], "dtype": "float32"}})


def test_an_output_declared_without_a_shape_does_not_hide_tvms_own_error(tvm):
    """onnx's checker calls a shapeless graph output invalid, which onnxruntime and TVM take; its complaint
    stood in for the error TVM failed with (here: a ScatterElements reducing by max, which it refuses)."""
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction="max")
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
            helper.make_tensor_value_info("u", TensorProto.FLOAT, [2, 2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[onnx.numpy_helper.from_array(np.array([[1, 3], [0, 0]], np.int64), "i")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    declared = {"x": {"shape": [2, 5], "dtype": "float32"}, "u": {"shape": [2, 2], "dtype": "float32"}}
    with pytest.raises(StageError, match="^TVM could not import the model: Only .* reductions are supported"):
        onnx_import.to_relax(model, declared)


def test_onnxs_checker_is_quoted_whole_on_one_line(tvm):
    """Its message spans lines; the last one alone read "the model is not valid ONNX:  is not output of any
    previous nodes"."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "nothing"], ["y"], name="add")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(StageError) as caught:
        onnx_import.to_relax(model, {"x": {"shape": [1, 4], "dtype": "float32"}})
    assert "input 'nothing' of node" in caught.value.message and "\n" not in caught.value.message
