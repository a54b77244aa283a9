"""ONNX ScatterND: the data copied on every core in vectors, then the updates written in their order, each
slice of the output a run of vectors.

TVM 0.27 legalises scatter_nd as one serial copy of the data, element by element, then a serial loop over the
updates whose loop over each update's slice runs in parallel: a parallel region per update, each waking the
thread pool to share a few hundred elements, or one (YOLOv5's exported head writes its boxes with a ScatterND
whose every update is one element). 100 rows of 256 written into [1000, 256] took 129 us, 3x onnxruntime.
The updates stay in order (ONNX leaves duplicate indices to the last update for "none", and the reductions
accumulate alike). A negative index counts from the end of its axis, as onnxruntime reads it; TVM's loop
wrote before the buffer.
"""

from __future__ import annotations

import math

from modelbuild.compiler.kernels import statements
from modelbuild.compiler.relax_rewrite import known_shape

LANES = 16  # elements a vector copies (float32 on AVX-512; LLVM splits it on narrower units)
PARALLEL_MIN_ELEMENTS = 1 << 16  # a copy shorter than this runs on one core: waking the pool costs more
REDUCTIONS = ("update", "add", "mul", "min", "max")


def legalize(bb, call):
    """LegalizeOps override for relax.scatter_nd: static shapes take this kernel, others TVM's."""
    from tvm import ir

    if not eligible(call):
        return ir.Op.get(call.op.name).get_attr("FLegalize")(bb, call)
    return bb.call_te(scatter_nd, *call.args, str(call.attrs.reduction), primfunc_name_hint="scatter_nd")


def eligible(call) -> bool:
    """Static shapes, integer indices and a reduction this kernel knows."""
    if any(known_shape(arg) is None for arg in call.args):
        return False
    return str(call.args[1].ty.dtype) in ("int32", "int64") and str(call.attrs.reduction) in REDUCTIONS


def scatter_nd(data, indices, updates, reduction: str):
    """The TE extern: data [X0..Xr-1], indices [Y.., k], updates [Y.., Xk..Xr-1] -> the scattered copy."""
    from tvm import te, tirx

    out = tirx.decl_buffer(data.shape, data.dtype, "scattered")
    return te.extern(
        [data.shape],
        [data, indices, updates],
        lambda ins, outs: _body(*ins, outs[0], reduction),
        dtype=data.dtype,
        out_buffers=[out],
        name="scatter_nd",
    )


def _body(data, indices, updates, out, reduction: str):
    shape = [int(d) for d in data.shape]
    depth = int(indices.shape[-1])  # the index tuple's length: the axes an update addresses
    count = math.prod(int(d) for d in indices.shape[:-1])
    width = math.prod(shape[depth:])  # elements of one update's slice

    def write(T):
        source, target = T.buffer_proxy(data), T.buffer_proxy(out)
        where, value = T.buffer_proxy(indices), T.buffer_proxy(updates)
        total = math.prod(shape)
        copy = T.parallel if total >= PARALLEL_MIN_ELEMENTS else T.serial
        _each_in_vectors(T, total, lambda j: _store(target, j, source[j], "update"), copy)
        with T.serial(0, count) as u:
            start = _slice_start(where, u, shape, depth, width)
            _each_in_vectors(T, width, lambda j: _store(target, start + j, value[u * width + j], reduction))

    return statements.written(write)


def _slice_start(where, u, shape: list[int], depth: int, width: int):
    """The flat offset of update `u`'s slice: its index tuple, each component wrapped if negative."""
    from tvm import tirx

    start, stride = tirx.const(0, "int64"), width
    for axis in reversed(range(depth)):
        index = tirx.Cast("int64", where[u * depth + axis])
        index = tirx.Select(index < 0, index + shape[axis], index)
        start = start + index * stride
        stride *= shape[axis]
    return start


def _each_in_vectors(T, width: int, store, loop=None) -> None:
    """store(j) for j in [0, width): whole vectors (the loop over them `loop`, serial by default), then the rest
    one by one."""
    vectors, tail = divmod(width, LANES)
    if vectors:
        with (loop or T.serial)(0, vectors) as i:
            with T.vectorized(0, LANES) as j:
                store(i * LANES + j)
    if tail:
        with T.serial(vectors * LANES, width) as j:
            store(j)


def _store(target, at, update, reduction: str) -> None:
    from tvm import tirx

    combined = {
        "update": lambda old: update,
        "add": lambda old: old + update,
        "mul": lambda old: old * update,
        "min": lambda old: tirx.min(old, update),
        "max": lambda old: tirx.max(old, update),
    }[reduction]
    target[at] = combined(target[at])
