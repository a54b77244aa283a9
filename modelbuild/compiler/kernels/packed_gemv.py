"""A float matrix-vector product by constant weights, its weights packed so each vector of outputs reads them
in one contiguous run.

[1, K] x [K, N] is how an unrolled LSTM or GRU computes each step's gates from the last hidden state. The
default schedule gives each thread 16 output columns at a time, and for those it reads 16 floats of every one
of the K weight rows, rows N floats apart: ddddocr's recogniser spent 8.4 of its 25 ms in such steps
([1, 512] x [512, 2048], 16 GFLOP/s). With the weights packed as [N / 16, K, 16] (a constant, rearranged once
at compile time) the same schedule reads each 16 columns' K x 16 weights in order: on a 2-core Zen 4, 119 ->
49 us for that step, 0.66x for [128, 512], 0.23x for [1024, 4096], the same sums in the same order.
"""

from __future__ import annotations

import math

import numpy as np

from modelbuild.compiler.integer_ops import constant_value
from modelbuild.compiler.relax_rewrite import known_shape

LANES = 16  # output columns per packed run: the default schedule's float vector (VECTOR_LANES)


def eligible(call) -> bool:
    """A static float32 [..., 1, K] x constant float32 [K, N] matmul with one row in all (a GEMV) and N a whole
    number of packed runs."""
    from tvm.ir import Constant

    data, weight = call.args[0], call.args[1]
    if not (
        isinstance(weight, Constant)
        and str(weight.ty.dtype) == "float32"
        and len(weight.ty.shape) == 2
        and str(data.ty.dtype) == "float32"
        and str(call.attrs.out_dtype) in ("float32", "None", "void", "")
    ):
        return False
    dims = known_shape(data)
    if dims is None or len(dims) < 2:
        return False
    return math.prod(dims[:-1]) == 1 and int(weight.ty.shape.values[1]) % LANES == 0


def packed(weight: np.ndarray) -> np.ndarray:
    """[K, N] as [N / LANES, K, LANES]: each run of LANES output columns' weights, row after row."""
    k, n = weight.shape
    return np.ascontiguousarray(weight.reshape(k, n // LANES, LANES).transpose(1, 0, 2))


def legalize(bb, call):
    """An eligible matmul (see `eligible`) on the packed weights."""
    from tvm import relax, te

    weight = constant_value(call.args[1])
    k_extent, _ = weight.shape

    def gemv(data, runs):
        k = te.reduce_axis((0, k_extent), "k")
        return te.compute(
            (*[int(d) for d in call.args[0].ty.shape.values[:-1]], weight.shape[1]),
            lambda *i: te.sum(data[(*i[:-1], k)] * runs[i[-1] // LANES, k, i[-1] % LANES], axis=k),
            name="matmul",
        )

    return bb.call_te(gemv, call.args[0], relax.const(packed(weight)), primfunc_name_hint="matmul")
