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
from modelbuild.compiler.relax_rewrite import bound_constant, known_shape, module_pass, rewrite_calls


def transform():
    """`rewrite` as a module pass: transposed convs as convs and a depth-to-space."""
    return module_pass(rewrite, "ConvTransposeAsConv")


def rewrite(module):
    """The module with every eligible conv2d_transpose replaced (see `eligible`)."""
    return rewrite_calls(module, _non_overlapping)


def _non_overlapping(mutator, call):
    if getattr(call.op, "name", None) != "relax.nn.conv2d_transpose":
        return call
    if eligible(call):
        return _as_conv_and_depth_to_space(mutator.builder_, call)
    weight = bound_constant(mutator, call.args[1])
    if weight is not None and phases_eligible(call):
        return _as_phase_conv(mutator.builder_, call, constant_value(weight))
    return call


def eligible(call) -> bool:
    """NCHW / IOHW, static shapes, one group, no padding or dilation, and stride equal to the kernel."""
    attrs, weight = call.attrs, call.args[1]
    kernel, data = known_shape(weight), known_shape(call.args[0])
    if kernel is None or data is None or len(kernel) != 4:
        return False
    _, _, kh, kw = kernel
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


def phases_eligible(call) -> bool:
    """A float32 NCHW / IOHW transposed conv of one group and no dilation, with static shapes."""
    attrs = call.attrs
    return (
        (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout))
        == ("NCHW", "IOHW", "NCHW")
        and str(call.args[0].ty.dtype) == "float32"
        and known_shape(call.args[0]) is not None
        and int(attrs.groups) == 1
        and all(int(d) == 1 for d in attrs.dilation)
    )


def phase_weights(weight: np.ndarray, strides: tuple[int, int]) -> np.ndarray:
    """IOHW transposed-conv weights [C, O, KH, KW] as the OIHW weights of a stride-1 conv whose output channel
    (o, rh, rw) computes the outputs of phase (rh, rw): rows y = sh * q + rh, columns x = sw * q' + rw. Such an
    output takes taps rh, rh + sh, ... of the kernel from rows q, q - 1, ...; the conv reads rows q - th + 1 to
    q, so its taps are those, flipped, and zero where a phase has fewer than th = ceil(KH / sh) of them."""
    in_ch, out_ch, kh, kw = weight.shape
    sh, sw = strides
    th, tw = -(-kh // sh), -(-kw // sw)
    phases = np.zeros((out_ch, sh, sw, in_ch, th, tw), weight.dtype)
    for rh in range(sh):
        for rw in range(sw):
            for uh in range(th):
                for uw in range(tw):
                    a, b = rh + sh * (th - 1 - uh), rw + sw * (tw - 1 - uw)
                    if a < kh and b < kw:
                        phases[:, rh, rw, :, uh, uw] = weight[:, :, a, b].T
    return phases.reshape(out_ch * sh * sw, in_ch, th, tw)


def _as_phase_conv(bb, call, weight: np.ndarray):
    """A transposed conv as a stride-1 conv computing every output phase as channels, then the phases
    interleaved (a depth-to-space) and the padding cropped.

    TVM legalises a transposed conv as a conv over its input dilated with zeros, in NCHW: a 3x3 stride-2 one
    multiplies 3 zeros for every value, in a layout the default schedule cannot vectorise by channels. Split
    by phase, it multiplies no inserted zeros (a 3x3 stride-2 kernel's phases have 4, 2, 2 and 1
    taps, computed as 2x2: 9 of 16 products are real), and the conv goes channels-last as any other."""
    from tvm import relax

    attrs, x = call.attrs, call.args[0]
    n, _, height, width = known_shape(x)
    _, out_ch, kh, kw = weight.shape
    sh, sw = (int(s) for s in attrs.strides)
    top, left, bottom, right = (int(p) for p in attrs.padding)
    extra_h, extra_w = (int(p) for p in attrs.output_padding)
    out_h = (height - 1) * sh - top - bottom + kh + extra_h
    out_w = (width - 1) * sw - left - right + kw + extra_w
    th, tw = -(-kh // sh), -(-kw // sw)
    # rows q of the phase conv give outputs sh * q + rh - top: enough of them to reach the last output
    rows, cols = max(height, -(-(out_h + top) // sh)), max(width, -(-(out_w + left) // sw))
    phases = relax.const(phase_weights(weight, (sh, sw)), "float32")
    per_phase = bb.emit(
        relax.op.nn.conv2d(x, phases, padding=[th - 1, tw - 1, rows - height, cols - width], out_dtype=attrs.out_dtype)
    )
    blocks = bb.emit(relax.op.reshape(per_phase, [n, out_ch, sh, sw, rows, cols]))
    interleaved = bb.emit(relax.op.permute_dims(blocks, [0, 1, 4, 2, 5, 3]))  # [n, o, q, rh, q', rw]
    whole = bb.emit(relax.op.reshape(interleaved, [n, out_ch, rows * sh, cols * sw]))
    return relax.op.strided_slice(whole, axes=[2, 3], begin=[top, left], end=[top + out_h, left + out_w])
