"""A TopK of open order (sorted = 0) is sorted on both sides: the import's model and the reference's."""

from __future__ import annotations

import numpy as np
import onnx

from modelbuild.frontend import topk_order
from tests.helpers.onnx_models import unsorted_topk


def test_the_reference_of_an_unsorted_topk_is_its_sorted_answer(tmp_path):
    """onnxruntime returns its heap's order for sorted = 0 (not sorted, on this row)."""
    import onnxruntime as ort

    from modelbuild.stages.reference import _run_onnxruntime

    path = unsorted_topk(tmp_path / "m.onnx")
    x = np.random.default_rng(0).standard_normal((1, 1, 1000)).astype(np.float32)
    heap_order = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x[0]})[0]
    assert not np.array_equal(heap_order, -np.sort(-heap_order))
    got = _run_onnxruntime(path, {"x": x}, {}, {})
    order = np.argsort(-x[0, 0], kind="stable")[:10]
    np.testing.assert_array_equal(got["indices"][0, 0], order)
    np.testing.assert_array_equal(got["values"][0, 0], x[0, 0, order])


def test_a_sorted_model_is_left_as_it_is(tmp_path):
    model = onnx.load(str(unsorted_topk(tmp_path / "m.onnx")))
    once = topk_order.sorted_everywhere(model)
    assert [a.i for a in once.graph.node[0].attribute if a.name == "sorted"] == [1]
    assert topk_order.sorted_everywhere(once) is once
