"""A float matmul by one to three columns, its columns stored one after another, so that each output's sum
reads its row and its column as two contiguous runs.

A matmul to so few columns has no vector of output columns to compute: the default schedule sums each
output's K products in vector lanes instead (`_sum_in_lanes`), reading K contiguous floats of the row but the
weights' column N floats apart, and it does so only where K is whole vectors: otherwise it vectorised the N
outputs of a row and summed K one product at a time. Here the columns are transposed to [..., N, K], once
at compile time where they are constant weights, at run time where they are computed (N x K floats, a few
reads of the data's M x K): each sum reads both runs in order, in vector lanes up to its last whole vector
and the few products left one by one (measured in bench/results/README.md). The default schedule would
vectorise a computed single column's one output column and sum K one product at a time.
"""

from __future__ import annotations

import numpy as np

from modelbuild.compiler.integer_ops import constant_value
from modelbuild.compiler.relax_rewrite import known_shape

MAX_COLUMNS = 3  # channel_padding.MAX_CHANNELS_IN_LANES: wider heads are padded to whole vectors instead
MIN_SUMMED = 16  # products an output sums, from which summing in lanes pays (a vector of them)
LANES = 16  # the default schedule sums in lanes a reduction of whole vectors of VECTOR_LANES


def eligible(call) -> bool:
    """A static float32 [..., M, K] x float32 [..., K, N] matmul, N of 1 to MAX_COLUMNS, K of MIN_SUMMED or
    more, the columns 2-D or batched as the data is (no broadcasting of the data); constant or computed."""
    data, weight = call.args[0], call.args[1]
    if not (
        str(getattr(weight.ty, "dtype", "")) == "float32"
        and str(getattr(data.ty, "dtype", "")) == "float32"
        and str(call.attrs.out_dtype) in ("float32", "None", "void", "")
    ):
        return False
    dims, weights = known_shape(data), known_shape(weight)
    if dims is None or weights is None or len(dims) < 2 or len(weights) < 2:
        return False
    batched = len(weights) == 2 or (len(weights) == len(dims) and weights[:-2] == dims[:-2])
    return batched and 1 <= weights[-1] <= MAX_COLUMNS and weights[-2] == dims[-1] >= MIN_SUMMED


def columns_first(weight: np.ndarray) -> np.ndarray:
    """[..., K, N] as [..., N, K]: each output column's weights in one run."""
    return np.ascontiguousarray(np.swapaxes(weight, -1, -2))


def legalize(bb, call):
    """An eligible matmul (see `eligible`) on its columns stored one after another."""
    from tvm import relax, te
    from tvm.ir import Constant

    out_shape = [int(d) for d in call.ty.shape.values]
    dims = known_shape(call.args[1])
    summed = dims[-2]
    whole = summed // LANES * LANES
    batched = len(dims) > 2
    if isinstance(call.args[1], Constant):
        columns = relax.const(columns_first(constant_value(call.args[1])))
    else:
        columns = bb.emit(_computed_columns(call.args[1], dims))

    def matmul(data, columns):
        def column(i, k):  # the columns' index of output i's column: its batch, then the column
            return (*i[:-2], i[-1], k) if batched else (i[-1], k)

        def product(i, k):
            return data[(*i[:-1], k)] * columns[column(i, k)]

        k = te.reduce_axis((0, whole), "k")
        vectors = te.compute(out_shape, lambda *i: te.sum(product(i, k), axis=k), name="matmul")
        if whole == summed:
            return vectors
        # the last few products, fewer than a vector, added one by one as the sum's epilogue: padding the data's
        # rows to whole vectors would copy all of the data for a few products a row
        return te.compute(
            out_shape,
            lambda *i: vectors(*i) + sum(product(i, k) for k in range(whole, summed)),
            name="matmul_tail",
        )

    return bb.call_te(matmul, call.args[0], columns, primfunc_name_hint="matmul")


def _computed_columns(weight, dims: list[int]):
    """Computed [..., K, N] columns as [..., N, K]: one column is a reshape (its K floats are a run already),
    more a transpose."""
    from tvm import relax

    if dims[-1] == 1:
        return relax.op.reshape(weight, [*dims[:-2], 1, dims[-2]])
    return relax.op.permute_dims(weight, [*range(len(dims) - 2), len(dims) - 1, len(dims) - 2])
