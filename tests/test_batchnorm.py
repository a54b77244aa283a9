"""BatchNormalization left by simplification, folded into a multiply-add, against onnxruntime: no TVM."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from modelbuild.frontend import batchnorm


def model_with_batchnorm(training: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    stats = {
        "gamma": rng.standard_normal(6),
        "beta": rng.standard_normal(6),
        "mean": rng.standard_normal(6),
        "var": rng.uniform(0.1, 2.0, 6),
    }
    initializers = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in stats.items()]
    attributes = {"epsilon": 1e-3, **({"training_mode": 1} if training else {})}
    node = helper.make_node("BatchNormalization", ["x", "gamma", "beta", "mean", "var"], ["y"], name="bn", **attributes)
    graph = helper.make_graph(
        [node],
        "bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 5, 5])],
        initializer=initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


def test_an_inference_batchnorm_becomes_one_multiply_add_per_channel_with_the_same_outputs():
    model = model_with_batchnorm()
    folded = batchnorm.fold(model)
    assert [n.op_type for n in folded.graph.node] == ["Mul", "Add"]
    x = {"x": np.random.default_rng(1).standard_normal((2, 6, 5, 5)).astype(np.float32)}
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]  # noqa: E731
    np.testing.assert_allclose(run(folded), run(model), rtol=1e-5, atol=1e-5)


def test_a_training_batchnorm_is_left_alone():
    model = model_with_batchnorm(training=1)
    assert batchnorm.fold(model) is model
