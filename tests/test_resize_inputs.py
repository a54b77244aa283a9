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
    graph = helper.make_graph(
        nodes,
        "resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, SIZES)],
        initializer=inits,
    )
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


def test_tvm_imports_a_resize_with_empty_scales_and_computes_what_onnxruntime_does(tvm):
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


def one_resize(scales=None, sizes=None, **attributes) -> onnx.ModelProto:
    """x [1, 2, 8, 8] resized by constant scales or sizes, with the attributes given."""
    inits = [numpy_helper.from_array(np.array(scales, np.float32), "scales")] if scales else []
    inits += [numpy_helper.from_array(np.array(sizes, np.int64), "sizes")] if sizes else []
    inputs = ["x", "", "scales" if scales else "", *(["sizes"] if sizes else [])]
    node = helper.make_node("Resize", inputs, ["y"], name="up", mode="linear", **attributes)
    graph = helper.make_graph(
        [node],
        "resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize(
    "model, words",
    [
        (one_resize(scales=[1, 1, 0.5, 0.5], antialias=1), "downscales with antialias = 1"),
        (one_resize(sizes=[1, 2, 4, 4], antialias=1), "downscales with antialias = 1 (or by sizes, which may)"),
        (one_resize(sizes=[4, 4], axes=[2, 3]), "gives scales or sizes for axes [2, 3] alone"),
        (
            one_resize(sizes=[1, 2, 16, 12], keep_aspect_ratio_policy="not_larger"),
            "keeps its aspect ratio (not_larger)",
        ),
    ],
)
def test_a_resize_tvm_would_get_wrong_is_refused_naming_the_node_and_the_fix(model, words):
    reason = resize_inputs.unsupported(model)
    assert reason.startswith("Resize node 'up' ") and words in reason and "(fix: " in reason


def test_an_upscale_with_antialias_and_a_plain_resize_are_imported():
    assert resize_inputs.unsupported(one_resize(scales=[1, 1, 2, 2], antialias=1)) is None  # no filter upscaling
    assert resize_inputs.unsupported(one_resize(sizes=[1, 2, 16, 12])) is None


def test_the_import_stage_refuses_a_downscale_with_antialias_rather_than_compute_without_it(tvm):
    from modelbuild.errors import StageError
    from modelbuild.stages import onnx_import

    with pytest.raises(StageError, match="Resize node 'up' downscales with antialias = 1"):
        onnx_import.to_relax(
            one_resize(scales=[1, 1, 0.5, 0.5], antialias=1), {"x": {"shape": [1, 2, 8, 8], "dtype": "float32"}}
        )


def resize_of(side: int, scales, mode="half_pixel") -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(scales, np.float32), "scales")]
    node = helper.make_node(
        "Resize", ["x", "", "scales"], ["y"], name="up", mode="linear", coordinate_transformation_mode=mode
    )
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, side])
    graph = helper.make_graph(
        [node], "resize", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_scale_whose_product_with_the_side_is_not_whole_is_refused():
    """TVM spaces the samples by the rounded size: 7 x 0.5 -> 3, sampled 7 / 3 apart where onnxruntime's are 2."""
    reason = resize_inputs.unsupported(resize_of(7, [1, 1, 0.5, 0.5]))
    assert reason.startswith("Resize node 'up' scales axis 3 of 7 by 0.5 to 3.5")
    assert "(fix: give the Resize sizes" in reason


@pytest.mark.parametrize(
    "side, scales, mode",
    [(8, [1, 1, 0.5, 0.5], "half_pixel"), (7, [1, 1, 1.5, 1.5], "align_corners"), (7, [1, 1, 2, 3], "half_pixel")],
)
def test_whole_products_and_modes_that_map_by_size_are_imported(side, scales, mode):
    assert resize_inputs.unsupported(resize_of(side, scales, mode)) is None
