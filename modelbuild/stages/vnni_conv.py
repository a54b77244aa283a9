"""int8 conv2d on x86 CPUs with AVX-512 VNNI: one vpdpbusd multiplies 4 uint8 by 4 int8 and adds the sums
into 16 int32 lanes, 64 multiply-adds an instruction where the plain integer loop does 16 with vpmulld.

The instruction wants its operands in a shape NCHW does not have, so the conv is computed in packed layouts:
- data: uint8, [N, C/4, H, W, 4] (4 input channels side by side, padded in this same step);
- weights: int8, [O/16, C/4, KH, KW, 16, 4], packed once at compile time (they are constants);
- accumulators: int32, 16 output channels side by side, unpacked to NCHW by the kernel's epilogue.

vpdpbusd multiplies *unsigned* data. int8 data (the symmetric scheme) is shifted by +128 while packing, and
128 * sum(w) is subtracted per output channel afterwards, which is exact; padding is packed as the shifted
zero. The result is bit-identical to the plain int8 x int8 -> int32 conv it replaces.

TVM 0.27 ships a VNNI tensor intrinsic (tvm.s_tir.tensor_intrin.x86), but it calls
llvm.x86.avx512.vpdpbusd.512 with the operand types of older LLVMs and fails LLVM's verifier; this module
registers its own with <64 x i8> operands.
"""

from __future__ import annotations

import numpy as np

BLOCK = "vnni_conv"  # the reduction block; default_schedule recognises kernels by it
PACK_BLOCK = "vnni_pack"
INTRINSIC = "modelbuild_vnni_16x4"
LANES = 16  # int32 accumulators of one vpdpbusd
GROUP = 4  # uint8 x int8 products summed into each lane
ROW_BLOCK = 16  # output columns whose accumulators stay in registers while the weights stream by
PARALLEL_MIN_WORK = 1 << 14  # output vectors below which one thread is faster


def supported(target) -> bool:
    """Whether the target has AVX-512 VNNI (Cascade Lake, Ice Lake, Sapphire Rapids, Zen 4 and later)."""
    from tvm.target import codegen

    return target is not None and target.kind.name == "llvm" and bool(
        codegen.target_has_features("avx512vnni", target))


def legalize(bb, call):
    """An eligible int8 conv2d (see `eligible`) in packed VNNI form."""
    from tvm import relax

    from modelbuild.stages.integer_ops import constant_value

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
            and str(weight.ty.dtype) == "int8" and _static(data.ty.shape))


def _static(shape) -> bool:
    try:
        [int(d) for d in shape.values]
        return True
    except (AttributeError, TypeError, ValueError):
        return False


def pack_weights(weight: np.ndarray, *, shifted: bool) -> tuple[np.ndarray, np.ndarray]:
    """OIHW int8 weights as [O/16, C/4, KH, KW, 16, 4] (zero-padded), and what to subtract per output channel:
    128 * sum(w) when the data is shifted from int8 to uint8, else 0."""
    out_ch, in_ch, kh, kw = weight.shape
    padded = np.zeros((_ceil(out_ch, LANES) * LANES, _ceil(in_ch, GROUP) * GROUP, kh, kw), np.int8)
    padded[:out_ch, :in_ch] = weight
    packed = padded.reshape(-1, LANES, padded.shape[1] // GROUP, GROUP, kh, kw).transpose(0, 2, 4, 5, 1, 3)
    sums = weight.astype(np.int64).reshape(out_ch, -1).sum(axis=1)
    correction = (128 * sums if shifted else np.zeros(out_ch, np.int64)).astype(np.int32)
    return np.ascontiguousarray(packed), correction


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _compute(x, w, correction, *, strides, padding, dilation, kernel, channels):
    """The packed conv as TE: pack (shift, pad, group channels by 4), reduce, unpack with the correction."""
    from tvm import te, tirx

    n, in_ch, height, width = (int(d) for d in x.shape)
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilation
    top, left, bottom, right = padding if len(padding) == 4 else (*padding, *padding)
    out_h = (height + top + bottom - dh * (kh - 1) - 1) // sh + 1
    out_w = (width + left + right - dw * (kw - 1) - 1) // sw + 1
    groups_in, blocks_out = _ceil(in_ch, GROUP), _ceil(channels, LANES)
    shift = 128 if str(x.dtype) == "int8" else 0

    def pack(b, cg, h, col, ci):
        c, row, column = cg * GROUP + ci, h - top, col - left
        inside = tirx.all(c < in_ch, row >= 0, row < height, column >= 0, column < width)
        value = x[b, tirx.min(c, in_ch - 1), tirx.max(tirx.min(row, height - 1), 0),
                  tirx.max(tirx.min(column, width - 1), 0)]
        return tirx.Select(inside, (value.astype("int32") + shift).astype("uint8"), tirx.const(shift, "uint8"))

    packed = te.compute((n, groups_in, height + top + bottom, width + left + right, GROUP), pack, name=PACK_BLOCK)
    rc, rh, rw, ri = (te.reduce_axis((0, e), name) for e, name in
                      ((groups_in, "rc"), (kh, "rh"), (kw, "rw"), (GROUP, "ri")))
    acc = te.compute(
        (n, blocks_out, out_h, out_w, LANES),
        lambda b, ob, h, col, oi: te.sum(
            packed[b, rc, h * sh + rh * dh, col * sw + rw * dw, ri].astype("int32")
            * w[ob, rc, rh, rw, oi, ri].astype("int32"), axis=[rc, rh, rw, ri]),
        name=BLOCK)
    return te.compute((n, channels, out_h, out_w),
                      lambda b, o, h, col: acc[b, o // LANES, h, col, o % LANES] - correction[o], name="vnni_unpack")


def schedule(sch, cores: int) -> None:
    """Tensorise the packed conv's reduction with vpdpbusd; everything after it (the unpack, the rescale and
    whatever FuseOps put behind) is computed per block of ROW_BLOCK columns while the accumulators are hot."""
    _register_intrinsic()
    block = sch.get_sblock(BLOCK)
    b, ob, h, col, oi, rc, rh, rw, ri = sch.get_loops(block)
    columns = _extent(sch, col)
    col_outer, col_inner = sch.split(col, factors=[None, _largest_divisor(columns, ROW_BLOCK)])
    sch.reorder(b, ob, h, col_outer, rc, rh, rw, col_inner, oi, ri)
    local = sch.cache_write(block, 0, "global")
    sch.reverse_compute_at(local, col_outer)
    consumers = sch.get_consumers(local)
    for consumer in consumers:
        sch.reverse_compute_at(consumer, col_outer)
    sch.compute_inline(local)
    for consumer in consumers:  # [16 channels, columns]: the columns are contiguous in the NCHW output
        sch.vectorize(sch.get_loops(consumer)[-1])
    work = _extent(sch, b) * _extent(sch, ob) * _extent(sch, h) * columns
    if cores > 1 and work >= PARALLEL_MIN_WORK:
        sch.parallel(sch.fuse(b, ob, h))
    sch.unroll(col_inner)
    init = sch.decompose_reduction(block, rc)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(oi, INTRINSIC)
    pack = sch.get_sblock(PACK_BLOCK)
    loops = sch.get_loops(pack)
    if cores > 1 and work >= PARALLEL_MIN_WORK:
        sch.parallel(sch.fuse(*loops[:3]))


def _extent(sch, loop) -> int:
    return int(sch.get(loop).extent)


def _largest_divisor(n: int, limit: int) -> int:
    return next(d for d in range(min(n, limit), 0, -1) if n % d == 0)


_registered = False


def _register_intrinsic() -> None:
    global _registered
    if _registered:
        return
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def description(a: T.Buffer((4,), "uint8", offset_factor=1), b: T.Buffer((16, 4), "int8", offset_factor=1),
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
    def implementation(a: T.Buffer((4,), "uint8", offset_factor=1), b: T.Buffer((16, 4), "int8", offset_factor=1),
                       c: T.Buffer((16,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(c[0:16], a[0:4], b[0:16, 0:4])
            T.writes(c[0:16])
            a_word = T.reinterpret(a.vload([0], "uint8x4"), dtype="int32")
            c[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"), c.vload([0], dtype="int32x16"),
                T.reinterpret(T.broadcast(a_word, 16), dtype="uint8x64"), b.vload([0, 0], dtype="int8x64"),
                dtype="int32x16")

    TensorIntrin.register(INTRINSIC, description, implementation, override=True)
    _registered = True
