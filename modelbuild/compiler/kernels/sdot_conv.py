"""int8 conv2d on Arm CPUs with the dot-product extension (Armv8.2 dotprod: Cortex-A55/A76 and later, Neoverse
N1, as in Graviton2): one sdot multiplies 4 int8 by 4 int8 and adds the sums into 4 int32 lanes, 16
multiply-adds an instruction where NEON's widening multiplies do 8 in three.

The conv is computed in packed_conv.py's layouts, 4 lanes wide (a 128-bit NEON register): column lanes hold 4
output columns of one channel, channel lanes 4 output channels of one column. sdot multiplies *signed* data,
so uint8 data (asymmetric activations) is shifted by -128 while packing and -128 * sum(w) subtracted
afterwards; int8 data is packed as it is. Bit-identical to the plain conv, like the VNNI kernel: the tests run
it on the emulated Arm device (scripts/emulated_arm64.py, qemu's `-cpu max` has dotprod) against numpy.

NEON has 32 vector registers, so the register tile is 16 accumulators: 4 output channels x 4 vectors of 4
columns in column lanes (each data vector feeds 4 sdots, each weight word 4), 16 columns of 4 channels in
channel lanes (each weight vector feeds 16). No Arm board measured these tiles: they follow the VNNI
kernel's, which were measured, and the register count. Armv8.6's i8mm (smmla) is not used.
"""

from __future__ import annotations

from modelbuild.compiler.kernels import packed_conv
from modelbuild.compiler.kernels.packed_conv import (
    PAD_VECTOR, ROW_BLOCK, block_names, epilogue_at, extent, largest_divisor, parallel, tensorize_reduction,
)

SDOT = packed_conv.Instruction("sdot", lanes=4, data_dtype="int8")
LANES = SDOT.lanes
BLOCK, COLUMN_BLOCK = SDOT.blocks
BLOCKS = SDOT.blocks  # default_schedule recognises the kernel by them
STAGING_BLOCKS = SDOT.staging_blocks
COLUMN_VECTORS = 4  # column lanes: vectors of columns accumulated together, for each of the 4 output channels
INTRINSICS = {BLOCK: "modelbuild_sdot_4x4", COLUMN_BLOCK: "modelbuild_sdot_columns_4x4"}


def supported(target) -> bool:
    """Whether the target is an Arm CPU with the dot-product instructions (mattr +dotprod, or an mcpu that
    has them)."""
    from tvm.target import codegen

    return (target is not None and target.kind.name == "llvm"
            and str(target.attrs.get("mtriple", "")).startswith("aarch64")
            and bool(codegen.target_has_features("dotprod", target)))


def legalize(bb, call):
    """An eligible int8 conv2d (packed_conv.eligible) in packed sdot form."""
    return packed_conv.legalize(bb, call, SDOT)


def schedule(sch, cores: int) -> None:
    """Tensorise the packed conv's reduction with sdot; the unpack and whatever FuseOps put behind it are
    computed per register tile while the accumulators are hot."""
    _register_intrinsics()
    names = block_names(sch)
    if COLUMN_BLOCK in names:
        _schedule_column_lanes(sch, cores)
    else:
        _schedule_channel_lanes(sch, cores)
    if SDOT.pad_block in names:
        pad = sch.get_sblock(SDOT.pad_block)
        sch.vectorize(sch.split(sch.get_loops(pad)[-1], factors=[None, PAD_VECTOR])[1])
    _vectorize_packing(sch)


def _schedule_column_lanes(sch, cores: int) -> None:
    block = sch.get_sblock(COLUMN_BLOCK)
    b, o, h, col, rc, rh, rw, ri = sch.get_loops(block)
    ob, oi = sch.split(o, factors=[None, LANES])
    vectors = largest_divisor(extent(sch, col) // LANES, COLUMN_VECTORS)
    col_outer, col_vector, col_inner = sch.split(col, factors=[None, vectors, LANES])
    sch.reorder(b, ob, h, col_outer, rc, rh, rw, oi, col_vector, col_inner, ri)
    epilogue_at(sch, block, col_outer, LANES, row=h)
    outputs = extent(sch, b) * extent(sch, ob) * extent(sch, h) * extent(sch, col_outer) * LANES * vectors * LANES
    parallel(sch, SDOT, cores, outputs, b, ob, h)
    sch.unroll(oi)
    sch.unroll(col_vector)
    tensorize_reduction(sch, block, rc, col_inner, INTRINSICS[COLUMN_BLOCK])


def _schedule_channel_lanes(sch, cores: int) -> None:
    block = sch.get_sblock(BLOCK)
    b, ob, h, col, oi, rc, rh, rw, ri = sch.get_loops(block)
    columns = extent(sch, col)
    col_outer, col_inner = sch.split(col, factors=[None, largest_divisor(columns, ROW_BLOCK)])
    sch.reorder(b, ob, h, col_outer, rc, rh, rw, col_inner, oi, ri)
    epilogue_at(sch, block, col_outer, LANES)
    parallel(sch, SDOT, cores, extent(sch, b) * extent(sch, ob) * extent(sch, h) * columns * LANES, b, ob, h)
    sch.unroll(col_inner)
    tensorize_reduction(sch, block, rc, oi, INTRINSICS[BLOCK])


def _vectorize_packing(sch) -> None:
    """Packing 4 columns x 4 channels into one 16-byte vector where the columns come in fours (LLVM
    interleaves the four rows with zips), else the 4 channels of a column."""
    pack = sch.get_sblock(SDOT.pack_block)
    *_, q, ci = sch.get_loops(pack)
    if extent(sch, q) % LANES == 0:
        _, columns = sch.split(q, factors=[None, LANES])
        sch.vectorize(sch.fuse(columns, ci))
    else:
        sch.vectorize(ci)


_registered = False


def _register_intrinsics() -> None:
    global _registered
    if _registered:
        return
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    sdot = T.llvm_lookup_intrinsic_id("llvm.aarch64.neon.sdot.v4i32.v16i8")

    # channel lanes: c[channel] += sum_k data[k] * weight[channel, k], the data's 4 bytes broadcast
    @T.prim_func(s_tir=True)
    def channels_description(a: T.Buffer((4,), "int8", offset_factor=1),
                             b: T.Buffer((4, 4), "int8", offset_factor=1),
                             c: T.Buffer((4,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(c[0:4], a[0:4], b[0:4, 0:4])
            T.writes(c[0:4])
            for i in T.serial(0, 4):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        c[vi] = c[vi] + T.cast(a[vk], "int32") * T.cast(b[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def channels_implementation(a: T.Buffer((4,), "int8", offset_factor=1),
                                b: T.Buffer((4, 4), "int8", offset_factor=1),
                                c: T.Buffer((4,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(c[0:4], a[0:4], b[0:4, 0:4])
            T.writes(c[0:4])
            a_word = T.reinterpret(a.vload([0], "int8x4"), dtype="int32")
            c[T.ramp(T.int32(0), 1, 4)] = T.call_llvm_pure_intrin(
                sdot, c.vload([0], dtype="int32x4"), T.reinterpret(T.broadcast(a_word, 4), dtype="int8x16"),
                b.vload([0, 0], dtype="int8x16"), dtype="int32x4")

    # column lanes: c[column] += sum_k data[column, k] * weight[k], the weight's 4 bytes broadcast
    @T.prim_func(s_tir=True)
    def columns_description(a: T.Buffer((4, 4), "int8", offset_factor=1),
                            b: T.Buffer((4,), "int8", offset_factor=1),
                            c: T.Buffer((4,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(c[0:4], a[0:4, 0:4], b[0:4])
            T.writes(c[0:4])
            for i in T.serial(0, 4):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        c[vi] = c[vi] + T.cast(a[vi, vk], "int32") * T.cast(b[vk], "int32")

    @T.prim_func(s_tir=True)
    def columns_implementation(a: T.Buffer((4, 4), "int8", offset_factor=1),
                               b: T.Buffer((4,), "int8", offset_factor=1),
                               c: T.Buffer((4,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(c[0:4], a[0:4, 0:4], b[0:4])
            T.writes(c[0:4])
            b_word = T.reinterpret(b.vload([0], "int8x4"), dtype="int32")
            c[T.ramp(T.int32(0), 1, 4)] = T.call_llvm_pure_intrin(
                sdot, c.vload([0], dtype="int32x4"), a.vload([0, 0], dtype="int8x16"),
                T.reinterpret(T.broadcast(b_word, 4), dtype="int8x16"), dtype="int32x4")

    TensorIntrin.register(INTRINSICS[BLOCK], channels_description, channels_implementation, override=True)
    TensorIntrin.register(INTRINSICS[COLUMN_BLOCK], columns_description, columns_implementation, override=True)
    _registered = True
