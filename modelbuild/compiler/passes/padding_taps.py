"""Kernel rows and columns that only ever multiply a conv's zero padding, dropped with that padding.

On small maps a conv's kernel can be taller than the rows it slides over: the text classifier's 5x5
depthwise convs at 2 x 96 (200 channels) take each output row from 2 of the 5 kernel rows, the other 3 always
over padding, multiplying zeros (the VNNI and float kernels compute every tap). A kernel row r is used when
some output row y reads a real input row, 0 <= y * stride + r - pad_top < height; rows used by no output are
cut from the (constant) weights, and the padding shrinks by as much, so every output reads the same inputs
with the same weights: the same sums, exactly, in float and in int8 (the implicit padding is zero in both).
Likewise for columns.

Eligible: conv2d, NCHW data and OIHW weights as imported (before channels_last.py), static shapes, a constant
weight, no dilation. An explicit pad before the conv (an int8 input with a zero point pads with it) is not
the conv's own padding and is left alone.
"""

from __future__ import annotations

from modelbuild.compiler.integer_ops import constant_value
from modelbuild.compiler.relax_rewrite import known_shape, module_pass, rewrite_calls


def transform():
    """`rewrite` as a module pass: the kernel taps that read only padding dropped."""
    return module_pass(rewrite, "PaddingTapsDropped")


def rewrite(module):
    """The module with every eligible conv2d's padding-only taps dropped (see the module's docstring)."""
    return rewrite_calls(module, _without_padding_taps)


def used_taps(size: int, pad_before: int, kernel: int, stride: int, outputs: int) -> tuple[int, int]:
    """(first, last) kernel tap that some output reads a real input through, along one axis of `size`
    inputs: tap t of output o reads input o * stride + t - pad_before."""
    first = max(0, pad_before - (outputs - 1) * stride)
    last = min(kernel - 1, pad_before + size - 1)
    return first, last


def _without_padding_taps(mutator, call):
    from tvm import relax
    from tvm.ir import Constant  # relax constants are tvm.ir.Constant in TVM 0.27

    if getattr(call.op, "name", None) != "relax.nn.conv2d" or not isinstance(call.args[1], Constant):
        return call
    attrs = call.attrs
    if (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout)) != (
        "NCHW",
        "OIHW",
        "NCHW",
    ) or any(int(d) != 1 for d in attrs.dilation):
        return call
    data, out = known_shape(call.args[0]), known_shape(call)
    if data is None or out is None:
        return call
    _, _, height, width = data
    _, _, out_h, out_w = out
    weight = constant_value(call.args[1])
    top, left, bottom, right = (int(p) for p in attrs.padding)
    sh, sw = (int(s) for s in attrs.strides)
    r0, r1 = used_taps(height, top, weight.shape[2], sh, out_h)
    c0, c1 = used_taps(width, left, weight.shape[3], sw, out_w)
    if (r0, r1, c0, c1) == (0, weight.shape[2] - 1, 0, weight.shape[3] - 1) or r0 > r1 or c0 > c1:
        return call
    taps = relax.const(weight[:, :, r0 : r1 + 1, c0 : c1 + 1].copy(), str(call.args[1].ty.dtype))
    padding = [top - r0, left - c0, bottom - (weight.shape[2] - 1 - r1), right - (weight.shape[3] - 1 - c1)]
    return relax.op.nn.conv2d(
        call.args[0],
        taps,
        strides=attrs.strides,
        padding=padding,
        dilation=attrs.dilation,
        groups=attrs.groups,
        data_layout="NCHW",
        kernel_layout="OIHW",
        out_layout="NCHW",
        out_dtype=attrs.out_dtype,
    )
