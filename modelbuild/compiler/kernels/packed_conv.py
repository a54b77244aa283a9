"""int8 conv2d in the layouts a CPU's dot-product instruction wants: the part every such instruction shares.

A dot-product instruction (x86's vpdpbusd, Arm's sdot) multiplies groups of 4 bytes by 4 bytes and adds each
group's sum into one int32 lane of an accumulator vector. The conv is computed in packed layouts that put
those groups next to each other:
- data: [N, C/4, H, stride, W/stride, 4] (4 input channels side by side, padded, and for strided convs the
  columns split by phase, so that the columns one weight meets are contiguous). Data that needs padding is
  padded row by row first, then packed; other data in one pass;
- weights: int8, [O/lanes, C/4, KH, KW, lanes, 4], packed once at compile time (they are constants);
- accumulators: int32, in one of two forms, chosen per conv:
  - column lanes, when rounding the output width up to whole vectors wastes at most 15% (29 -> 32, 57 -> 64
    for 16 lanes; the extra columns are computed and dropped): a vector holds neighbouring output columns of
    one channel; each instruction takes those columns x 4 channels of data and one channel's 4 weights
    broadcast. The accumulators are NCHW already, so the epilogue reads them with plain vector loads;
  - channel lanes, otherwise: a vector holds output channels of one column; each instruction takes one
    column's 4 channels broadcast and the channels' weights. Any width fits without padding, but the
    epilogue must transpose the accumulators back to NCHW (vector gathers), which cost as much as the
    reduction on the classifier's 1x1 convs with VNNI: column lanes ran them 2.2-2.4x faster.

Instructions differ in the sign of the data they multiply: vpdpbusd wants uint8 data, sdot int8. Data of the
other sign is shifted by 128 while packing (int8 + 128 is uint8, uint8 - 128 is int8), and shift * sum(w) is
subtracted per output channel afterwards, which is exact; padding is packed as the shifted zero. The result
is bit-identical to the plain 8-bit x int8 -> int32 conv it replaces.

This module also holds what the instructions share in scheduling: the two reduction schedules, the epilogue
and the tensor intrinsics (one factory for both). Each instruction's module (vnni_conv.py, sdot_conv.py) says
when it applies, which register tile it takes and how it packs padded data. A tile instruction (AMX's
tdpbsud, amx_conv.py) reduces 16 or 8 groups a step (`Instruction.group_block`), packed as its tiles want them,
and writes its own tensor intrinsic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from modelbuild.compiler.integer_ops import constant_value
from modelbuild.compiler.relax_rewrite import known_dims

GROUP = 4  # 8-bit products summed into each int32 lane by a dot-product instruction
PAD_VECTOR = 64  # padded bytes written per vector
ROW_BLOCK = 16  # channel lanes: output columns whose accumulators stay in registers while the weights stream by
ROWS_PER_CORE = 4  # output rows per core below which a conv's rows are too few to share among the cores
CHAINS = 8  # channel lanes: independent accumulators wanted at least, to hide the instruction's latency
# of a row's columns computed only to be dropped, in column lanes: the generated ResNet's widths 57 and 29
# (12%, 10%) went from 2.09x the float library to 0.8x with VNNI; the detector's 40 -> 48 (20%) measured
# 0.62x of float against 0.57x in channel lanes
MAX_PADDED_SHARE = 0.15
# a 1x1 conv's rows stay inside its blocks of output channels (see schedule_column_lanes) where its packed data
# fits a core's L2 across the blocks (1-2 MiB on every x86 CPU with VNNI), its output does not, and it writes
# more than STORE_BOUND_RATIO times the bytes it packs: bound by its stores to memory
CACHED_PACKED_BYTES = 1 << 20
UNCACHED_OUTPUT_BYTES = 4 << 20
STORE_BOUND_RATIO = 4


@dataclass(frozen=True)
class Instruction:
    """A dot-product instruction as the packed conv sees it: `lanes` int32 accumulators, each the sum of
    `group` products of `data_dtype` data and `weight_dtype` weights (the int8 weights widened where the
    instruction multiplies 16-bit values); `name` prefixes the blocks, which the default schedule
    recognises. An instruction that does not accumulate (x86's vpmaddwd) is followed by an add."""

    name: str
    lanes: int
    data_dtype: str  # "uint8", "int8", or "int16" (8-bit data of either sign, widened exactly)
    group: int = GROUP
    weight_dtype: str = "int8"
    accumulates: bool = True
    row_block: int = ROW_BLOCK  # channel lanes: accumulators of a row's columns, within the register file
    # groups of input channels one step reduces: 1 for a vector instruction; a tile instruction (AMX) takes 16
    # groups (64 channels) or 8 a step, its weights packed [O/lanes, C/(group * group_block), KH, KW, lanes,
    # group_block, group] and its accumulators always in column lanes
    group_block: int = 1

    def shift(self, dtype: str) -> int:
        """What is added to data of `dtype` to give this instruction's data type."""
        if dtype == self.data_dtype or self.data_dtype == "int16":
            return 0
        return 128 if self.data_dtype == "uint8" else -128

    @property
    def block(self) -> str:
        """The reduction block in channel lanes."""
        return f"{self.name}_conv"

    @property
    def column_block(self) -> str:
        """The reduction block in column lanes."""
        return f"{self.name}_conv_by_column"

    @property
    def pack_block(self) -> str:
        return f"{self.name}_pack"

    @property
    def pad_block(self) -> str:
        return f"{self.name}_pad"

    @property
    def blocks(self) -> tuple[str, str]:
        return self.block, self.column_block

    @property
    def staging_blocks(self) -> tuple[str, str]:
        """Scheduled by the instruction's module, so the default schedule must not inline them."""
        return self.pad_block, self.pack_block


def eligible(call) -> bool:
    """An ungrouped NCHW conv of 8-bit data with constant int8 weights into int32, of static shape."""
    from tvm.ir import Constant

    attrs, data, weight = call.attrs, call.args[0], call.args[1]
    return (
        str(attrs.out_dtype) == "int32"
        and int(attrs.groups) == 1
        and (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout))
        == ("NCHW", "OIHW", "NCHW")
        and str(data.ty.dtype) in ("int8", "uint8")
        and isinstance(weight, Constant)
        and str(weight.ty.dtype) == "int8"
        and static_shape(data.ty.shape)
    )


def static_shape(shape) -> bool:
    return known_dims(shape) is not None


def legalize(bb, call, instruction: Instruction):
    """An eligible conv2d (see `eligible`) in the instruction's packed form."""
    from tvm import relax

    weight = constant_value(call.args[1])
    packed, correction = pack_weights(weight, instruction, shift=instruction.shift(str(call.args[0].ty.dtype)))
    attrs = call.attrs
    geometry = {
        "strides": [int(s) for s in attrs.strides],
        "padding": [int(p) for p in attrs.padding],
        "dilation": [int(d) for d in attrs.dilation],
        "kernel": weight.shape[2:],
        "channels": weight.shape[0],
    }
    return bb.call_te(
        lambda x, w, c: compute(x, w, c, instruction, **geometry),
        call.args[0],
        relax.const(packed, instruction.weight_dtype),
        relax.const(correction, "int32"),
        primfunc_name_hint=f"conv2d_{instruction.name}",
    )


def pack_weights(weight: np.ndarray, instruction: Instruction, *, shift: int) -> tuple[np.ndarray, np.ndarray]:
    """OIHW int8 weights as [O/lanes, C/group, KH, KW, lanes, group] of the instruction's weight type
    (zero-padded), and what to subtract per output channel: shift * sum(w), for data shifted by `shift` into
    the instruction's type."""
    out_ch, in_ch, kh, kw = weight.shape
    lanes, group, step = instruction.lanes, instruction.group, instruction.group * instruction.group_block
    padded = np.zeros((ceil_div(out_ch, lanes) * lanes, ceil_div(in_ch, step) * step, kh, kw), instruction.weight_dtype)
    padded[:out_ch, :in_ch] = weight
    if instruction.group_block == 1:
        packed = padded.reshape(-1, lanes, padded.shape[1] // group, group, kh, kw).transpose(0, 2, 4, 5, 1, 3)
    else:
        packed = padded.reshape(-1, lanes, padded.shape[1] // step, instruction.group_block, group, kh, kw).transpose(
            0, 2, 5, 6, 1, 3, 4
        )
    correction = (shift * weight.astype(np.int64).reshape(out_ch, -1).sum(axis=1)).astype(np.int32)
    return np.ascontiguousarray(packed), correction


def column_lanes(out_width: int, lanes: int) -> bool:
    """Whether a conv of this output width is computed with output columns in the vector lanes, the row
    rounded up to whole vectors and the extra columns dropped, rather than output channels in the lanes
    (any width, but the accumulators must be transposed back with gathers)."""
    return lanes_width(out_width, lanes) <= out_width * (1 + MAX_PADDED_SHARE)


def channel_tile(channels: int, lanes: int) -> int:
    """Column lanes: the output channels of one register tile, each a weight broadcast against the same
    vectors of data. Any count from CHAINS to `lanes` keeps the instruction's latency hidden, so the one that
    computes fewest channels only to drop them, the larger on a tie: 24 channels as 2 x 12, not 2 x 16."""
    return min(range(min(CHAINS, lanes), lanes + 1), key=lambda tile: (ceil_div(channels, tile) * tile, -tile))


def lanes_width(out_width: int, lanes: int) -> int:
    return ceil_div(out_width, lanes) * lanes


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def padded(load, row, column, *, height: int, width: int, shift: int, dtype: str):
    """One byte of a padded row: the input at (row, column) shifted into `dtype`, or the shifted zero outside
    the input (row and column count from the input's first, so padding is at negative indices and past the
    end). Scheduled with `vectorise_padded_rows`, whose loops each lie wholly inside or outside the input's
    columns, so the condition on the column is decided at compile time and the one on the row is a branch
    per row: a padded row is plain vector copies with constants at its ends, and no load leaves the input."""
    from tvm import tirx

    zero = tirx.const(shift, dtype)
    value = (load(row, column).astype("int32") + shift).astype(dtype)
    return tirx.if_then_else(tirx.all(row >= 0, row < height, column >= 0, column < width), value, zero)


def vectorise_padded_rows(sch, pad, *, left: int, width: int, vector: int = PAD_VECTOR) -> None:
    """A pad block's innermost loop, over a padded row's columns, in loops of at most `vector` columns that
    each lie wholly in the left padding, the input's `width` columns from `left`, or the padding after them,
    each vectorised (see `padded`).

    Written as one loop of whole vectors instead, each vector of a row's first and last columns mixes padding
    and input, a select per lane over a contiguous load, and those loads reach before the input's first byte
    and past its last (a vector-wide branch loaded them lane by lane at the input's ends): the DB detector's
    96 -> 24 3x3 conv at 160x160 spent a quarter of its time padding, on AMX; partitioned, a row of it is a
    branch on the row and 5 vector copies."""
    column = sch.get_loops(pad)[-1]
    right = extent(sch, column) - left - width
    parts = [size for span in (left, width, right) for size in _vectors(span, vector)]
    loops = sch.loop_partition(column, [*parts[:-1], None]) if len(parts) > 1 else [column]
    for loop in loops:
        sch.vectorize(loop)


def _vectors(span: int, vector: int) -> list[int]:
    """`span` columns as whole vectors then one shorter one."""
    return [vector] * (span // vector) + ([span % vector] if span % vector else [])


def compute(
    x,
    w,
    correction,
    instruction: Instruction,
    *,
    strides,
    padding,
    dilation,
    kernel,
    channels,
    by_column: bool | None = None,
):
    """The packed conv as TE: pad (and shift) rows of all channels, pack (group channels by 4, split columns by
    stride phase), reduce, unpack with the correction. `by_column` forces one form of the accumulators
    (column_lanes chooses by default)."""
    from tvm import te, tirx

    n, in_ch, height, width = (int(d) for d in x.shape)
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilation
    top, left, bottom, right = padding if len(padding) == 4 else (*padding, *padding)
    out_h = (height + top + bottom - dh * (kh - 1) - 1) // sh + 1
    out_w = (width + left + right - dw * (kw - 1) - 1) // sw + 1
    lanes, dtype, group = instruction.lanes, instruction.data_dtype, instruction.group
    group_block = instruction.group_block
    groups_in = ceil_div(in_ch, group * group_block) * group_block
    shift = instruction.shift(str(x.dtype))

    def pad(b, row, c, column):
        value = padded(
            lambda r, q: x[b, c, r, q], row - top, column - left, height=height, width=width, shift=shift, dtype=dtype
        )
        if in_ch == groups_in * group:
            return value
        # the channels that fill the last group are the shifted zero, loading nothing
        return tirx.if_then_else(c < in_ch, value, tirx.const(shift, dtype))

    def tap(b, rc, h, col, rh, rw, ri, rg=None):
        """The packed data that weight tap (rh, rw) meets at output (h, col): column col * sw + rw * dw; of
        group rc, or of group rg of block rc for a tile instruction."""
        row, phase, column = h * sh + rh * dh, tirx.floormod(rw * dw, sw), col + tirx.floordiv(rw * dw, sw)
        if rg is None:
            return packed[b, rc, row, phase, column, ri]
        return packed[b, rc, row, phase, rg, column, ri]

    def pack(rows, phases, value, **kwargs):
        """[N, C/group, rows, phases, span, group], or for a tile instruction [N, C/(group * group_block), rows,
        phases, group_block, span, group]: a tile's rows (groups) a packed row apart, not a channel plane."""
        if group_block == 1:
            return te.compute((n, groups_in, rows, phases, span, group), value, name=instruction.pack_block, **kwargs)
        return te.compute(
            (n, groups_in // group_block, rows, phases, group_block, span, group),
            lambda b, cb, row, phase, g, q, ci: value(b, cb * group_block + g, row, phase, q, ci),
            name=instruction.pack_block,
            **kwargs,
        )

    if group_block > 1:
        by_column = True
    by_column = column_lanes(out_w, lanes) if by_column is None else by_column
    computed_w = lanes_width(out_w, lanes) if by_column else out_w  # columns computed; the extra ones dropped
    span = computed_w + (kw - 1) * dw // sw  # packed columns of one phase that the outputs reach
    if sw == 1 and in_ch == groups_in * group and not any((top, left, bottom, right)) and computed_w == out_w:
        # nothing to pad: one pass, which LLVM vectorises well enough (under 1 us for the classifier's 1x1s)
        packed = pack(
            height,
            1,
            lambda b, cg, row, phase, q, ci: (x[b, cg * group + ci, row, q].astype("int32") + shift).astype(dtype),
        )
    else:
        # in whole vectors for packing intrinsics, whose loads of `lanes` * stride columns from a phase's first
        # column reach column span * sw + phase - 1 at most (a row of 56 for a 1x1 conv pads to 64, not 128)
        span = ceil_div(span, lanes) * lanes
        padded_w = ceil_div(max(width + left + right, span * sw + sw - 1), PAD_VECTOR) * PAD_VECTOR
        # [N, H, C, W]: the 4 channels a packed vector interleaves are neighbouring rows of one 2-D region
        rows = te.compute(
            (n, height + top + bottom, groups_in * group, padded_w),
            pad,
            name=instruction.pad_block,
            attrs={"columns": [left, width]},
        )
        packed = pack(
            height + top + bottom,
            sw,
            lambda b, cg, row, phase, q, ci: rows[b, row, cg * group + ci, q * sw + phase],
            attrs={"stride": sw},
        )  # packing intrinsics need it
    rc, rh, rw, ri = (
        te.reduce_axis((0, e), name)
        for e, name in ((groups_in // group_block, "rc"), (kh, "rh"), (kw, "rw"), (group, "ri"))
    )

    def product(b, o_block, o_lane, h, col):
        if group_block > 1:  # the groups of one step innermost but one, as the tile instruction takes them
            rg = te.reduce_axis((0, group_block), "rg")
            return te.sum(
                tap(b, rc, h, col, rh, rw, ri, rg).astype("int32")
                * w[o_block, rc, rh, rw, o_lane, rg, ri].astype("int32"),
                axis=[rc, rh, rw, rg, ri],
            )
        return te.sum(
            tap(b, rc, h, col, rh, rw, ri).astype("int32") * w[o_block, rc, rh, rw, o_lane, ri].astype("int32"),
            axis=[rc, rh, rw, ri],
        )

    if by_column:
        tile = lanes if group_block > 1 else channel_tile(channels, lanes)
        # a tile instruction's schedule writes its tensor intrinsic for the conv's taps
        taps = {"dilation": [dh, dw], "stride": [sh, sw]} if group_block > 1 else None
        acc = te.compute(
            (n, ceil_div(channels, tile) * tile, out_h, computed_w),
            lambda b, o, h, col: product(b, o // lanes, o % lanes, h, col),
            name=instruction.column_block,
            attrs=taps,
        )

        def unpacked(b, o, h, col):
            return acc[b, o, h, col]
    else:
        acc = te.compute(
            (n, ceil_div(channels, lanes), out_h, out_w, lanes),
            lambda b, ob, h, col, oi: product(b, ob, oi, h, col),
            name=instruction.block,
        )

        def unpacked(b, o, h, col):
            return acc[b, o // lanes, h, col, o % lanes]

    return te.compute(
        (n, channels, out_h, out_w),
        lambda b, o, h, col: unpacked(b, o, h, col) - correction[o],
        name=f"{instruction.name}_unpack",
    )


def block_names(sch) -> set[str]:
    return {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))}


def schedule_column_lanes(sch, instruction: Instruction, cores: int, intrinsic: str, vectors: int = 1) -> None:
    """The reduction in column lanes tensorised with `intrinsic`: a register tile of `channel_tile` output
    channels by up to `vectors` vectors of columns (each data vector feeds every channel, each weight word every
    vector); the epilogue per tile, or per row where a tile would end past the output (epilogue_at).

    Rows are the outer loop, blocks of output channels inside them, and the padding and packing run over rows
    too (parallel), so each core packs, reads and writes the same band of rows: what a core reads it wrote
    itself, but for a 3x3 conv's one row of halo. With the channel blocks outermost, every core read the rows
    the other had packed, and on this VM's host, whose two vCPUs are at times far apart (a 2 MB buffer one
    core wrote read by the other in 55-66 us, against 34 us by the core that wrote it; seconds to minutes at
    a time), the DB detector's 96 -> 24 3x3 conv at 160x160 took 1170-1200 us against 680-720 at other
    times; rows outermost, 690-720 us in both. Where the data stays near, rows outermost costs nothing
    (call by call, bit-identical: the DB detector's int8 library 0.99-1.01x, resnet_ish's 0.998x; 0.93x and
    0.77x while far apart). Alone, measured earlier (spells unknown), rows outermost cost some kernels a
    little: larger 3x3 convs, whose blocks' weights stayed in cache across the rows (64 -> 64 at 57x57 251 ->
    256 us, 128 -> 128 at 29x29 222 -> 235 us), and 1x1 convs into float whose outputs stay in cache (18 -> 96
    at 80x80 124 -> 136 us, 42 -> 96 at 2 x 800 58 -> 73 us). It gains where the packed data is large: a row
    of it serves every block of channels from cache, where a 256 -> 64 1x1 conv at 100x80 read its 2 MB from
    memory four times with the blocks outermost (1230 us against 465; at 100x76 1011 -> 556 us), and
    requantising convs of the layout net ran 1.1-1.4x slower with the blocks outermost.
    Two exceptions keep the channel blocks outermost. A conv with too few rows to share (ROWS_PER_CORE): the
    x-vector's conv1d over 200 frames, one row, ran on one core, its library 1.79x as slow. A conv bound by
    its stores (`store_bound`): rows outermost, every row writes a line into each channel plane of the output,
    and a 12 -> 96 conv at 160x160 (300 KB packed, 9.8 MB of float output) took 1024 us against 518 with the
    channel blocks outermost."""
    lanes = instruction.lanes
    block = sch.get_sblock(instruction.column_block)
    b, o, h, col, rc, rh, rw, ri = sch.get_loops(block)
    tile = channel_tile(extent(sch, o), lanes)
    ob, oi = sch.split(o, factors=[None, tile])
    vectors = largest_divisor(extent(sch, col) // lanes, vectors)
    col_outer, col_vector, col_inner = sch.split(col, factors=[None, vectors, lanes])
    rows_first = extent(sch, h) >= ROWS_PER_CORE * cores and not store_bound(sch, instruction)
    parallel_loops = reorder_outer(
        sch, block, rows_first, b, ob, h, col_outer, rc, rh, rw, oi, col_vector, col_inner, ri
    )
    outputs = extent(sch, b) * extent(sch, ob) * extent(sch, h) * extent(sch, col_outer) * tile * vectors * lanes
    epilogue_at(sch, block, col_outer, lanes, row=h)
    parallel(sch, instruction, cores, outputs * reduction_length(sch, instruction.group, rc, rh, rw), *parallel_loops)
    sch.unroll(oi)
    sch.unroll(col_vector)
    tensorize_reduction(sch, block, rc, col_inner, intrinsic)


def rows_outermost(sch, instruction: Instruction, taps: int, pixels: int, channels: int) -> bool:
    """Whether a tile instruction's conv (amx_conv) has its rows outermost, its blocks of output channels
    inside them: a 1x1 conv whose data outweighs its weights, unless bound by its stores. The VNNI, AVX2 and
    sdot convs have their rows outermost unless too few or bound by their stores (schedule_column_lanes);
    AMX's rule is the narrower one because it is the one measured on an AMX host (whose cores shared their
    data), and the wider rule has not been."""
    return taps == 1 and pixels > channels and not store_bound(sch, instruction)


def reorder_outer(sch, block, rows_first: bool, b, ob, h, col_outer, *inner) -> tuple:
    """The conv's loops in order, rows or blocks of output channels outermost; the loops to run in parallel."""
    if rows_first:
        sch.reorder(b, h, ob, col_outer, *inner)
        # an epilogue per row sits between the row's loop and its channel blocks: only the rows run in parallel
        return (b, h) if _ends_past_output(sch.copy(), block, col_outer) else (b, h, ob)
    sch.reorder(b, ob, h, col_outer, *inner)
    return b, ob, h


def store_bound(sch, instruction: Instruction) -> bool:
    """Whether the conv, before its epilogue is moved, writes more than STORE_BOUND_RATIO times the bytes it
    packs and more than UNCACHED_OUTPUT_BYTES, its packed data within CACHED_PACKED_BYTES: a short reduction
    into a wide output that goes to memory."""
    packed = _bytes(sch.get(sch.get_sblock(instruction.pack_block)).writes[0].source)
    params = {param.name for param in sch.mod["main"].params}
    written = {
        region.source.name: region.source
        for block in sch.get_child_blocks(sch.get_sblock("root"))
        for region in sch.get(block).writes
        if region.source.name in params
    }
    output = sum(map(_bytes, written.values()))
    return packed <= CACHED_PACKED_BYTES and output > max(STORE_BOUND_RATIO * packed, UNCACHED_OUTPUT_BYTES)


def _bytes(buffer) -> int:
    return int(np.prod([int(d) for d in buffer.shape])) * buffer.dtype.bits // 8


def schedule_channel_lanes(sch, instruction: Instruction, cores: int, intrinsic: str) -> None:
    """The reduction in channel lanes tensorised with `intrinsic`: a register tile of up to ROW_BLOCK
    accumulators, columns of a row; a row of fewer than CHAINS columns accumulates several blocks of output
    channels too (each data broadcast feeding them all). A 1x1 map (a squeeze-and-excite or classifier conv)
    was one chain of dependent instructions per block of channels, each waiting on the last one's latency:
    with VNNI, a 512 -> 1280 conv took 11.1 us, 5.8 us with 8 chains."""
    block = sch.get_sblock(instruction.block)
    b, ob, h, col, oi, rc, rh, rw, ri = sch.get_loops(block)
    columns = extent(sch, col)
    pixels = extent(sch, b) * extent(sch, h) * columns
    outputs = pixels * extent(sch, ob) * instruction.lanes
    macs = outputs * reduction_length(sch, instruction.group, rc, rh, rw)
    col_outer, col_inner = sch.split(col, factors=[None, largest_divisor(columns, instruction.row_block)])
    channel_blocks = largest_divisor(extent(sch, ob), max(1, CHAINS // extent(sch, col_inner)))
    ob_outer, ob_inner = sch.split(ob, factors=[None, channel_blocks])
    sch.reorder(b, ob_outer, h, col_outer, rc, rh, rw, ob_inner, col_inner, oi, ri)
    one_pixel_on_one_core = pixels == 1 and cores > 1 and macs < PARALLEL_MIN_MACS
    blocks_in_parallel = one_pixel_on_one_core and extent(sch, ob_outer) >= cores
    broadcast = epilogue_at(
        sch,
        block,
        col_outer,
        instruction.lanes,
        broadcast=pixels == 1,
        rows_in_parallel=one_pixel_on_one_core and not blocks_in_parallel,
    )
    if blocks_in_parallel and broadcast * extent(sch, ob_outer) >= PARALLEL_MIN_BROADCAST:
        sch.parallel(sch.fuse(b, ob_outer, h))
    parallel(sch, instruction, cores, macs, b, ob_outer, h)
    sch.unroll(ob_inner)
    sch.unroll(col_inner)
    tensorize_reduction(sch, block, rc, oi, intrinsic)


def epilogue_at(
    sch, block, loop, lanes: int, *, row=None, broadcast: bool = False, rows_in_parallel: bool = False
) -> int:
    """The unpack and every fused consumer computed under `loop`, reading the accumulators where they are,
    their rows of output columns (contiguous in NCHW) vectorised by vectorise_row. Returns the most outputs
    one consumer computes there.

    A tile of a row rounded up to whole vectors ends past the output (56 columns computed as 64): under
    `loop` its last tile's epilogue is predicated, and TVM then vectorises every tile's epilogue with a
    per-lane guard. The epilogue then runs under `row` instead, once per row, where it covers the row
    exactly: with VNNI, a requantising 64 -> 64 1x1 conv at 56x56 went from 236 to 131 us, 32 -> 64 from
    190 to 81 us, a 3x3 depthwise conv at 56x56 from 92 to 69 us.

    With `broadcast` (a one-pixel conv), an epilogue that broadcasts the conv over a feature map (a
    squeeze-and-excite conv's gating of the map, fused into the conv with the quantize after it) has its rows
    and columns as one loop, the whole plane of a channel contiguous in NCHW: at 7x7, its rows of 7 were
    vectors of 7, and EfficientNet's 48 -> 1152 one took 131 us where the float conv takes 25.

    Such a conv, too few multiply-adds to share between cores, computes its blocks of output channels in
    parallel where its epilogues have outputs enough (schedule_channel_lanes); with fewer blocks than cores,
    `rows_in_parallel` shares each epilogue's channels instead: on one core, the DB detector's 24 -> 96 one at
    160x160 took 222 us on two threads against 229 on one."""
    if row is not None and _ends_past_output(sch.copy(), block, loop):
        loop = row
    local, consumers = _computed_at(sch, block, loop)
    sch.compute_inline(local)
    most = 0
    for consumer in consumers:
        below = _loops_below(sch, consumer, loop)
        most = max(most, iterations(sch, below))
        if broadcast and len(below) > 2:
            # the plane of one channel, or a plane of one pixel: the channels
            below = [below[0], sch.fuse(*below[1:])] if iterations(sch, below[1:]) > 1 else [sch.fuse(*below)]
        if rows_in_parallel:
            _parallel_rows(sch, below)
        vectorise_row(sch, consumer, lanes)
    return most


def _loops_below(sch, block, loop) -> list:
    """The block's loops nested inside `loop`."""
    loops = sch.get_loops(block)
    depth = next(i for i, candidate in enumerate(loops) if sch.get(candidate).same_as(sch.get(loop)))
    return loops[depth + 1 :]


def _parallel_rows(sch, loops) -> None:
    """All but the innermost of an epilogue's own `loops` fused and run in parallel, where it has outputs
    enough to share."""
    rows = loops[:-1]
    if rows and iterations(sch, loops) >= PARALLEL_MIN_BROADCAST:
        sch.parallel(sch.fuse(*rows) if len(rows) > 1 else rows[0])


def vectorise_row(sch, block, lanes: int) -> None:
    """The block's innermost loop vectorised `lanes` wide (one vector register of int32); one that is longer
    but not a whole number of vectors as whole vectors then one shorter vector (56 columns: 3 x 16 + 8).
    Vectorised whole instead, LLVM builds a wide vector's broadcasts from inserts, lane by lane (a 96-lane
    epilogue took a quarter of the classifier's largest depthwise conv with VNNI). The loop above the vector
    (the vectors of a row, or channels; up to 16) is unrolled: its loop and address arithmetic was a sixth of
    the epilogue's samples."""
    loops = sch.get_loops(block)
    innermost, columns = loops[-1], extent(sch, loops[-1])
    whole = columns // lanes * lanes
    if columns <= lanes:
        if len(loops) >= 2 and extent(sch, loops[-2]) <= 16:
            sch.unroll(loops[-2])
        sch.vectorize(innermost)
        return
    if whole != columns:
        if len(sch.get_child_blocks(innermost)) > 1:
            # one output channel: the epilogue has no loop of its own, only the conv's; TVM 0.27's loop_partition
            # crashed the process on such a loop (YOLOX's 96 -> 1 objectness conv at 13x13, 8 lanes)
            raise ValueError("the epilogue's innermost loop is the conv's too")
        innermost, tail = sch.loop_partition(innermost, factors=[whole, None])  # replaces the block
        sch.vectorize(tail)
    vectors, vector = sch.split(innermost, factors=[None, lanes])
    sch.vectorize(vector)
    if extent(sch, vectors) <= 16:
        sch.unroll(vectors)


def _computed_at(sch, block, loop):
    """The block's output staged and, with every block downstream of it, computed under `loop`: (stage,
    those blocks in order). Downstream of the consumers there is more only where the default schedule kept
    a block apart (a squeeze-and-excite gate, then the map it scales: default_schedule._gates_broadcast)."""
    local = sch.cache_write(block, 0, "global")
    sch.reverse_compute_at(local, loop)
    placed, waiting = [], list(sch.get_consumers(local))
    while waiting:
        consumer = waiting.pop(0)
        if any(sch.get(consumer).same_as(sch.get(done)) for done in placed):
            continue
        sch.reverse_compute_at(consumer, loop)
        placed.append(consumer)
        waiting += sch.get_consumers(consumer)
    return local, placed


def _ends_past_output(trial, block, loop) -> bool:
    """Whether the epilogue computed under `loop` would be predicated (tried on a copy of the schedule)."""
    _, consumers = _computed_at(trial, block, loop)
    return any(predicated(trial, consumer) for consumer in consumers)


def predicated(sch, block) -> bool:
    """Whether the block runs under a condition (a tile that ends past its output)."""
    import tvm
    from tvm.tirx import IntImm

    realize = tvm.get_global_func("s_tir.schedule.GetSBlockRealize")(sch, block)
    return not (isinstance(realize.predicate, IntImm) and int(realize.predicate) == 1)


# multiply-adds below which one thread is faster. Counted in outputs (2^18), it left a 512 -> 512 1x1 conv at 7x7
# (12.8 M, 98 us alone) on one core, and 2^14 outputs sent 8 -> 16 1x1 convs (0.3 M) to two, which took the
# bundled classifier from 0.32 to 0.36 ms; by multiply-adds, the classifier stays at 0.32 ms and that conv takes
# 50 us (VNNI, 2 cores)
PARALLEL_MIN_MACS = 1 << 21
PARALLEL_MIN_BROADCAST = 1 << 15  # outputs of a one-pixel conv's epilogue (epilogue_at)


def reduction_length(sch, group: int, *loops) -> int:
    """Multiply-adds per output: the product of the reduction loops' extents, `group` per step of the
    innermost group loop (not among `loops`)."""
    return group * iterations(sch, loops)


def parallel(sch, instruction: Instruction, cores: int, macs: int, *loops) -> None:
    """The conv's outer loops, and the packing's, run in parallel when the conv has `macs` multiply-adds
    enough."""
    if cores > 1 and macs >= PARALLEL_MIN_MACS:
        sch.parallel(sch.fuse(*loops))
        b, groups, rows = sch.get_loops(sch.get_sblock(instruction.pack_block))[:3]
        sch.reorder(rows, groups)  # a band of rows per core, the rows its padding wrote (schedule_column_lanes)
        sch.parallel(sch.fuse(b, rows, groups))
        if instruction.pad_block in block_names(sch):
            sch.parallel(sch.fuse(*sch.get_loops(sch.get_sblock(instruction.pad_block))[:2]))


def tensorize_reduction(sch, block, reduction_outer, lanes, intrinsic: str) -> None:
    init = sch.decompose_reduction(block, reduction_outer)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(lanes, intrinsic)


def extent(sch, loop) -> int:
    return int(sch.get(loop).extent)


def iterations(sch, loops) -> int:
    """How many times the body of the nest of `loops` runs."""
    return int(np.prod([extent(sch, loop) for loop in loops]))


def largest_divisor(n: int, limit: int) -> int:
    return next(d for d in range(min(n, limit), 0, -1) if n % d == 0)


_registered: set[str] = set()


def register_intrinsics(instruction: Instruction, llvm_intrinsic: str) -> dict[str, str]:
    """The instruction's two tensor intrinsics, registered once; {reduction block: intrinsic name}:
    - channel lanes: c[channel] += sum_k data[k] * weight[channel, k], the data's group broadcast;
    - column lanes: c[column] += sum_k data[column, k] * weight[k], the weight's group broadcast.
    `llvm_intrinsic` takes (accumulators, data, weights) as <lanes x i32>, <group lanes x data>, <group lanes x
    weight>, or without the accumulators where the instruction does not accumulate (its sums are added)."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    lanes, dtype, group, wtype = instruction.lanes, instruction.data_dtype, instruction.group, instruction.weight_dtype
    names = {
        instruction.block: f"modelbuild_{instruction.name}_{lanes}x{group}",
        instruction.column_block: f"modelbuild_{instruction.name}_columns_{lanes}x{group}",
    }
    if instruction.name in _registered:
        return names
    op = T.llvm_lookup_intrinsic_id(llvm_intrinsic)
    data_vector, weight_vector, accumulators = f"{dtype}x{lanes * group}", f"{wtype}x{lanes * group}", f"int32x{lanes}"
    data_word, weight_word = f"{dtype}x{group}", f"{wtype}x{group}"  # 32 bits each

    def broadcast_word(word, lanes, vector):
        # an expression, never assigned to a name: TVMScript makes a name a 1-element "local" buffer, which
        # TVM allocates from its workspace pool at every iteration of the loop around the tensorised one
        return T.reinterpret(T.broadcast(T.reinterpret(word, dtype="int32"), lanes), dtype=vector)

    def dot(c, data, weights):
        if instruction.accumulates:
            return T.call_llvm_pure_intrin(op, c.vload([0], dtype=accumulators), data, weights, dtype=accumulators)
        return c.vload([0], dtype=accumulators) + T.call_llvm_pure_intrin(op, data, weights, dtype=accumulators)

    @T.prim_func(s_tir=True)
    def channels_description(
        a: T.Buffer((group,), dtype, offset_factor=1),
        b: T.Buffer((lanes, group), wtype, offset_factor=1),
        c: T.Buffer((lanes,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:group], b[0:lanes, 0:group])
            T.writes(c[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, group):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        c[vi] = c[vi] + T.cast(a[vk], "int32") * T.cast(b[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def channels_implementation(
        a: T.Buffer((group,), dtype, offset_factor=1),
        b: T.Buffer((lanes, group), wtype, offset_factor=1),
        c: T.Buffer((lanes,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:group], b[0:lanes, 0:group])
            T.writes(c[0:lanes])
            c[T.ramp(T.int32(0), 1, lanes)] = dot(
                c, broadcast_word(a.vload([0], data_word), lanes, data_vector), b.vload([0, 0], dtype=weight_vector)
            )

    @T.prim_func(s_tir=True)
    def columns_description(
        a: T.Buffer((lanes, group), dtype, offset_factor=1),
        b: T.Buffer((group,), wtype, offset_factor=1),
        c: T.Buffer((lanes,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:lanes, 0:group], b[0:group])
            T.writes(c[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, group):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        c[vi] = c[vi] + T.cast(a[vi, vk], "int32") * T.cast(b[vk], "int32")

    @T.prim_func(s_tir=True)
    def columns_implementation(
        a: T.Buffer((lanes, group), dtype, offset_factor=1),
        b: T.Buffer((group,), wtype, offset_factor=1),
        c: T.Buffer((lanes,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:lanes, 0:group], b[0:group])
            T.writes(c[0:lanes])
            c[T.ramp(T.int32(0), 1, lanes)] = dot(
                c, a.vload([0, 0], dtype=data_vector), broadcast_word(b.vload([0], weight_word), lanes, weight_vector)
            )

    TensorIntrin.register(names[instruction.block], channels_description, channels_implementation, override=True)
    TensorIntrin.register(names[instruction.column_block], columns_description, columns_implementation, override=True)
    _registered.add(instruction.name)
    return names


def vectorize_packing(sch, instruction: Instruction) -> None:
    """The pack block as TVM vectorises it: `lanes` columns x `group` channels per vector where the columns
    come in whole vectors (LLVM interleaves the rows: zips on Arm), else the group of one column."""
    pack = sch.get_sblock(instruction.pack_block)
    *_, q, ci = sch.get_loops(pack)
    if extent(sch, q) % instruction.lanes == 0:
        _, columns = sch.split(q, factors=[None, instruction.lanes])
        sch.vectorize(sch.fuse(columns, ci))
    else:
        sch.vectorize(ci)


def schedule_padding(sch, instruction: Instruction) -> None:
    """Padding a row at a time in vectors of at most 64 columns (vectorise_pad); packing `lanes` columns x
    `group` channels per shuffle (tensorize_packing). Packed element by element, the 3-channel stride-2 first
    conv of the classifier spent as long packing its input as computing (VNNI)."""
    vectorise_pad(sch, instruction)
    tensorize_packing(sch, instruction)


def vectorise_pad(sch, instruction: Instruction, vector: int = PAD_VECTOR) -> None:
    """The pad block's rows as `vectorise_padded_rows` writes them: its input columns are in its annotation."""
    pad = sch.get_sblock(instruction.pad_block)
    left, width = (int(v) for v in sch.get(pad).annotations["columns"])
    vectorise_padded_rows(sch, pad, left=left, width=width, vector=vector)


def tensorize_packing(sch, instruction: Instruction) -> None:
    """The pack block, `lanes` columns (of one stride phase) x `group` channels of the padded rows per
    shuffle (pack_intrinsic). Vectorised by TVM instead, the pack of AVX2's int16 pairs interleaved lane by
    lane: a 96 -> 24 3x3 conv at 160x160 spent over half its time packing."""
    pack = sch.get_sblock(instruction.pack_block)
    *_, q, _ = sch.get_loops(pack)
    _, lanes = sch.split(q, factors=[None, instruction.lanes])
    sch.tensorize(lanes, pack_intrinsic(instruction, int(sch.get(pack).annotations["stride"])))


_registered_packing: set[str] = set()


def pack_intrinsic(instruction: Instruction, stride: int) -> str:
    """The tensor intrinsic that packs `lanes` columns (of one stride phase) x `group` channels of the padded
    rows into one vector, registered once per instruction and stride: a load per row and one shuffle (LLVM
    picks unpacks or permutes)."""
    name = f"modelbuild_{instruction.name}_pack_s{stride}"
    if name in _registered_packing:
        return name
    from tvm import tirx
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    lanes, group, dtype = instruction.lanes, instruction.group, instruction.data_dtype
    span, loaded = (lanes - 1) * stride + 1, lanes * stride  # columns used, columns loaded per channel
    order = [tirx.IntImm("int32", ci * loaded + i * stride) for i in range(lanes) for ci in range(group)]

    @T.prim_func(s_tir=True)
    def description(rows: T.handle, packed: T.handle) -> None:
        row_stride = T.int64()
        src = T.match_buffer(rows, (group, span), dtype, strides=[row_stride, 1], offset_factor=1)
        out = T.match_buffer(packed, (lanes, group), dtype, offset_factor=1)
        with T.sblock("root"):
            T.reads(src[0:group, 0:span])
            T.writes(out[0:lanes, 0:group])
            for i, c in T.grid(lanes, group):
                with T.sblock("pack"):
                    vi, vc = T.axis.remap("SS", [i, c])
                    out[vi, vc] = src[vc, vi * stride]

    @T.prim_func(s_tir=True)
    def implementation(rows: T.handle, packed: T.handle) -> None:
        row_stride = T.int64()
        src = T.match_buffer(rows, (group, span), dtype, strides=[row_stride, 1], offset_factor=1)
        out = T.match_buffer(packed, (lanes, group), dtype, offset_factor=1)
        with T.sblock("root"):
            T.reads(src[0:group, 0:span])
            T.writes(out[0:lanes, 0:group])
            out[0, T.ramp(T.int64(0), 1, lanes * group)] = T.Shuffle(
                [src.vload([row, 0], f"{dtype}x{loaded}") for row in range(group)], order
            )

    TensorIntrin.register(name, description, implementation, override=True)
    _registered_packing.add(name)
    return name
