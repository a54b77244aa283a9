"""int8 matmul with constant weights on the dot-product conv kernels: [M, K] x [K, N] is a 1x1 conv of K input
channels and N output channels over M columns.

It is computed in packed_conv.py's channel lanes, whose accumulators hold, for each column (a row of the
matmul), its outputs 16 (VNNI) or 4 (sdot) at a time: [N / lanes, M, lanes], so the epilogue that writes the
[M, N] result reads them with plain vector loads, and the data packing is the [M, K] rows regrouped by 4
bytes. Without it, an int8 matmul was TVM's int32 loop (vpmulld, a quarter of the float rate): a
recogniser's [40, 120] x [120, 18720] head ran no faster in int8 than in float.

One batch dimension above 1 becomes the image's rows. The result is bit-identical to the 8-bit x int8 ->
int32 matmul it replaces (the tests compare with numpy).
"""

from __future__ import annotations

import numpy as np

from modelbuild.compiler.integer_ops import constant_value
from modelbuild.compiler.kernels import packed_conv


def eligible(call) -> bool:
    """A static 8-bit [..., M, K] x constant int8 [K, N] matmul into int32 with at most one batch dimension
    above 1 (it becomes the image's rows; two would need a flattened index the schedule cannot tile)."""
    from tvm.ir import Constant

    data, weight = call.args[0], call.args[1]
    if not (
        str(call.attrs.out_dtype) == "int32"
        and str(data.ty.dtype) in ("int8", "uint8")
        and packed_conv.static_shape(data.ty.shape)
        and len(data.ty.shape) >= 2
        and isinstance(weight, Constant)
        and str(weight.ty.dtype) == "int8"
        and len(weight.ty.shape) == 2
    ):
        return False
    batch = [int(d) for d in data.ty.shape.values][:-2]
    return sum(d > 1 for d in batch) <= 1


def legalize(bb, call, instruction: packed_conv.Instruction):
    """An eligible matmul (see `eligible`) as the instruction's packed 1x1 conv."""
    from tvm import relax

    weight = constant_value(call.args[1])
    depth, channels = weight.shape
    packed, correction = packed_conv.pack_weights(
        weight.T.reshape(channels, depth, 1, 1), instruction, shift=instruction.shift(str(call.args[0].ty.dtype))
    )
    return bb.call_te(
        lambda x, w, c: compute(x, w, c, instruction, channels=channels),
        call.args[0],
        relax.const(packed, instruction.weight_dtype),
        relax.const(correction, "int32"),
        primfunc_name_hint=f"matmul_{instruction.name}",
    )


def compute(x, w, correction, instruction: packed_conv.Instruction, *, channels: int):
    """x [..., B, M, K] as a [1, K, B, M] image (B its rows, M its columns), the packed conv over it, and its
    [1, N, B, M] result as [..., B, M, N]."""
    from tvm import te

    *batch, columns, depth = (int(d) for d in x.shape)
    rows = int(np.prod(batch))
    row_axis = next((axis for axis, extent in enumerate(batch) if extent > 1), None)

    def batch_index(row):
        return [row if axis == row_axis else 0 for axis in range(len(batch))]

    def row_of(indices):
        return 0 if row_axis is None else indices[row_axis]

    image = te.compute(
        (1, depth, rows, columns),
        lambda b, c, row, col: x[(*batch_index(row), col, c)],
        name=f"{instruction.name}_matmul_image",
    )
    conv = packed_conv.compute(
        image,
        w,
        correction,
        instruction,
        strides=(1, 1),
        padding=(0, 0, 0, 0),
        dilation=(1, 1),
        kernel=(1, 1),
        channels=channels,
        by_column=False,
    )
    return te.compute(
        (*batch, columns, channels),
        lambda *i: conv[0, i[-1], row_of(i[:-2]), i[-2]],
        name=f"{instruction.name}_matmul_rows",
    )
