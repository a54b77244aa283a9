"""Grouped convs whose groups are narrower than a vector, computed as convs of groups one vector wide.

A ResNeXt or RegNet block's 3x3 conv has groups of 4 or 8 channels. Channels-last, the default schedule
computes a vector of 16 output channels at a time, and a vector spanning 2 or 4 groups reads each of those
groups' own input channels: a gather, which LLVM builds lane by lane. torchvision's resnext50_32x4d ran its
grouped convs at 5-6 GFLOP/s (28x28, 256 channels in 32 groups of 8: 4.8 ms a call), where its dense convs
reached 70-160. Merged k at a time, k groups become one group of k times the channels whose weights are zero
between the original groups: every output channel of a vector then reads the same input channel, broadcast,
and the conv computes k times the multiply-adds, the added ones by zero. The sums are the same, exactly.

Eligible: conv2d as imported (NCHW data, OIHW weights, before channels_last.py), float32, static shapes, a constant
weight, groups of more than one input channel and fewer than VECTOR_LANES output channels, and a k of at most
MAX_MERGED that makes the merged groups whole vectors of output channels and costs no more multiply-adds than
padding each group's output channels to whole vectors (channel_padding.py) would: 8 groups of 14 channels merged
into one dense conv do 8 times the work, and ran several times slower than left grouped (bench/results/README.md).
Depthwise convs (one input channel a group) have a schedule of their own and are left alone. lowering.py merges only
where the convs are then converted channels-last: in NCHW a vector runs over output columns, with no gather to save.
"""

from __future__ import annotations

import numpy as np

from modelbuild.compiler.default_schedule import VECTOR_LANES
from modelbuild.compiler.integer_ops import constant_value
from modelbuild.compiler.passes.channel_padding import per_group_padded
from modelbuild.compiler.relax_rewrite import module_pass, rewrite_calls

MAX_MERGED = 8  # at most this many times the multiply-adds: groups of 2 channels (8x) still beat the gather


def transform():
    """`rewrite` as a module pass: grouped convs' groups merged into block-diagonal ones."""
    return module_pass(rewrite, "GroupBlocksMerged")


def rewrite(module):
    """The module with every eligible grouped conv2d's groups merged (see the module's docstring)."""
    return rewrite_calls(module, _merged_groups)


def merged(groups: int, per_group_out: int) -> int | None:
    """How many groups to merge: the fewest, dividing `groups`, that make whole vectors of output channels
    and compute no more multiply-adds than each group's output channels padded to whole vectors would
    (channel_padding.per_group_padded); None where no such count up to MAX_MERGED exists. 8 groups of 14
    channels would merge 8 at a time, 8 times the work, where padding each to 16 costs 1.14 times."""
    padding = per_group_padded(groups, per_group_out) / per_group_out
    return next(
        (
            k
            for k in range(2, MAX_MERGED + 1)
            if groups % k == 0 and k * per_group_out % VECTOR_LANES == 0 and k <= padding
        ),
        None,
    )


def block_diagonal(weight: np.ndarray, groups: int, k: int) -> np.ndarray:
    """OIHW weights of `groups` groups as those of groups / k groups: output channel o, of original group g,
    keeps its weights at input position (g % k) * per_group_in of its merged group, zeros elsewhere."""
    out_channels, per_group_in, kh, kw = weight.shape
    per_group_out = out_channels // groups
    wide = np.zeros((out_channels, k * per_group_in, kh, kw), weight.dtype)
    for group in range(groups):
        rows = slice(group * per_group_out, (group + 1) * per_group_out)
        start = group % k * per_group_in
        wide[rows, start : start + per_group_in] = weight[rows]
    return wide


def _merged_groups(mutator, call):
    from tvm import relax
    from tvm.ir import Constant  # relax constants are tvm.ir.Constant in TVM 0.27

    if getattr(call.op, "name", None) != "relax.nn.conv2d" or not isinstance(call.args[1], Constant):
        return call
    attrs, groups = call.attrs, int(call.attrs.groups)
    if (
        groups == 1
        or str(call.args[0].ty.dtype) != "float32"
        or (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout))
        != ("NCHW", "OIHW", "NCHW")
    ):
        return call
    weight = constant_value(call.args[1])
    out_channels, per_group_in = weight.shape[:2]
    per_group_out = out_channels // groups
    k = merged(groups, per_group_out) if 1 < per_group_in and per_group_out < VECTOR_LANES else None
    if k is None:
        return call
    wide = relax.const(block_diagonal(weight, groups, k), "float32")
    return relax.op.nn.conv2d(
        call.args[0],
        wide,
        strides=attrs.strides,
        padding=attrs.padding,
        dilation=attrs.dilation,
        groups=groups // k,
        data_layout="NCHW",
        kernel_layout="OIHW",
        out_layout="NCHW",
        out_dtype=attrs.out_dtype,
    )
