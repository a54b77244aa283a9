"""Transposed convs whose stride equals their kernel (2x2 stride 2 upsampling, as in segmentation heads) as
a 1x1 conv to O x KH x KW channels followed by a depth-to-space.

With stride = kernel the output windows do not overlap: output (y, x) = (i * KH + a, j * KW + b) takes one
tap, sum_c x[c, i, j] * w[c, o, a, b]. TVM legalises conv2d_transpose as a dilated, padded conv over
mostly zeros (3 of 4 inputs for 2x2 stride 2), with a single output channel where the detector's head
has one, so its default schedule can block nothing. As a 1x1 conv the same sums are an ordinary conv that
the default schedule (or VNNI, tuning) handles, and the reordering of outputs is one injective kernel.
"""

from __future__ import annotations

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
    return ((str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout))
            == ("NCHW", "IOHW", "NCHW") and int(attrs.groups) == 1
            and [int(s) for s in attrs.strides] == [kh, kw] and not any(int(p) for p in attrs.padding)
            and not any(int(p) for p in attrs.output_padding) and all(int(d) == 1 for d in attrs.dilation))


def _as_conv_and_depth_to_space(bb, call):
    from tvm import relax

    x, weight = call.args
    n, _, height, width = (int(d) for d in x.ty.shape.values)
    in_ch, out_ch, kh, kw = (int(d) for d in weight.ty.shape.values)
    # w[c, o, a, b] -> w1x1[(o, a, b), c]: output channel (o, a, b) of the 1x1 conv is tap (a, b) of channel o
    taps = bb.emit(relax.op.reshape(relax.op.permute_dims(weight, [1, 2, 3, 0]), [out_ch * kh * kw, in_ch, 1, 1]))
    per_tap = bb.emit(relax.op.nn.conv2d(x, taps, out_dtype=call.attrs.out_dtype))
    blocks = bb.emit(relax.op.reshape(per_tap, [n, out_ch, kh, kw, height, width]))
    interleaved = bb.emit(relax.op.permute_dims(blocks, [0, 1, 4, 2, 5, 3]))  # [n, o, i, a, j, b]
    return relax.op.reshape(interleaved, [n, out_ch, height * kh, width * kw])
