"""Output channels padded to a whole number of vectors, where no vector width divides them (and a narrow
head's input channels to whole half vectors: `padded_inputs`).

The default schedule vectorises a matmul over its output columns and an NHWC conv over its output channels.
Real models keep those at multiples of 8 or 16, except their heads: a recogniser's 6625 or 18710 classes, a
detector's 255 anchors-by-classes. With no width dividing the axis the schedule had nothing to vectorise, and
its reduction read the weights with a stride of N floats: the [40,120]x[120,6625] head of a recogniser ran
at 1.1 GFLOP/s where its 6624-column sibling ran at 16. Here such an operator computes N rounded up to a
multiple of VECTOR_LANES from weights padded with zeros (folded once, the weights being constant), and a
slice drops the padding: one more pass over the output, fused with the operator's epilogue.
"""

from __future__ import annotations

from modelbuild.compiler.default_schedule import VECTOR_LANES
from modelbuild.compiler.relax_rewrite import known_shape, module_pass, rewrite_calls

MAX_CHANNELS_IN_LANES = 3  # narrower heads are summed in lanes (padded_channels, _output_channels_first)
VECTOR_WIDTHS = (VECTOR_LANES, VECTOR_LANES // 2, VECTOR_LANES // 4)  # what the schedule splits by
CONSTANT_DEPTH = 8  # how many operators back a weight is looked for among constants (a transpose, a reshape)


def transform():
    """`rewrite` as a module pass: channels padded to whole vectors."""
    return module_pass(rewrite, "ChannelsPadded")


def rewrite(module):
    """The module with every operator `padded_channels` picks computing whole vectors."""
    return rewrite_calls(module, _whole_vectors)


def _whole_vectors(mutator, call):
    if _grouped_nhwc(call) and _constant(mutator, call.args[1]):
        return _groups_in_whole_vectors(mutator.builder_, call)
    weight_axis = _weight_channel_axis(call)
    if weight_axis is None or not (_constant(mutator, call.args[1]) or _rows_repay_a_copy(call)):
        return call
    shape = [int(d) for d in call.args[1].ty.shape.values]
    channels = shape[weight_axis]
    padded = padded_channels(channels)
    if padded != channels:
        return _padded(mutator.builder_, call, weight_axis, channels, padded)
    if weight_axis == 3 and padded_inputs(shape[2], channels) != shape[2]:
        call = _inputs_padded(mutator.builder_, call, shape[2], padded_inputs(shape[2], channels))
    if weight_axis == 3 and 1 < channels <= MAX_CHANNELS_IN_LANES:
        return _output_channels_first(mutator.builder_, call)
    return call


def _rows_repay_a_copy(call) -> bool:
    """Whether a matmul by a computed right operand (attention's keys, [.., 64, 197] in a vision transformer)
    is worth padding at run time: any is. The copy of that operand is one pass over it, where without it the
    schedule sums each output in lanes read N floats apart, for every row of the left operand; even a single
    row ran several times slower that way than copied (bench/results/README.md)."""
    return getattr(call.op, "name", None) == "relax.matmul"


def padded_inputs(inputs: int, outputs: int) -> int:
    """The input channels an NHWC conv to `outputs` channels reads: where no vector width divides its outputs
    (one channel, a map's head) the schedule sums its input channels in vector lanes instead, and needs whole
    half vectors of them: the next multiple of VECTOR_LANES / 2, the padding zeros. Basic-pitch's last conv, 3x3
    from 33 channels (a concatenation of 32 and 1) to one, ran a lane at a time at 3.5 GFLOP/s. Otherwise,
    and for fewer than half a vector of inputs (an RGB image), `inputs`."""
    half = VECTOR_LANES // 2
    if any(outputs % width == 0 for width in VECTOR_WIDTHS) or inputs < half or inputs % half == 0:
        return inputs
    return -(-inputs // half) * half


def _inputs_padded(bb, call, channels: int, padded: int):
    """The conv reading `padded` input channels: its input widened with zeros (one copy, fused into the
    input's producer where that is a concatenation or an element-wise kernel), its weights with zero rows."""
    from tvm import relax

    data, weight = call.args[0], call.args[1]
    data_pad = [0] * (2 * len(data.ty.shape.values))
    data_pad[-1] = padded - channels
    weight_pad = [0] * (2 * len(weight.ty.shape.values))
    weight_pad[2 * 2 + 1] = padded - channels  # HWIO: the input channels are axis 2
    wide_data = bb.emit(relax.op.nn.pad(data, data_pad))
    wide_weight = bb.emit(relax.op.nn.pad(weight, weight_pad))
    return relax.Call(call.op, [wide_data, wide_weight, *call.args[2:]], call.attrs, call.ty_args)


def _output_channels_first(bb, call):
    """An NHWC conv to 2 or 3 channels with its weights OHWI: it sums its input channels in lanes, and each
    output channel's weights are then contiguous, where HWIO read them 2 or 3 floats apart, a gather a vector.
    A 3x3 conv from 32 channels at 224x224 to 2 ran 2.4 ms, the same to 1 channel 0.8 ms; now 0.9 ms."""
    from tvm import relax

    attrs = call.attrs
    weight = bb.emit(relax.op.permute_dims(call.args[1], [3, 0, 1, 2]))
    return relax.op.nn.conv2d(
        call.args[0],
        weight,
        attrs.strides,
        attrs.padding,
        attrs.dilation,
        attrs.groups,
        "NHWC",
        "OHWI",
        "NHWC",
        attrs.out_dtype,
    )


def _constant(mutator, expr, depth: int = CONSTANT_DEPTH) -> bool:
    """Whether `expr` is computed from constants alone, so FoldConstant folds its padding away. Looked for at
    most `depth` operators back: a matmul by an activation leads back through the whole network, and walking
    it (every path, for a matmul late in a recogniser) exceeded Python's recursion limit."""
    from tvm import relax
    from tvm.ir import Constant  # relax constants are tvm.ir.Constant in TVM 0.27

    if isinstance(expr, Constant):
        return True
    if depth == 0:
        return False
    if isinstance(expr, relax.Var):
        bound = mutator.lookup_binding(expr)
        return bound is not None and _constant(mutator, bound, depth)
    if isinstance(expr, relax.Call) and getattr(expr.op, "name", "").startswith("relax."):
        return all(_constant(mutator, arg, depth - 1) for arg in expr.args)
    return False


def padded_channels(channels: int) -> int:
    """The channel count to compute: the next multiple of VECTOR_LANES when no vector width divides
    `channels`, or when only a narrower one does and the padding adds at most a third (a DB detector's
    96->24 3x3 convs: 21.2 ms in 8-lane vectors, 13.9 ms computing 32 channels in 16-lane ones); else
    `channels`. A head narrower than one vector that no width divides is rounded up to the narrowest width
    that holds it (5 to 8, 9 to 16): computed a channel at a time, its input channels summed in lanes, a 3x3
    conv from 32 channels at 224x224 to 9 (a super-resolution net's last) ran at 28 GFLOP/s, 6.4x onnxruntime's
    time, and to 16 at 177. Up to 3 channels stay, summed in lanes (_output_channels_first): padding would
    multiply their work by 4 to 16, and 3 channels so took 1.1 ms where 4 took 2.3."""
    whole = -(-channels // VECTOR_LANES) * VECTOR_LANES
    if channels <= MAX_CHANNELS_IN_LANES or channels % VECTOR_LANES == 0:
        return channels
    if 3 * whole <= 4 * channels:
        return whole
    if not any(channels % width == 0 for width in VECTOR_WIDTHS):
        return next((width for width in sorted(VECTOR_WIDTHS) if width >= channels), whole)
    return channels


def _weight_channel_axis(call) -> int | None:
    """The weights' output-channel axis of a float matmul by a [K, N] matrix or an ungrouped NHWC / HWIO conv2d
    or NWC / WIO conv1d, with static shapes; None for any other call."""
    op = getattr(call.op, "name", None)
    if op not in ("relax.matmul", "relax.nn.conv2d", "relax.nn.conv1d") or len(call.args) < 2:
        return None
    data, weight = known_shape(call.args[0]), known_shape(call.args[1])
    if data is None or weight is None:
        return None
    dtype = str(call.args[0].ty.dtype)
    if not dtype.startswith("float") or len(data) < 2:
        return None
    if op == "relax.matmul":
        return len(weight) - 1 if len(weight) >= 2 and len(data) >= 2 else None
    attrs = call.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout))
    if int(attrs.groups) != 1:
        return None
    return {("NHWC", "HWIO", "NHWC"): 3, ("NWC", "WIO", "NWC"): 2}.get(layouts)


def _padded(bb, call, weight_axis: int, channels: int, padded: int):
    from tvm import relax

    weight = call.args[1]
    pad_width = [0] * (2 * len(weight.ty.shape.values))
    pad_width[2 * weight_axis + 1] = padded - channels
    wide_weight = bb.emit(relax.op.nn.pad(weight, pad_width))
    wide = bb.emit(relax.Call(call.op, [call.args[0], wide_weight, *call.args[2:]], call.attrs, call.ty_args))
    last = len(wide.ty.shape.values) - 1  # the output's channel axis: last for a matmul and for NHWC
    return relax.op.strided_slice(wide, axes=[last], begin=[0], end=[channels])


def _grouped_nhwc(call) -> bool:
    """Whether `call` is a float NHWC / HWIO conv2d of several groups, not depthwise, with static shapes."""
    if getattr(call.op, "name", None) != "relax.nn.conv2d" or int(call.attrs.groups) == 1:
        return False
    attrs = call.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout))
    data, weight = known_shape(call.args[0]), known_shape(call.args[1])
    return (
        layouts == ("NHWC", "HWIO", "NHWC")
        and data is not None
        and weight is not None
        and str(call.args[0].ty.dtype).startswith("float")
        and weight[2] > 1
    )


def per_group_padded(groups: int, per_group: int) -> int:
    """The output channels each of `groups` groups computes: the fewest, from `per_group` up, whose vectors
    (the widest width dividing all groups' channels, as the default schedule splits them) never span two
    groups. A vector across groups reads each group's own input channels, a gather built lane by lane, where
    a vector inside one group reads one input channel, broadcast. 13 groups of 8 are left as they are (8-lane
    vectors), 4 of 24 compute 32, 7 of 5 compute 8."""
    whole = -(-per_group // VECTOR_LANES) * VECTOR_LANES
    for padded in range(per_group, whole):
        width = next((w for w in VECTOR_WIDTHS if groups * padded % w == 0), None)
        if width is not None and padded % width == 0:
            return padded
    return whole


def _groups_in_whole_vectors(bb, call):
    """A grouped conv computing `per_group_padded` output channels a group, from weights padded with zeros
    (folded once, the weights being constant), and a slice that drops each group's padding."""
    from tvm import relax

    groups = int(call.attrs.groups)
    kh, kw, per_group_in, out_channels = known_shape(call.args[1])
    per_group = out_channels // groups
    padded = per_group_padded(groups, per_group)
    if padded == per_group:
        return call
    by_group = bb.emit(relax.op.reshape(call.args[1], [kh, kw, per_group_in, groups, per_group]))
    wide_weight = bb.emit(
        relax.op.reshape(
            relax.op.nn.pad(by_group, [0, 0, 0, 0, 0, 0, 0, 0, 0, padded - per_group]),
            [kh, kw, per_group_in, groups * padded],
        )
    )
    wide = bb.emit(relax.Call(call.op, [call.args[0], wide_weight, *call.args[2:]], call.attrs, call.ty_args))
    n, height, width, _ = known_shape(wide)
    grouped = bb.emit(relax.op.reshape(wide, [n, height, width, groups, padded]))
    kept = bb.emit(relax.op.strided_slice(grouped, axes=[4], begin=[0], end=[per_group]))
    return relax.op.reshape(kept, [n, height, width, out_channels])
