"""Matmuls by one to three constant columns: the weights stored column by column, the products padded to whole
vectors, the outputs numpy's."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.relax_graphs import build_module, scheduled_kernel


def matmul_module(data_shape, weight: np.ndarray):
    from tvm import relax

    return build_module(lambda bb, x: bb.emit(relax.op.matmul(x, relax.const(weight))), data_shape)


@pytest.mark.parametrize(
    "data_shape, weight_shape",
    [((12, 39, 510), (12, 510, 2)), ((41, 372), (372, 2)), ((2, 191, 105), (2, 105, 1)), ((88, 303), (303, 3))],
    ids=["batched-2", "2-columns", "batched-1", "3-columns"],
)
def test_a_matmul_by_few_constant_columns_reads_them_column_by_column_and_equals_numpy(data_shape, weight_shape):
    import tvm

    weight = np.random.default_rng(1).standard_normal(weight_shape).astype("float32")
    script, run = scheduled_kernel(matmul_module(data_shape, weight), "matmul", schedule=True)
    columns, summed = weight_shape[-1], -(-weight_shape[-2] // 16) * 16  # products padded to whole vectors
    assert f"T.Buffer(({', '.join(f'T.int64({d})' for d in (*weight_shape[:-2], columns, summed))})" in script
    x = np.random.default_rng(2).standard_normal(data_shape).astype("float32")
    np.testing.assert_allclose(run(tvm.runtime.tensor(x)).numpy(), x @ weight, rtol=1e-4, atol=1e-4)


def test_wider_or_broadcast_or_short_matmuls_are_left_to_the_other_kernels():
    from tvm import relax

    from modelbuild.compiler.kernels import narrow_matmul

    def call(data_shape, weight_shape):
        x = relax.Var("x", relax.TensorType(data_shape, "float32"))
        return relax.op.matmul(x, relax.const(np.zeros(weight_shape, "float32")))

    def normalized(expr):
        bb = relax.BlockBuilder()
        return bb.normalize(expr)

    assert narrow_matmul.eligible(normalized(call((41, 372), (372, 2))))
    assert not narrow_matmul.eligible(normalized(call((41, 372), (372, 4))))  # padded to a vector instead
    assert not narrow_matmul.eligible(normalized(call((41, 8), (8, 2))))  # too few products to sum in lanes
    assert not narrow_matmul.eligible(normalized(call((3, 41, 372), (2, 3, 372, 2))))  # a broadcast batch
