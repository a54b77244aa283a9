"""Tables TVM lacks, built from constants (windows, a mel filter bank): computed at import, as onnxruntime does."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelbuild.frontend import constant_operators

SIZE = np.array(400, np.int64)
MEL = {
    "bins": np.array(80, np.int64),
    "dft": np.array(400, np.int64),
    "rate": np.array(16000, np.int64),
    "low": np.array(0.0, np.float32),
    "high": np.array(8000.0, np.float32),
}


def scaled_by(
    table: helper.NodeProto, x_shape: list[int], constants: dict, use: str = "Mul", inputs: tuple = ()
) -> onnx.ModelProto:
    """y = x (Mul or MatMul) the table the node computes."""
    graph = helper.make_graph(
        [table, helper.make_node(use, ["x", table.output[0]], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape), *inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run(model: onnx.ModelProto, feed: dict) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(["y"], feed)[0]


@pytest.mark.parametrize(
    "model, x_shape",
    [
        (scaled_by(helper.make_node("HannWindow", ["size"], ["w"]), [2, 400], {"size": SIZE}), [2, 400]),
        (scaled_by(helper.make_node("HammingWindow", ["size"], ["w"], periodic=0), [2, 400], {"size": SIZE}), [2, 400]),
        (scaled_by(helper.make_node("BlackmanWindow", ["size"], ["w"]), [2, 400], {"size": SIZE}), [2, 400]),
        (scaled_by(helper.make_node("MelWeightMatrix", list(MEL), ["m"]), [3, 201], MEL, use="MatMul"), [3, 201]),
    ],
    ids=["hann", "hamming-symmetric", "blackman", "mel"],
)
def test_a_table_built_from_constants_becomes_an_initializer_of_onnxruntimes_values(model, x_shape):
    folded = constant_operators.folded(model)
    assert [n.op_type for n in folded.graph.node] == [model.graph.node[1].op_type]
    x = np.random.default_rng(0).standard_normal(x_shape).astype(np.float32)
    np.testing.assert_allclose(run(folded, {"x": x}), run(model, {"x": x}), rtol=1e-5, atol=1e-6)


def test_a_table_whose_size_is_an_input_is_left_as_it_is():
    size = helper.make_tensor_value_info("size", TensorProto.INT64, [])
    model = scaled_by(helper.make_node("HannWindow", ["size"], ["w"]), [2, 400], {}, inputs=(size,))
    assert constant_operators.folded(model) is model


def test_an_stft_by_a_hann_window_built_in_the_graph_imports_and_computes_what_onnxruntime_does(tvm):
    """The window is computed before the STFT is written out, which needs it constant."""
    import tvm
    from tvm import relax

    from modelbuild.stages import onnx_import

    nodes = [
        helper.make_node("HannWindow", ["size"], ["window"]),
        helper.make_node("STFT", ["x", "step", "window", "size"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2000, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(SIZE, "size"), numpy_helper.from_array(np.array(160, np.int64), "step")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(1).standard_normal((1, 2000, 1)).astype(np.float32)
    module = onnx_import.to_relax(model, {"x": {"shape": [1, 2000, 1], "dtype": "float32"}})
    vm = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
    # 400-sample frames summed in float32 both ways (onnxruntime by FFT): 1e-3 apart on values up to about 25
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), run(model, {"x": x}), rtol=1e-4, atol=2e-3)
