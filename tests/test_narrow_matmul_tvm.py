"""Matmuls by one to three columns, constant or computed: the columns stored one after another, the data read
in place (no padded copy), the outputs numpy's."""

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
    columns_first = (*weight_shape[:-2], weight_shape[-1], weight_shape[-2])
    assert f"T.Buffer(({', '.join(f'T.int64({d})' for d in columns_first)})" in script
    x = np.random.default_rng(2).standard_normal(data_shape).astype("float32")
    np.testing.assert_allclose(run(tvm.runtime.tensor(x)).numpy(), x @ weight, rtol=1e-4, atol=1e-4)


def two_input_module(data_shape, column_shape):
    """main(x, w) = x @ (w + 1): the columns an activation, computed by the model."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(data_shape, "float32"))
    w = relax.Var("w", relax.TensorType(column_shape, "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            columns = bb.emit(relax.op.add(w, relax.const(1.0, "float32")))
            out = bb.emit_output(relax.op.matmul(x, columns))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize(
    "data_shape, column_shape",
    [((294, 3210), (3210, 1)), ((4, 37, 203), (4, 203, 2)), ((50, 256), (256, 3))],
    ids=["one-column-padded", "batched-2", "3-columns-whole-vectors"],
)
def test_a_matmul_by_computed_columns_sums_each_output_over_two_runs_and_equals_numpy(data_shape, column_shape):
    import tvm

    script, run = scheduled_kernel(two_input_module(data_shape, column_shape), "matmul", schedule=True)
    # the kernel reads the columns as [..., N, K]: each output's column is one run of products
    columns_first = (*column_shape[:-2], column_shape[-1], column_shape[-2])
    assert f"T.Buffer(({', '.join(f'T.int64({d})' for d in columns_first)})" in script
    assert f"T.Buffer(({', '.join(f'T.int64({d})' for d in data_shape)})" in script  # the data itself, no copy
    rng = np.random.default_rng(3)
    x, w = (rng.standard_normal(shape).astype("float32") for shape in (data_shape, column_shape))
    got = run(tvm.runtime.tensor(x), tvm.runtime.tensor(w)).numpy()
    np.testing.assert_allclose(got, x @ (w + 1), rtol=1e-4, atol=1e-3)


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
