"""Kernels written statement by statement with TVM's IRBuilder, as the bodies of TE externs (scatter_nd.py,
top_k.py): loops whose bounds or paths depend on the data, which a TE compute cannot say."""

from __future__ import annotations

import math


def written(write):
    """The statements `write(T)` emits, T being the IRBuilder's TIR namespace. They are collected in a
    sequence scope whose pragma is dropped: LLVM's codegen warns of it as unknown once per kernel."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    with IRBuilder() as ib, T.seq_scope():
        write(T)
    return ib.get().body


def scalar(T, dtype: str):
    """A mutable scalar, written and read as [0]."""
    return T.buffer_proxy(T.alloc_buffer((1,), dtype, scope="local"))


def flat(T, buffer):
    """The buffer as one axis, so positions computed at run time need no division into coordinates."""
    size = math.prod(int(d) for d in buffer.shape)
    return T.buffer_proxy(T.decl_buffer((size,), buffer.dtype, data=buffer.data, elem_offset=buffer.elem_offset))
