"""A float matmul by constant weights of one to three columns, its weights stored column by column, so that
each output's sum reads its row and its weights' column as two contiguous runs.

A matmul to so few columns has no vector of output columns to compute: the default schedule sums each
output's K products in vector lanes instead (`_sum_in_lanes`), reading K contiguous floats of the row but the
weights' column N floats apart, and it does so only where K is whole vectors: otherwise it vectorised the N
outputs of a row and summed K one product at a time. Here the weights are transposed to [..., N, K] once
at compile time (they are constants) and K is padded to whole vectors, with zero weights and a copy of the
data padded with zeros: the sum reads both runs in order, in lanes (measured in bench/results/README.md).
"""

from __future__ import annotations

import numpy as np

from modelbuild.compiler.integer_ops import constant_value
from modelbuild.compiler.relax_rewrite import known_shape

MAX_COLUMNS = 3  # channel_padding.MAX_CHANNELS_IN_LANES: wider heads are padded to whole vectors instead
MIN_SUMMED = 16  # products an output sums, from which summing in lanes pays (a vector of them)
LANES = 16  # the default schedule sums in lanes a reduction of whole vectors of VECTOR_LANES


def eligible(call) -> bool:
    """A static float32 [..., M, K] x constant float32 [..., K, N] matmul, N of 1 to MAX_COLUMNS, K of
    MIN_SUMMED or more, the weights 2-D or batched as the data is (no broadcasting of the data)."""
    from tvm.ir import Constant

    data, weight = call.args[0], call.args[1]
    if not (
        isinstance(weight, Constant)
        and str(weight.ty.dtype) == "float32"
        and str(data.ty.dtype) == "float32"
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
    """An eligible matmul (see `eligible`) on its weights stored column by column."""
    from tvm import relax, te

    weight = constant_value(call.args[1])
    out_shape = [int(d) for d in call.ty.shape.values]
    summed = weight.shape[-2]
    k_extent = -(-summed // LANES) * LANES
    batched = weight.ndim > 2
    data = call.args[0]
    if k_extent != summed:  # whole vectors of products: the data's rows padded with zeros, a copy; the weights free
        widths = [0] * (2 * len(out_shape))
        widths[-1] = k_extent - summed
        data = bb.emit(relax.op.nn.pad(data, widths))
        weight = np.concatenate(
            [weight, np.zeros((*weight.shape[:-2], k_extent - summed, weight.shape[-1]), weight.dtype)], -2
        )

    def matmul(data, columns):
        k = te.reduce_axis((0, k_extent), "k")

        def column(i):  # the weights' index of output i's column: its batch, then the column
            return (*i[:-2], i[-1], k) if batched else (i[-1], k)

        return te.compute(out_shape, lambda *i: te.sum(data[(*i[:-1], k)] * columns[column(i)], axis=k), name="matmul")

    return bb.call_te(matmul, data, relax.const(columns_first(weight)), primfunc_name_hint="matmul")
