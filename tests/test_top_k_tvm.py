"""TopK: a heap kept while each row is read once, in ONNX's order (best first, equal values by lower index),
exact against numpy's stable sort and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.relax_graphs import build_module, scheduled_kernel


def reference(x, k, axis, largest):
    """numpy's stable sort: equal values keep their order, so the lower index comes first either way."""
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, indices, axis), indices


def top_k(x, k, axis=-1, largest=True, ret_type="both"):
    import tvm
    from tvm import relax

    def body(bb, data):
        return bb.emit(relax.op.topk(data, k, axis, ret_type=ret_type, largest=largest, dtype="int64"))

    module = build_module(body, x.shape, str(x.dtype))
    script, run = scheduled_kernel(module, "top", schedule=True)
    got = run(tvm.runtime.tensor(x))
    return script, [got.numpy()] if hasattr(got, "numpy") else [t.numpy() for t in got]


def test_a_detectors_hundred_best_of_its_anchors_are_found_in_one_pass_of_vector_comparisons():
    """YOLO's 25200 anchors, k = 100: TVM sorted the whole row (47 us, 1.6x onnxruntime; 23 us now)."""
    x = np.random.default_rng(0).standard_normal((1, 25200)).astype(np.float32)
    script, (values, indices) = top_k(x, 100)
    assert "llvm.vector.reduce.or" in script and "tvm.contrib.sort" not in script
    expected_values, expected_indices = reference(x, 100, 1, True)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)


@pytest.mark.parametrize("largest", [True, False])
def test_equal_values_come_out_by_lower_index_on_any_axis(largest):
    """Few distinct values, so ties decide most places; the axis is not the last, so rows are strided."""
    x = np.random.default_rng(1).integers(-3, 3, (3, 70, 5)).astype(np.float32)
    _, (values, indices) = top_k(x, 20, axis=1, largest=largest)
    expected_values, expected_indices = reference(x, 20, 1, largest)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)


@pytest.mark.parametrize("order", ["increasing", "decreasing"])
def test_rows_already_in_order_every_element_entering_or_none(order):
    """An increasing row makes every element enter the heap (the worst case), a decreasing one none."""
    row = np.arange(1000, dtype=np.int32) * (1 if order == "increasing" else -1)
    x = np.stack([row, row[::-1]])
    _, (values, indices) = top_k(x, 37)
    expected_values, expected_indices = reference(x, 37, 1, True)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)


def test_k_equal_to_the_row_sorts_it_whole():
    x = np.random.default_rng(2).standard_normal((4, 33)).astype(np.float32)
    _, (values, indices) = top_k(x, 33, largest=False)
    np.testing.assert_array_equal(values, np.sort(x, axis=1))
    np.testing.assert_array_equal(indices, np.argsort(x, axis=1, kind="stable"))


def test_values_alone_stay_with_tvms_sort():
    x = np.random.default_rng(3).standard_normal((2, 50)).astype(np.float32)
    script, (values,) = top_k(x, 5, ret_type="values")
    assert "tvm.contrib.sort.topk" in script
    np.testing.assert_array_equal(values, reference(x, 5, 1, True)[0])


def test_an_onnx_topk_with_ties_matches_onnxruntime():
    import onnxruntime as ort
    import tvm
    from onnx import TensorProto, helper, numpy_helper
    from tvm import relax

    from modelbuild.compiler import lowering
    from modelbuild.stages import onnx_import

    graph = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1, largest=1)],
        "top_k",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 400])],
        [
            helper.make_tensor_value_info("values", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("indices", TensorProto.INT64, None),
        ],
        initializer=[numpy_helper.from_array(np.array([50], np.int64), "k")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    x = np.round(np.random.default_rng(4).standard_normal((2, 400)), 1).astype(np.float32)  # many equal values
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    module = onnx_import.to_relax(model, {"x": {"shape": [2, 400], "dtype": "float32"}})
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, target, fuse=True, layout=None, schedule=True)
        executable = tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x))
    for actual, wanted in zip(got, expected):
        np.testing.assert_array_equal(actual.numpy(), wanted)


def test_an_unsorted_topk_imports_and_matches_its_reference(tmp_path):
    """TVM's converter refused sorted = 0 ("TopK sorted must be 1"): read sorted, as the reference is."""
    import onnx
    import tvm

    from modelbuild.stages.reference import _run_onnxruntime
    from tests.helpers.onnx_builds import built
    from tests.helpers.onnx_models import unsorted_topk

    path = unsorted_topk(tmp_path / "source.onnx")
    main, _ = built(onnx.load(str(path)), tmp_path, {"x": [1, 1000]})
    x = np.random.default_rng(5).standard_normal((1, 1, 1000)).astype(np.float32)
    expected = _run_onnxruntime(path, {"x": x}, {}, {})
    values, indices = main(tvm.runtime.tensor(x[0]))
    np.testing.assert_array_equal(values.numpy(), expected["values"][0])
    np.testing.assert_array_equal(indices.numpy(), expected["indices"][0])
