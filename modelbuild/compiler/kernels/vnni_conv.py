"""int8 conv2d on x86 CPUs with AVX-512 VNNI: one vpdpbusd multiplies 4 uint8 by 4 int8 and adds the sums
into 16 int32 lanes, 64 multiply-adds an instruction where the plain integer loop does 16 with vpmulld.

The instruction wants its operands in a shape NCHW does not have, so the conv is computed in packed layouts:
- data: uint8, [N, C/4, H, stride, W/stride, 4] (4 input channels side by side, padded, and for strided convs
  the columns split by phase, so that the columns one weight meets are contiguous). Data that needs padding
  is padded row by row first, then packed 16 columns x 4 channels per shuffle; other data in one pass;
- weights: int8, [O/16, C/4, KH, KW, 16, 4], packed once at compile time (they are constants);
- accumulators: int32, in one of two forms, chosen per conv:
  - column lanes, when the output width is a multiple of 16 or rounding it up to one wastes at most 15%
    (29 -> 32, 57 -> 64; the extra columns are computed and dropped): a vector holds 16 neighbouring output
    columns of one channel; each vpdpbusd takes 16 columns x 4 channels of data and one channel's 4 weights
    broadcast. The accumulators are NCHW already, so the epilogue reads them with plain vector loads;
  - channel lanes, otherwise: a vector holds 16 output channels of one column; each vpdpbusd takes one
    column's 4 channels broadcast and 16 channels' weights. Any width fits without padding, but the epilogue
    must transpose the accumulators back to NCHW (vector gathers), which cost as much as the reduction on
    the classifier's 1x1 convs: column lanes ran them 2.2-2.4x faster.

vpdpbusd multiplies *unsigned* data. int8 data (the symmetric scheme) is shifted by +128 while packing, and
128 * sum(w) is subtracted per output channel afterwards, which is exact; padding is packed as the shifted
zero. The result is bit-identical to the plain int8 x int8 -> int32 conv it replaces.

TVM 0.27 ships a VNNI tensor intrinsic (tvm.s_tir.tensor_intrin.x86), but it calls
llvm.x86.avx512.vpdpbusd.512 with the operand types of older LLVMs and fails LLVM's verifier; this module
registers its own with <64 x i8> operands.
"""

from __future__ import annotations

import numpy as np

from modelbuild.compiler.integer_ops import constant_value

BLOCK = "vnni_conv"  # the reduction block (channel lanes); default_schedule recognises kernels by BLOCKS
COLUMN_BLOCK = "vnni_conv_by_column"  # the reduction block in column lanes
BLOCKS = (BLOCK, COLUMN_BLOCK)
PACK_BLOCK = "vnni_pack"
PAD_BLOCK = "vnni_pad"
PAD_VECTOR = 64  # padded bytes written per vector
STAGING_BLOCKS = (PAD_BLOCK, PACK_BLOCK)  # scheduled here, so the default schedule must not inline them
LANES = 16  # int32 accumulators of one vpdpbusd
GROUP = 4  # uint8 x int8 products summed into each lane
ROW_BLOCK = 16  # channel lanes: output columns whose accumulators stay in registers while the weights stream by
PARALLEL_MIN_WORK = 1 << 14  # output vectors below which one thread is faster
INTRINSICS = {BLOCK: "modelbuild_vnni_16x4", COLUMN_BLOCK: "modelbuild_vnni_columns_16x4"}


def supported(target) -> bool:
    """Whether the target has AVX-512 VNNI (Cascade Lake, Ice Lake, Sapphire Rapids, Zen 4 and later)."""
    from tvm.target import codegen

    return target is not None and target.kind.name == "llvm" and bool(
        codegen.target_has_features("avx512vnni", target))


def legalize(bb, call):
    """An eligible int8 conv2d (see `eligible`) in packed VNNI form."""
    from tvm import relax

    weight = constant_value(call.args[1])
    packed, correction = pack_weights(weight, shifted=str(call.args[0].ty.dtype) == "int8")
    attrs = call.attrs
    geometry = {"strides": [int(s) for s in attrs.strides], "padding": [int(p) for p in attrs.padding],
                "dilation": [int(d) for d in attrs.dilation], "kernel": weight.shape[2:], "channels": weight.shape[0]}
    return bb.call_te(lambda x, w, c: _compute(x, w, c, **geometry), call.args[0],
                      relax.const(packed, "int8"), relax.const(correction, "int32"), primfunc_name_hint="conv2d_vnni")


def eligible(call) -> bool:
    """An ungrouped NCHW conv of 8-bit data with constant int8 weights into int32, of static shape."""
    from tvm.ir import Constant

    attrs, data, weight = call.attrs, call.args[0], call.args[1]
    return (str(attrs.out_dtype) == "int32" and int(attrs.groups) == 1
            and (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout))
            == ("NCHW", "OIHW", "NCHW")
            and str(data.ty.dtype) in ("int8", "uint8") and isinstance(weight, Constant)
            and str(weight.ty.dtype) == "int8" and static_shape(data.ty.shape))


def static_shape(shape) -> bool:
    try:
        [int(d) for d in shape.values]
        return True
    except (AttributeError, TypeError, ValueError):
        return False


def pack_weights(weight: np.ndarray, *, shifted: bool) -> tuple[np.ndarray, np.ndarray]:
    """OIHW int8 weights as [O/16, C/4, KH, KW, 16, 4] (zero-padded), and what to subtract per output channel:
    128 * sum(w) when the data is shifted from int8 to uint8, else 0."""
    out_ch, in_ch, kh, kw = weight.shape
    padded = np.zeros((ceil_div(out_ch, LANES) * LANES, ceil_div(in_ch, GROUP) * GROUP, kh, kw), np.int8)
    padded[:out_ch, :in_ch] = weight
    packed = padded.reshape(-1, LANES, padded.shape[1] // GROUP, GROUP, kh, kw).transpose(0, 2, 4, 5, 1, 3)
    sums = weight.astype(np.int64).reshape(out_ch, -1).sum(axis=1)
    correction = (128 * sums if shifted else np.zeros(out_ch, np.int64)).astype(np.int32)
    return np.ascontiguousarray(packed), correction


# of a row's columns computed only to be dropped, in column lanes: the generated ResNet's widths 57 and 29
# (12%, 10%) went from 2.09x the float library to 0.8x; the detector's 40 -> 48 (20%) measured 0.62x
# of float against 0.57x in channel lanes
MAX_PADDED_SHARE = 0.15


def column_lanes(out_width: int) -> bool:
    """Whether a conv of this output width is computed with output columns in the vector lanes, the row
    rounded up to whole vectors and the extra columns dropped, rather than output channels in the lanes
    (any width, but the accumulators must be transposed back with gathers)."""
    return lanes_width(out_width) <= out_width * (1 + MAX_PADDED_SHARE)


def lanes_width(out_width: int) -> int:
    return ceil_div(out_width, LANES) * LANES


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def shifted_or_padding(load, row, column, *, left: int, height: int, width: int, shift: int, flat_row,
                       rows: int, vector: int = PAD_VECTOR):
    """One byte of a padded row: the input at (row, column - left) shifted to uint8, or the shifted zero
    outside the input. `column` counts from the padded row's start, which the pad's vectors are aligned to;
    `flat_row` is the row's index among the input's `rows` rows of `width` bytes (batch, channel and row).

    A padded row is written `vector` columns at a time, each vector one contiguous load masked by a select,
    and those loads must never leave the input's memory. A clamped index does not keep them in: TVM's
    simplifier drops the clamp inside the select's true branch (it knows the condition holds there), and a
    vector select loads every lane. On real images the detector's first depthwise conv read the row above
    its input's first row, before the buffer, and crashed. Reading a neighbouring row of the same input is
    harmless (the select drops those lanes), so a vector is loaded contiguously when its bytes lie within
    the input as a whole: a condition on the vector, not the lane (an if_then_else, which branches). Only
    the first and last vectors of the whole input can fail it; they load lane by lane at clamped indices,
    masked arithmetically, where no condition lets the simplifier drop the clamp."""
    from tvm import tirx

    start = flat_row * width + tirx.floordiv(column, vector) * vector - left  # the vector's first byte in x
    within = tirx.all(start >= 0, start + vector <= rows * width)
    column = column - left
    inside = tirx.all(row >= 0, row < height, column >= 0, column < width)
    direct = tirx.Select(inside, (load(row, column).astype("int32") + shift).astype("uint8"),
                         tirx.const(shift, "uint8"))
    clamped = load(tirx.max(tirx.min(row, height - 1), 0), tirx.max(tirx.min(column, width - 1), 0))
    edge = (inside.astype("int32") * clamped.astype("int32") + shift).astype("uint8")
    return tirx.if_then_else(within, direct, edge)


def _compute(x, w, correction, *, strides, padding, dilation, kernel, channels):
    """The packed conv as TE: pad (and shift) rows of all channels, pack (group channels by 4, split columns by
    stride phase), reduce, unpack with the correction."""
    from tvm import te, tirx

    n, in_ch, height, width = (int(d) for d in x.shape)
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilation
    top, left, bottom, right = padding if len(padding) == 4 else (*padding, *padding)
    out_h = (height + top + bottom - dh * (kh - 1) - 1) // sh + 1
    out_w = (width + left + right - dw * (kw - 1) - 1) // sw + 1
    groups_in = ceil_div(in_ch, GROUP)
    shift = 128 if str(x.dtype) == "int8" else 0

    def pad(b, row, c, column):
        value = shifted_or_padding(lambda r, q: x[b, c, r, q], row - top, column, left=left, height=height,
                                   width=width, shift=shift, flat_row=(b * in_ch + c) * height + row - top,
                                   rows=n * in_ch * height)
        if in_ch % GROUP == 0:
            return value
        # the channels that fill the last group of 4 are the shifted zero, loading nothing: a load at a
        # clamped channel under a select of c < in_ch lost its clamp to the simplifier, as in
        # shifted_or_padding, and the stem conv of 3 channels read a whole plane past its input
        return tirx.if_then_else(c < in_ch, value, tirx.const(shift, "uint8"))

    def tap(b, rc, h, col, rh, rw, ri):
        """The packed data that weight tap (rh, rw) meets at output (h, col): column col * sw + rw * dw."""
        return packed[b, rc, h * sh + rh * dh, tirx.floormod(rw * dw, sw), col + tirx.floordiv(rw * dw, sw), ri]

    by_column = column_lanes(out_w)
    computed_w = lanes_width(out_w) if by_column else out_w  # columns computed; the extra ones are dropped
    span = computed_w + (kw - 1) * dw // sw  # packed columns of one phase that the outputs reach
    if sw == 1 and in_ch % GROUP == 0 and not any((top, left, bottom, right)) and computed_w == out_w:
        # nothing to pad: one pass, which LLVM vectorises well enough (under 1 us for the classifier's 1x1s)
        packed = te.compute((n, groups_in, height, 1, span, GROUP),
                            lambda b, cg, row, phase, q, ci: (x[b, cg * GROUP + ci, row, q].astype("int32")
                                                              + shift).astype("uint8"), name=PACK_BLOCK)
    else:
        # in whole vectors for the packing intrinsic, whose loads of 16 * stride columns need rows that wide
        span = ceil_div(span, LANES) * LANES
        padded_w = ceil_div(max(width + left + right, (span + 1) * sw), PAD_VECTOR) * PAD_VECTOR
        # [N, H, C, W]: the 4 channels a packed vector interleaves are neighbouring rows of one 2-D region
        padded = te.compute((n, height + top + bottom, groups_in * GROUP, padded_w), pad, name=PAD_BLOCK)
        packed = te.compute((n, groups_in, height + top + bottom, sw, span, GROUP),
                            lambda b, cg, row, phase, q, ci: padded[b, row, cg * GROUP + ci, q * sw + phase],
                            name=PACK_BLOCK, attrs={"stride": sw})  # the schedule picks the intrinsic by it
    rc, rh, rw, ri = (te.reduce_axis((0, e), name) for e, name in
                      ((groups_in, "rc"), (kh, "rh"), (kw, "rw"), (GROUP, "ri")))

    def product(b, o_block, o_lane, h, col):
        return te.sum(tap(b, rc, h, col, rh, rw, ri).astype("int32")
                      * w[o_block, rc, rh, rw, o_lane, ri].astype("int32"), axis=[rc, rh, rw, ri])

    if by_column:
        acc = te.compute((n, ceil_div(channels, LANES) * LANES, out_h, computed_w),
                         lambda b, o, h, col: product(b, o // LANES, o % LANES, h, col), name=COLUMN_BLOCK)
        unpacked = lambda b, o, h, col: acc[b, o, h, col]
    else:
        acc = te.compute((n, ceil_div(channels, LANES), out_h, out_w, LANES),
                         lambda b, ob, h, col, oi: product(b, ob, oi, h, col), name=BLOCK)
        unpacked = lambda b, o, h, col: acc[b, o // LANES, h, col, o % LANES]
    return te.compute((n, channels, out_h, out_w),
                      lambda b, o, h, col: unpacked(b, o, h, col) - correction[o], name="vnni_unpack")


def schedule(sch, cores: int) -> None:
    """Tensorise the packed conv's reduction with vpdpbusd; everything after it (the unpack, the rescale and
    whatever FuseOps put behind) is computed per register block while the accumulators are hot."""
    _register_intrinsics()
    names = {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))}
    if COLUMN_BLOCK in names:
        _schedule_column_lanes(sch, cores)
    else:
        _schedule_channel_lanes(sch, cores)
    if PAD_BLOCK in names:
        _schedule_packing(sch)


def _schedule_packing(sch) -> None:
    """Padding a row at a time, one vector per 64 columns; packing 16 columns x 4 channels per shuffle.
    Packed element by element, the 3-channel stride-2 first conv of the classifier spent as long packing
    its input as computing."""
    pad = sch.get_sblock(PAD_BLOCK)
    sch.vectorize(sch.split(sch.get_loops(pad)[-1], factors=[None, PAD_VECTOR])[1])
    pack = sch.get_sblock(PACK_BLOCK)
    *_, q, _ = sch.get_loops(pack)
    _, lanes = sch.split(q, factors=[None, LANES])
    sch.tensorize(lanes, _pack_intrinsic(int(sch.get(pack).annotations["stride"])))


def _schedule_channel_lanes(sch, cores: int) -> None:
    block = sch.get_sblock(BLOCK)
    b, ob, h, col, oi, rc, rh, rw, ri = sch.get_loops(block)
    columns = extent(sch, col)
    col_outer, col_inner = sch.split(col, factors=[None, largest_divisor(columns, ROW_BLOCK)])
    sch.reorder(b, ob, h, col_outer, rc, rh, rw, col_inner, oi, ri)
    epilogue_at(sch, block, col_outer)
    work = extent(sch, b) * extent(sch, ob) * extent(sch, h) * columns
    _parallel(sch, cores, work, b, ob, h)
    sch.unroll(col_inner)
    tensorize_reduction(sch, block, rc, oi, INTRINSICS[BLOCK])


def _schedule_column_lanes(sch, cores: int) -> None:
    block = sch.get_sblock(COLUMN_BLOCK)
    b, o, h, col, rc, rh, rw, ri = sch.get_loops(block)
    ob, oi = sch.split(o, factors=[None, LANES])
    col_outer, col_inner = sch.split(col, factors=[None, LANES])
    sch.reorder(b, ob, h, col_outer, rc, rh, rw, oi, col_inner, ri)
    epilogue_at(sch, block, col_outer)
    work = extent(sch, b) * extent(sch, ob) * extent(sch, h) * extent(sch, col_outer) * LANES
    _parallel(sch, cores, work, b, ob, h)
    sch.unroll(oi)
    tensorize_reduction(sch, block, rc, col_inner, INTRINSICS[COLUMN_BLOCK])


def epilogue_at(sch, block, loop) -> None:
    """The unpack and every fused consumer computed under `loop`, reading the accumulators where they are;
    their innermost loop (output columns, contiguous in NCHW) vectorised, one vector register wide: LLVM
    builds a broadcast to a wider vector (96 lanes for 6 vectors of columns) from inserts, lane by lane, which
    took a quarter of the time of the classifier's largest depthwise conv. The loop above it (channels or
    vectors, up to 16) is unrolled: its loop and address arithmetic was a sixth of the epilogue's samples."""
    local = sch.cache_write(block, 0, "global")
    sch.reverse_compute_at(local, loop)
    consumers = sch.get_consumers(local)
    for consumer in consumers:
        sch.reverse_compute_at(consumer, loop)
    sch.compute_inline(local)
    for consumer in consumers:
        innermost = sch.get_loops(consumer)[-1]
        if extent(sch, innermost) > LANES and extent(sch, innermost) % LANES == 0:
            innermost = sch.split(innermost, factors=[None, LANES])[1]
        sch.vectorize(innermost)
        loops = sch.get_loops(consumer)
        if len(loops) >= 2 and extent(sch, loops[-2]) <= LANES:
            sch.unroll(loops[-2])


def _parallel(sch, cores: int, work: int, *loops) -> None:
    """The conv's outer loops, and the packing's, run in parallel when there are `work` output vectors enough."""
    if cores > 1 and work >= PARALLEL_MIN_WORK:
        sch.parallel(sch.fuse(*loops))
        sch.parallel(sch.fuse(*sch.get_loops(sch.get_sblock(PACK_BLOCK))[:3]))
        if PAD_BLOCK in {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))}:
            sch.parallel(sch.fuse(*sch.get_loops(sch.get_sblock(PAD_BLOCK))[:2]))


def tensorize_reduction(sch, block, reduction_outer, lanes, intrinsic: str) -> None:
    init = sch.decompose_reduction(block, reduction_outer)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(lanes, intrinsic)


def extent(sch, loop) -> int:
    return int(sch.get(loop).extent)


def largest_divisor(n: int, limit: int) -> int:
    return next(d for d in range(min(n, limit), 0, -1) if n % d == 0)


_registered = False
_registered_packing: set[str] = set()


def _register_intrinsics() -> None:
    global _registered
    if _registered:
        return
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    vpdpbusd = T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512")

    # channel lanes: c[channel] += sum_k data[k] * weight[channel, k], the data's 4 bytes broadcast
    @T.prim_func(s_tir=True)
    def channels_description(a: T.Buffer((4,), "uint8", offset_factor=1),
                             b: T.Buffer((16, 4), "int8", offset_factor=1),
                             c: T.Buffer((16,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(c[0:16], a[0:4], b[0:16, 0:4])
            T.writes(c[0:16])
            for i in T.serial(0, 16):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        c[vi] = c[vi] + T.cast(a[vk], "int32") * T.cast(b[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def channels_implementation(a: T.Buffer((4,), "uint8", offset_factor=1),
                                b: T.Buffer((16, 4), "int8", offset_factor=1),
                                c: T.Buffer((16,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(c[0:16], a[0:4], b[0:16, 0:4])
            T.writes(c[0:16])
            a_word = T.reinterpret(a.vload([0], "uint8x4"), dtype="int32")
            c[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                vpdpbusd, c.vload([0], dtype="int32x16"),
                T.reinterpret(T.broadcast(a_word, 16), dtype="uint8x64"), b.vload([0, 0], dtype="int8x64"),
                dtype="int32x16")

    # column lanes: c[column] += sum_k data[column, k] * weight[k], the weight's 4 bytes broadcast
    @T.prim_func(s_tir=True)
    def columns_description(a: T.Buffer((16, 4), "uint8", offset_factor=1),
                            b: T.Buffer((4,), "int8", offset_factor=1),
                            c: T.Buffer((16,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(c[0:16], a[0:16, 0:4], b[0:4])
            T.writes(c[0:16])
            for i in T.serial(0, 16):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        c[vi] = c[vi] + T.cast(a[vi, vk], "int32") * T.cast(b[vk], "int32")

    @T.prim_func(s_tir=True)
    def columns_implementation(a: T.Buffer((16, 4), "uint8", offset_factor=1),
                               b: T.Buffer((4,), "int8", offset_factor=1),
                               c: T.Buffer((16,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(c[0:16], a[0:16, 0:4], b[0:4])
            T.writes(c[0:16])
            b_word = T.reinterpret(b.vload([0], "int8x4"), dtype="int32")
            c[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                vpdpbusd, c.vload([0], dtype="int32x16"), a.vload([0, 0], dtype="uint8x64"),
                T.reinterpret(T.broadcast(b_word, 16), dtype="int8x64"), dtype="int32x16")

    TensorIntrin.register(INTRINSICS[BLOCK], channels_description, channels_implementation, override=True)
    TensorIntrin.register(INTRINSICS[COLUMN_BLOCK], columns_description, columns_implementation, override=True)
    _registered = True


def _pack_intrinsic(stride: int) -> str:
    """The tensor intrinsic that packs 16 columns (of one stride phase) x 4 channels of the padded rows into
    one 64-byte vector, registered once per stride: four row loads and one shuffle (LLVM picks unpacks or
    vpermt2b)."""
    name = f"modelbuild_vnni_pack_s{stride}"
    if name in _registered_packing:
        return name
    from tvm import tirx
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    span, loaded = (LANES - 1) * stride + 1, LANES * stride  # columns used, columns loaded per channel
    order = [tirx.IntImm("int32", ci * loaded + i * stride) for i in range(LANES) for ci in range(GROUP)]

    @T.prim_func(s_tir=True)
    def description(rows: T.handle, packed: T.handle) -> None:
        row_stride = T.int64()
        src = T.match_buffer(rows, (4, span), "uint8", strides=[row_stride, 1], offset_factor=1)
        out = T.match_buffer(packed, (16, 4), "uint8", offset_factor=1)
        with T.sblock("root"):
            T.reads(src[0:4, 0:span])
            T.writes(out[0:16, 0:4])
            for i, c in T.grid(16, 4):
                with T.sblock("pack"):
                    vi, vc = T.axis.remap("SS", [i, c])
                    out[vi, vc] = src[vc, vi * stride]

    @T.prim_func(s_tir=True)
    def implementation(rows: T.handle, packed: T.handle) -> None:
        row_stride = T.int64()
        src = T.match_buffer(rows, (4, span), "uint8", strides=[row_stride, 1], offset_factor=1)
        out = T.match_buffer(packed, (16, 4), "uint8", offset_factor=1)
        with T.sblock("root"):
            T.reads(src[0:4, 0:span])
            T.writes(out[0:16, 0:4])
            out[0, T.ramp(T.int64(0), 1, 64)] = T.Shuffle(
                [src.vload([0, 0], f"uint8x{loaded}"), src.vload([1, 0], f"uint8x{loaded}"),
                 src.vload([2, 0], f"uint8x{loaded}"), src.vload([3, 0], f"uint8x{loaded}")], order)

    TensorIntrin.register(name, description, implementation, override=True)
    _registered_packing.add(name)
    return name

