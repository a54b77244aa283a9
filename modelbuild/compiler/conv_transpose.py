"""Transposed convs whose stride equals their kernel (2x2 stride 2 upsampling, as in segmentation heads) as
a 1x1 conv to O x KH x KW channels followed by a depth-to-space.

With stride = kernel the output windows do not overlap: output (y, x) = (i * KH + a, j * KW + b) takes one
tap, sum_c x[c, i, j] * w[c, o, a, b]. TVM legalises conv2d_transpose as a dilated, padded conv over
mostly zeros (3 of 4 inputs for 2x2 stride 2), with a single output channel where the detector's head
has one, so its default schedule can block nothing. As a 1x1 conv the same sums are an ordinary conv that
the default schedule (or VNNI, tuning) handles, and the reordering of outputs is one injective kernel.

A float model's reordering is a reshape, transpose and reshape, which the channels-last conversion moves
with the activations (in NHWC it moves whole channel vectors). An integer one stays NCHW (the VNNI kernels'
layout), where that chain fused into one kernel whose every element computed a dozen divisions and
remainders of the composed index (8 ms for the DB detector's 24 x 320 x 320 head): it is one gather with
the index written directly instead. Its weights are reordered here in numpy, so the 1x1 conv's weights are
a constant that the VNNI kernels take (a weight computed in the graph left them TVM's generic int8 conv).
"""

from __future__ import annotations

import numpy as np

from modelbuild.compiler.integer_ops import constant_value
from modelbuild.compiler.relax_rewrite import rewrite_calls


def rewrite(module):
    """The module with every eligible conv2d_transpose replaced (see `eligible`)."""
    return rewrite_calls(module, _non_overlapping)


def _non_overlapping(mutator, call):
    if getattr(call.op, "name", None) != "relax.nn.conv2d_transpose" or not eligible(call):
        return call
    return _as_conv_and_depth_to_space(mutator.builder_, call)


def eligible(call) -> bool:
    """NCHW / IOHW, static shapes, one group, no padding or dilation, and stride equal to the kernel."""
    attrs, weight = call.attrs, call.args[1]
    try:
        _, _, kh, kw = (int(d) for d in weight.ty.shape.values)
        [int(d) for d in call.args[0].ty.shape.values]
    except (AttributeError, TypeError, ValueError):
        return False
    return (
        (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout))
        == ("NCHW", "IOHW", "NCHW")
        and int(attrs.groups) == 1
        and [int(s) for s in attrs.strides] == [kh, kw]
        and not any(int(p) for p in attrs.padding)
        and not any(int(p) for p in attrs.output_padding)
        and all(int(d) == 1 for d in attrs.dilation)
    )


def _as_conv_and_depth_to_space(bb, call):
    from tvm import relax
    from tvm.ir import Constant

    x, weight = call.args
    n, _, height, width = (int(d) for d in x.ty.shape.values)
    in_ch, out_ch, kh, kw = (int(d) for d in weight.ty.shape.values)
    # w[c, o, a, b] -> w1x1[(o, a, b), c]: output channel (o, a, b) of the 1x1 conv is tap (a, b) of channel o
    if isinstance(weight, Constant):
        taps = relax.const(
            np.ascontiguousarray(constant_value(weight).transpose(1, 2, 3, 0)).reshape(out_ch * kh * kw, in_ch, 1, 1),
            str(weight.ty.dtype),
        )
    else:
        taps = bb.emit(relax.op.reshape(relax.op.permute_dims(weight, [1, 2, 3, 0]), [out_ch * kh * kw, in_ch, 1, 1]))
    per_tap = bb.emit(relax.op.nn.conv2d(x, taps, out_dtype=call.attrs.out_dtype))
    if str(x.ty.dtype) != "float32":
        return bb.call_te(_depth_to_space, per_tap, kh, kw, primfunc_name_hint="depth_to_space")
    blocks = bb.emit(relax.op.reshape(per_tap, [n, out_ch, kh, kw, height, width]))
    interleaved = bb.emit(relax.op.permute_dims(blocks, [0, 1, 4, 2, 5, 3]))  # [n, o, i, a, j, b]
    return relax.op.reshape(interleaved, [n, out_ch, height * kh, width * kw])


def _depth_to_space(per_tap, kh: int, kw: int):
    """[n, o * kh * kw, h, w] -> [n, o, h * kh, w * kw], output (y, x) from tap (y % kh, x % kw) at (y / kh,
    x / kw)."""
    from tvm import te

    n, channels, height, width = (int(d) for d in per_tap.shape)
    return te.compute(
        (n, channels // (kh * kw), height * kh, width * kw),
        lambda b, o, y, x: per_tap[b, (o * kh + y % kh) * kw + x % kw, y // kh, x // kw],
        name="depth_to_space",
    )
