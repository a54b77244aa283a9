"""Softmax over long rows: vector partial max and sum per row, rows in parallel, exact to fast_exp's error."""

from __future__ import annotations

import numpy as np
import pytest

from modelbuild.compiler.kernels import row_reductions, softmax
from tests.helpers.relax_graphs import build_module, scheduled_kernel

TOLERANCE = 5e-6  # fast_exp's relative error (fast_math.py), as the fast_math test allows softmax


def reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype("float64") - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def compiled(shape, body):
    return scheduled_kernel(build_module(body, shape), "softmax", schedule=True)


@pytest.mark.parametrize(
    "shape",
    [(3, 1000), (2, 5, 256), (4, 100), (2, 40), (40, 18710), (2, 33)],
    ids=["tail-of-40", "no-tail", "one-vector-of-partials", "shortest", "recogniser-head", "tail-of-1"],
)
def test_every_row_length_matches_float64_within_fast_exps_error(shape):
    import tvm
    from tvm import relax

    script, run = compiled(shape, lambda bb, x: bb.emit(relax.op.nn.softmax(x, axis=-1)))
    assert softmax.PARTIAL_MAX in script and '"modelbuild.refused_steps": 0' in script
    assert ("T.parallel" in script) == (np.prod(shape) >= row_reductions.PARALLEL_MIN_ELEMENTS)
    x = np.random.default_rng(3).normal(0, 4, shape).astype("float32")
    got = run(tvm.runtime.tensor(x)).numpy()
    assert np.abs(got - reference(x)).max() / reference(x).max() <= TOLERANCE
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=1e-5)


def test_a_fused_consumer_is_computed_row_by_row_with_it():
    import tvm
    from tvm import relax

    def body(bb, x):
        return bb.emit(relax.op.multiply(bb.emit(relax.op.nn.softmax(x, axis=-1)), relax.const(2.0)))

    script, run = compiled((2, 3, 500), body)
    assert "multiply" in script and '"modelbuild.refused_steps": 0' in script
    x = np.random.default_rng(4).normal(0, 4, (2, 3, 500)).astype("float32")
    np.testing.assert_allclose(run(tvm.runtime.tensor(x)).numpy(), 2 * reference(x), rtol=TOLERANCE, atol=1e-9)


def test_a_long_rows_partials_and_tail_are_folded_to_one_vector_and_halved_to_two_lanes():
    """Rows of 1000: 15 steps of 64 partials, then 16 + the 40 left over had been scalar steps (56 a
    reduction; 104 before the partials were folded). Now the 4 vectors of partials, the tail's 2 whole vectors
    and its last vector (8 of its lanes masked) fold to one vector in 7 steps, halved three times to 2 lanes."""
    from tvm import relax

    script, _ = compiled((3, 1000), lambda bb, x: bb.emit(relax.op.nn.softmax(x, axis=-1)))
    for reduction in ("softmax_max", "softmax_sum"):
        assert all(f'T.sblock("{reduction}_{suffix}_update")' in script for suffix in ("lanes", "half8", "half2"))
    assert script.count("range(T.int64(7))") == 2 and "T.int64(56)" not in script


def log_softmax_reference(x: np.ndarray, axis: int) -> np.ndarray:
    x = x.astype("float64")
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


@pytest.mark.parametrize(
    "shape, axis", [((3, 1000), -1), ((4, 20), -1), ((50, 6), 0)], ids=["long-rows", "short-rows", "first-axis"]
)
def test_log_softmax_calls_no_libm_per_element_and_matches_float64(shape, axis):
    """A CTC recogniser's LogSoftmax over its classes: TVM's legalisation called libm's exp per element (20x
    onnxruntime's time over [1024, 1000]). Long last-axis rows are this kernel's; others x - max - log(sum)
    with the fast exp. log is called once per row."""
    import tvm
    from tvm import relax

    script, run = scheduled_kernel(
        build_module(lambda bb, x: bb.emit(relax.op.nn.log_softmax(x, axis=axis)), shape), "log_softmax", schedule=True
    )
    assert "T.exp(" not in script
    assert (softmax.PARTIAL_MAX in script) == (shape == (3, 1000))
    x = np.random.default_rng(5).normal(0, 4, shape).astype("float32")
    expected = log_softmax_reference(x, axis)
    got = run(tvm.runtime.tensor(x)).numpy()
    assert np.abs(got - expected).max() <= 1e-5 * max(1.0, np.abs(expected).max())
