"""A Resize's empty scales or roi named as absent: onnxruntime computes the same; TVM then imports it."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelbuild.frontend import resize_inputs

SIZES = [1, 2, 6, 10]


def resized(*, as_constant_nodes: bool = False, scales_name: str = "scales") -> onnx.ModelProto:
    """x [1, 2, 3, 5] resized to SIZES, its roi and scales empty tensors (initializers or Constant nodes)."""
    empty = np.zeros(0, np.float32)
    nodes, inits = [], [numpy_helper.from_array(np.array(SIZES, np.int64), "sizes")]
    for name in ("roi", "scales"):
        if as_constant_nodes:
            nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(empty, name)))
        else:
            inits.append(numpy_helper.from_array(empty, name))
    nodes.append(helper.make_node("Resize", ["x", "roi", scales_name, "sizes"], ["y"], name="up", mode="linear"))
    graph = helper.make_graph(nodes, "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, SIZES)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


X = np.random.default_rng(0).standard_normal((1, 2, 3, 5)).astype(np.float32)


@pytest.mark.parametrize("as_constant_nodes", [False, True])
def test_empty_roi_and_scales_become_absent_inputs_computing_the_same(as_constant_nodes):
    model = resized(as_constant_nodes=as_constant_nodes)
    rewritten = resize_inputs.absent_when_empty(model)
    assert list(rewritten.graph.node[-1].input) == ["x", "", "", "sizes"]
    assert list(model.graph.node[-1].input) == ["x", "roi", "scales", "sizes"]  # the original is not changed
    np.testing.assert_array_equal(run(rewritten, X), run(model, X))


def test_a_model_whose_resize_inputs_are_all_given_is_returned_as_it_is():
    model = resized(scales_name="")
    model.graph.node[-1].input[1] = ""
    assert resize_inputs.absent_when_empty(model) is model


@pytest.mark.tvm
def test_tvm_imports_a_resize_with_empty_scales_and_computes_what_onnxruntime_does():
    import tvm
    from tvm import relax

    from modelbuild.stages import onnx_import

    with pytest.raises(Exception, match="Only one of scales and sizes"):
        from tvm.relax.frontend.onnx import from_onnx

        from_onnx(resized(), {"x": [1, 2, 3, 5]}, {"x": "float32"})
    module = onnx_import.to_relax(resized(), {"x": {"shape": [1, 2, 3, 5], "dtype": "float32"}})
    vm = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
    ours = vm["main"](tvm.runtime.tensor(X)).numpy()
    np.testing.assert_allclose(ours, run(resized(), X), rtol=1e-5, atol=1e-6)
