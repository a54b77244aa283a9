"""int8 depthwise conv2d on x86 CPUs with AVX-512 VNNI and VBMI: four taps of a kernel row in one vpdpbusd.

A depthwise conv has no channel sum for vpdpbusd's groups of four (vnni_conv.py sums input channels there), so
the four products of a lane are four neighbouring taps of one kernel row instead: lane i of an output vector
(16 neighbouring output columns) needs input columns i * stride + k * dilation for k = 0..3. One vpermb
gathers those 64 bytes from one load of the padded input row (32 bytes where they fit, else 64), in a
register, with a constant index, and one vpdpbusd multiplies them by the row's 4 weights (broadcast) into 16
int32 accumulators. A 5x5 kernel takes 10 vpdpbusd per output vector (two groups of 4 per row, the last one
padded with zero weights) where the float loop takes 25 multiply-adds; 3x3 takes 3 against 9.

As in vnni_conv.py, int8 data is shifted by +128 while padding (vpdpbusd multiplies unsigned data), and
128 * sum(w) is subtracted per channel afterwards: the result is bit-identical to the int8 x int8 -> int32
conv it replaces. A padded row is as wide as the padded input (in whole 64-byte vectors), not as the loads:
a row's last loads read on into the row below it, in lanes that are dropped or taps whose weight is zero,
and rows of padding below the last keep every load inside the buffer.

Eligible: NCHW depthwise convs (one input channel per output channel) of 8-bit data and constant int8
weights whose 16 lanes x 4 taps span at most 64 input columns (stride * 15 + dilation * 3 < 64). An output
width that is not a whole number of vectors is computed rounded up and the extra columns dropped: a 7-wide
row costs a 16-wide one, which still beats the float-accumulated kernel that took these convs before (a
MobileNet's depthwise convs at 56, 28, 14 and 7 columns ran at 5 GFLOP/s there). vpermb is AVX-512 VBMI:
Ice Lake, Sapphire Rapids, Zen 4 and later (not Cascade Lake, which has VNNI without it).
"""

from __future__ import annotations

import numpy as np

from modelbuild.compiler.integer_ops import constant_value
from modelbuild.compiler.kernels.packed_conv import (
    ceil_div,
    epilogue_at,
    extent,
    largest_divisor,
    padded,
    static_shape,
    tensorize_reduction,
    vectorise_padded_rows,
)

BLOCK = "vnni_depthwise"
PAD_BLOCK = "vnni_depthwise_pad"
LANES = 16  # int32 accumulators of one vpdpbusd: 16 neighbouring output columns
GROUP = 4  # taps of a kernel row summed into each lane
WINDOW = 64  # bytes vpermb picks from
PAD_VECTOR = 64  # padded bytes written per vector
COLUMN_BLOCK = 8  # output vectors of a row accumulated together, each an independent vpdpbusd chain
# independent chains wanted at least, made up with neighbouring rows (a divisor of the height) where a row
# has fewer vectors: wanting 8, a 5x5 conv at 25x19 (2 vectors a row) took 1 row, 2 chains; wanting 10, 5
# rows: 0.58-0.72x with the taps unrolled. 16 were slower on every shape tried
CHAINS = 10
# output vectors below which one thread is faster: with 2^14, every depthwise conv of a 224x224 MobileNet ran on
# one core; 2^11 took them 0.55-0.66x (3x3 at 56x56: 79 -> 51 us, 5x5 at 14x14: 30 -> 19 us; 2 cores)
PARALLEL_MIN_WORK = 1 << 11


def supported(target) -> bool:
    """Whether the target has AVX-512 VNNI (vpdpbusd) and VBMI (vpermb)."""
    from tvm.target import codegen

    return (
        target is not None
        and target.kind.name == "llvm"
        and all(codegen.target_has_features(feature, target) for feature in ("avx512vnni", "avx512vbmi"))
    )


def eligible(call) -> bool:
    """A static NCHW depthwise conv of 8-bit data with constant int8 weights into int32 that fits the lanes."""
    from tvm.ir import Constant

    attrs, data, weight = call.attrs, call.args[0], call.args[1]
    if not (
        str(attrs.out_dtype) == "int32"
        and str(data.ty.dtype) in ("int8", "uint8")
        and (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout))
        == ("NCHW", "OIHW", "NCHW")
        and isinstance(weight, Constant)
        and str(weight.ty.dtype) == "int8"
        and static_shape(data.ty.shape)
    ):
        return False
    channels = int(data.ty.shape.values[1])
    out_channels, per_group = (int(d) for d in weight.ty.shape.values[:2])
    return (
        int(attrs.groups) == channels == out_channels
        and per_group == 1
        and fits_window(int(attrs.strides[1]), int(attrs.dilation[1]))
    )


def fits_window(stride: int, dilation: int) -> bool:
    """Whether the input columns of one output vector's 4-tap group lie within one 64-byte load."""
    return (LANES - 1) * stride + (GROUP - 1) * dilation < WINDOW


def load_width(stride: int, dilation: int) -> int:
    """Bytes loaded per 4-tap group of an output vector: 32 when its columns fit (stride 1), which keeps the
    padded rows shorter (the classifier's: 128 bytes, not 192); else the whole window."""
    return 32 if (LANES - 1) * stride + (GROUP - 1) * dilation < 32 else WINDOW


def pack_weights(weight: np.ndarray, *, shifted: bool) -> tuple[np.ndarray, np.ndarray]:
    """[C, 1, KH, KW] int8 weights as [C, KH, ceil(KW / 4), 4] (zero-padded taps), and what to subtract per
    channel: 128 * sum(w) when the data is shifted from int8 to uint8, else 0."""
    channels, _, kh, kw = weight.shape
    groups = ceil_div(kw, GROUP)
    packed = np.zeros((channels, kh, groups * GROUP), np.int8)
    packed[:, :, :kw] = weight[:, 0]
    sums = weight.astype(np.int64).reshape(channels, -1).sum(axis=1)
    correction = (128 * sums if shifted else np.zeros(channels, np.int64)).astype(np.int32)
    return packed.reshape(channels, kh, groups, GROUP), correction


def legalize(bb, call):
    """An eligible depthwise conv (see `eligible`) in VNNI form."""
    from tvm import relax

    weight = constant_value(call.args[1])
    packed, correction = pack_weights(weight, shifted=str(call.args[0].ty.dtype) == "int8")
    attrs = call.attrs
    geometry = {
        "strides": [int(s) for s in attrs.strides],
        "padding": [int(p) for p in attrs.padding],
        "dilation": [int(d) for d in attrs.dilation],
        "kernel": weight.shape[2:],
    }
    return bb.call_te(
        lambda x, w, c: _compute(x, w, c, **geometry),
        call.args[0],
        relax.const(packed, "int8"),
        relax.const(correction, "int32"),
        primfunc_name_hint="conv2d_vnni_depthwise",
    )


def _compute(x, w, correction, *, strides, padding, dilation, kernel):
    """Pad (and shift) the input rows, reduce over rows and 4-tap groups, subtract the correction."""
    from tvm import te

    n, channels, height, width = (int(d) for d in x.shape)
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilation
    top, left, bottom, right = padding if len(padding) == 4 else (*padding, *padding)
    out_h = (height + top + bottom - dh * (kh - 1) - 1) // sh + 1
    out_w = (width + left + right - dw * (kw - 1) - 1) // sw + 1
    lanes_w = ceil_div(out_w, LANES) * LANES  # columns computed: whole vectors, the extra ones dropped
    groups = ceil_div(kw, GROUP)
    # a padded row holds the padded input's columns only: a row's last loads read on into the rows below it,
    # in lanes that are dropped or taps whose weight is zero (rows as wide as those loads, 128 bytes for a
    # 14 -> 7 5x5 conv at stride 2, took it 3.4x the float kernel: 590 KB written for 50 KB of input)
    pitch = ceil_div(width + left + right, PAD_VECTOR) * PAD_VECTOR
    last_load = sw * (lanes_w - LANES) + (groups - 1) * GROUP * dw  # first column of a row's last load
    # bytes of a channel's padded rows that the last output row's last load reaches
    reach = ((out_h - 1) * sh + (kh - 1) * dh) * pitch + last_load + load_width(sw, dw)
    rows = max(ceil_div(reach, pitch), height + top + bottom)  # those past the input's padding are padding too
    shift = 128 if str(x.dtype) == "int8" else 0

    def pad(b, c, row, column):
        return padded(
            lambda r, q: x[b, c, r, q], row - top, column - left, height=height, width=width, shift=shift, dtype="uint8"
        )

    padded_rows = te.compute((n, channels, rows, pitch), pad, name=PAD_BLOCK, attrs={"columns": [left, width]})
    rh, rg, ri = (te.reduce_axis((0, e), name) for e, name in ((kh, "rh"), (groups, "rg"), (GROUP, "ri")))
    acc = te.compute(
        (n, channels, out_h, lanes_w),
        lambda b, c, h, col: te.sum(
            padded_rows[b, c, h * sh + rh * dh, col * sw + (rg * GROUP + ri) * dw].astype("int32")
            * w[c, rh, rg, ri].astype("int32"),
            axis=[rh, rg, ri],
        ),
        name=BLOCK,
        attrs={"stride": sw, "dilation": dw},
    )  # the schedule picks the intrinsic by them
    return te.compute(
        (n, channels, out_h, out_w),
        lambda b, c, h, col: acc[b, c, h, col] - correction[c],
        name="vnni_depthwise_unpack",
    )


def schedule(sch, cores: int) -> None:
    """Tensorise the reduction (vpermb + vpdpbusd per 16 columns and 4 taps), blocks of output vectors (of a
    row, or of neighbouring rows) accumulating together over every tap, unrolled; the epilogue computed per
    block while the accumulators are hot."""
    block = sch.get_sblock(BLOCK)
    b, c, h, col, rh, rg, ri = sch.get_loops(block)
    annotations = sch.get(block).annotations
    stride, dilation = int(annotations["stride"]), int(annotations["dilation"])
    col_outer, lanes = sch.split(col, factors=[None, LANES])
    vectors = extent(sch, col_outer)
    col_block, col_inner = sch.split(col_outer, factors=[None, largest_divisor(vectors, COLUMN_BLOCK)])
    # a row of fewer vectors than CHAINS is accumulated together with the rows below it: one vector per row
    # (14 columns) was one chain of dependent vpdpbusd, waiting on each one's latency
    rows = largest_divisor(extent(sch, h), ceil_div(CHAINS, extent(sch, col_inner)))
    h_outer, h_inner = sch.split(h, factors=[None, rows])
    sch.reorder(b, c, h_outer, col_block, rh, rg, h_inner, col_inner, lanes, ri)
    epilogue_at(sch, block, col_block, LANES, row=h_outer)
    pad = sch.get_sblock(PAD_BLOCK)
    pad_b, pad_c, _, _ = sch.get_loops(pad)
    left, width = (int(v) for v in sch.get(pad).annotations["columns"])
    vectorise_padded_rows(sch, pad, left=left, width=width, vector=PAD_VECTOR)
    if cores > 1 and extent(sch, b) * extent(sch, c) * extent(sch, h_outer) * rows * vectors >= PARALLEL_MIN_WORK:
        sch.parallel(sch.fuse(b, c, h_outer))
        sch.parallel(sch.fuse(pad_b, pad_c))
    sch.unroll(h_inner)
    sch.unroll(col_inner)
    # the taps unrolled too, so the accumulators stay in registers from the first tap to the epilogue: with
    # CHAINS, 5x5 at 100x76 0.81-0.83x, at 25x19 0.60-0.73x, 3x3 at 160x160 0.89-0.98x (alone, VNNI, 2 cores)
    sch.unroll(rh)
    sch.unroll(rg)
    tensorize_reduction(sch, block, rh, lanes, _intrinsic(stride, dilation))


_registered: set[str] = set()


def _intrinsic(stride: int, dilation: int) -> str:
    """The tensor intrinsic for 16 lanes x 4 taps at this column stride and dilation, registered once."""
    name = f"modelbuild_vnni_depthwise_s{stride}_d{dilation}"
    if name in _registered:
        return name
    from tvm import tirx
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    span = (LANES - 1) * stride + (GROUP - 1) * dilation + 1  # input columns the lanes read
    loaded = load_width(stride, dilation)
    # the window as a 64-byte vector: a 32-byte load's upper half zero (never selected)
    upper = [T.broadcast(T.uint8(0), WINDOW - loaded)] if loaded < WINDOW else []
    lanes = [tirx.IntImm("int32", i) for i in range(WINDOW)]
    vpdpbusd = T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512")
    vpermb = T.llvm_lookup_intrinsic_id("llvm.x86.avx512.permvar.qi.512")
    # byte 4 * lane + k of vpermb's result is input column lane * stride + k * dilation of the window
    byte = tirx.Ramp(tirx.const(0, "int8"), tirx.const(1, "int8"), 64)
    index = (byte >> tirx.Broadcast(tirx.const(2, "int8"), 64)) * tirx.Broadcast(tirx.const(stride, "int8"), 64) + (
        byte & tirx.Broadcast(tirx.const(3, "int8"), 64)
    ) * tirx.Broadcast(tirx.const(dilation, "int8"), 64)

    # c[lane] += sum_k a[lane * stride + k * dilation] * b[k]
    @T.prim_func(s_tir=True)
    def description(
        a: T.Buffer((span,), "uint8", offset_factor=1),
        b: T.Buffer((4,), "int8", offset_factor=1),
        c: T.Buffer((16,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(c[0:16], a[0:span], b[0:4])
            T.writes(c[0:16])
            for i in T.serial(0, 16):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        c[vi] = c[vi] + T.cast(a[vi * stride + vk * dilation], "int32") * T.cast(b[vk], "int32")

    @T.prim_func(s_tir=True)
    def implementation(
        a: T.Buffer((span,), "uint8", offset_factor=1),
        b: T.Buffer((4,), "int8", offset_factor=1),
        c: T.Buffer((16,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(c[0:16], a[0:span], b[0:4])
            T.writes(c[0:16])
            # one expression: with the permutation index, the window and the weight word as names, each
            # became a buffer allocated at every iteration of a parallel loop (TVMBackendAllocWorkspace:
            # 5x slower on 2 cores than on one)
            c[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                vpdpbusd,
                c.vload([0], dtype="int32x16"),
                T.call_llvm_pure_intrin(
                    vpermb,
                    T.Shuffle([a.vload([0], f"uint8x{loaded}"), *upper], lanes),
                    T.reinterpret(index, dtype="uint8x64"),
                    dtype="uint8x64",
                ),
                T.reinterpret(T.broadcast(T.reinterpret(b.vload([0], "int8x4"), dtype="int32"), 16), dtype="int8x64"),
                dtype="int32x16",
            )

    TensorIntrin.register(name, description, implementation, override=True)
    _registered.add(name)
    return name
