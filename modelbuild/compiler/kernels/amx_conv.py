"""int8 conv2d on x86 CPUs with AMX (Sapphire Rapids and later): one tdpbsud multiplies a 16 x 64 tile of
int8 weights by a 64 x 16 tile of uint8 data into a 16 x 16 tile of int32 sums, 16384 multiply-adds an
instruction where vpdpbusd does 64.

The conv is computed in packed_conv.py's layouts with column lanes, 16 input-channel groups (64 channels) a
step: a data tile's row is one group of 4 channels for 16 neighbouring output columns, 64 contiguous bytes of
the packed data (the rows a channel group's plane apart); a weight tile's row is one output channel's 64
input channels, packed [O/16, C/64, KH, KW, 16, 16, 4]; the sum tile is 16 output channels by 16 columns,
the accumulators of column lanes. Input channels are padded to a multiple of 64 (zero weights), output
channels to 16, columns to 16. Data is shifted into uint8 as for VNNI.

The sum tile is loaded and stored around every step (the tensor intrinsic works on memory): measured in C on
this kind of CPU, 275-400 G multiply-adds per second per core with it so, against ~97 G for vpdpbusd.

AMX needs two things no other kernel does:
- the process's permission to use the tile registers, asked of Linux (arch_prctl ARCH_REQ_XCOMP_PERM, since
  Linux 5.16): asked once per call of the kernel, and an error, not a crash, where it is refused;
- a tile configuration (ldtilecfg) in every thread that runs tile instructions: loaded at the start of each
  iteration of the kernel's parallel loop. Loaded per step instead, it cost as much as the step itself.
TVM 0.27 has no AMX support to call on (its Relay-era `runtime.amx_init` is gone), so `configure_tiles` adds
both to the scheduled function.
"""

from __future__ import annotations

from modelbuild.compiler.kernels import packed_conv
from modelbuild.compiler.kernels.packed_conv import (
    block_names, epilogue_at, extent, parallel, reduction_length, tensorize_reduction,
)

AMX = packed_conv.Instruction("amx", lanes=16, data_dtype="uint8", group_block=16)
BLOCKS = (AMX.column_block,)  # default_schedule recognises the kernel by it
STAGING_BLOCKS = AMX.staging_blocks
ROWS, ROW_BYTES = 16, 64  # every tile: 16 rows of 64 bytes
SUMS, WEIGHTS, DATA = 0, 4, 6  # tile registers
# Linux's arch_prctl: ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA
SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 158, 0x1023, 18


def supported(target) -> bool:
    """Whether the target has AMX's int8 tiles (Sapphire Rapids, Granite Rapids and later)."""
    from tvm.target import codegen

    return (target is not None and target.kind.name == "llvm"
            and bool(codegen.target_has_features("amx-int8", target))
            and bool(codegen.target_has_features("amx-tile", target)))


def eligible(call) -> bool:
    """A conv packed_conv takes whose every step is whole: input channels a multiple of 64, output channels a
    multiple of 16, and at least half of each row's 16-column tiles output columns. Measured against VNNI
    (2 cores, bit-identical): 64 -> 64 3x3 at 56x56 0.62x, 128 -> 128 3x3 at 29x29 0.49x, 128 -> 128 1x1 at
    76x100 0.81x, 256 -> 64 1x1 0.85x, 256 -> 256 3x3 at 10x10 0.85x, 64 -> 64 1x1 at 56x56 1.02x; and
    slower where steps or tiles are padded: 96 -> 96 3x3 at 26x26 1.04x, 48 -> 48 3x3 1.12x, 96 -> 24 3x3 at
    160x160 1.11x, 32 -> 64 3x3 stride 2 1.63x, 512 -> 512 1x1 at 7x7 (16 columns for 7) 1.17x."""
    if not packed_conv.eligible(call):
        return False
    out_ch, in_ch = (int(d) for d in call.args[1].ty.shape.values[:2])
    out_w = int(call.ty.shape.values[3])
    return (in_ch % (AMX.group * AMX.group_block) == 0 and out_ch % AMX.lanes == 0
            and packed_conv.lanes_width(out_w, AMX.lanes) <= 2 * out_w)


def schedule(sch, cores: int) -> None:
    """Tensorise the reduction with tdpbsud, a 16 x 16 tile of sums per step; the epilogue per row tile as
    for VNNI (packed_conv.epilogue_at); padded data packed 16 columns x 4 channels per shuffle."""
    block = sch.get_sblock(AMX.column_block)
    b, o, h, col, rc, rh, rw, rg, ri = sch.get_loops(block)
    intrinsic = register_intrinsic(extent(sch, rc))
    ob, oi = sch.split(o, factors=[None, AMX.lanes])
    col_outer, col_inner = sch.split(col, factors=[None, AMX.lanes])
    sch.reorder(b, ob, h, col_outer, rh, rw, oi, col_inner, rc, rg, ri)
    outputs = extent(sch, b) * extent(sch, ob) * AMX.lanes * extent(sch, h) * extent(sch, col_outer) * AMX.lanes
    epilogue_at(sch, block, col_outer, AMX.lanes, row=h)
    parallel(sch, AMX, cores, outputs * reduction_length(sch, AMX.group * AMX.group_block, rc, rh, rw), b, ob, h)
    tensorize_reduction(sch, block, rh, oi, intrinsic)
    if AMX.pad_block in block_names(sch):
        packed_conv.schedule_padding(sch, AMX)


def finish(func):
    """The scheduled function with the tile state it needs (configure_tiles)."""
    return configure_tiles(func)


_registered: set[str] = set()


def register_intrinsic(blocks: int) -> str:
    """sums[o, col] += sum over r, g, k of data[r, g, col, k] * weights[r, o, g, k] for `blocks` blocks r of
    64 input channels: the sum tile loaded, a tdpbsud (signed weights, unsigned data) per block, the sum tile
    stored. Registered once per count of blocks."""
    name = f"modelbuild_amx_16x16x64x{blocks}"
    if name in _registered:
        return name
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    lanes, groups, group = AMX.lanes, AMX.group_block, AMX.group

    def tile(kind: str, number: int, pointer, stride):
        return T.call_llvm_intrin("void", f"llvm.x86.{kind}", T.int8(number), pointer, stride)

    @T.prim_func(s_tir=True)
    def description(a: T.handle, b: T.handle, c: T.handle) -> None:
        data_block, data_row, data_phase, data_group = T.int64(), T.int64(), T.int64(), T.int64()
        weight_block, weight_row, weight_column = T.int64(), T.int64(), T.int64()
        sum_stride, sum_row_stride = T.int64(), T.int64()
        data = T.match_buffer(a, (blocks, 1, 1, groups, lanes, group), "uint8", offset_factor=1,
                              strides=[data_block, data_row, data_phase, data_group, group, 1])
        weights = T.match_buffer(b, (blocks, 1, 1, lanes, groups, group), "int8", offset_factor=1,
                                 strides=[weight_block, weight_row, weight_column, groups * group, group, 1])
        sums = T.match_buffer(c, (lanes, 1, lanes), "int32", strides=[sum_stride, sum_row_stride, 1], offset_factor=1)
        with T.sblock("root"):
            T.reads(sums[0:lanes, 0, 0:lanes], data[0:blocks, 0, 0, 0:groups, 0:lanes, 0:group],
                    weights[0:blocks, 0, 0, 0:lanes, 0:groups, 0:group])
            T.writes(sums[0:lanes, 0, 0:lanes])
            for o, col, r, g, k in T.grid(lanes, lanes, blocks, groups, group):
                with T.sblock("update"):
                    vo, vcol, vr, vg, vk = T.axis.remap("SSRRR", [o, col, r, g, k])
                    sums[vo, 0, vcol] = sums[vo, 0, vcol] + T.cast(data[vr, 0, 0, vg, vcol, vk], "int32") * T.cast(
                        weights[vr, 0, 0, vo, vg, vk], "int32")

    @T.prim_func(s_tir=True)
    def one_block_description(a: T.handle, b: T.handle, c: T.handle) -> None:
        # the scheduled block keeps a loop of one block but binds no iteration variable to it
        data_block, data_row, data_phase, data_group = T.int64(), T.int64(), T.int64(), T.int64()
        weight_block, weight_row, weight_column = T.int64(), T.int64(), T.int64()
        sum_stride, sum_row_stride = T.int64(), T.int64()
        data = T.match_buffer(a, (blocks, 1, 1, groups, lanes, group), "uint8", offset_factor=1,
                              strides=[data_block, data_row, data_phase, data_group, group, 1])
        weights = T.match_buffer(b, (blocks, 1, 1, lanes, groups, group), "int8", offset_factor=1,
                                 strides=[weight_block, weight_row, weight_column, groups * group, group, 1])
        sums = T.match_buffer(c, (lanes, 1, lanes), "int32", strides=[sum_stride, sum_row_stride, 1], offset_factor=1)
        with T.sblock("root"):
            T.reads(sums[0:lanes, 0, 0:lanes], data[0:blocks, 0, 0, 0:groups, 0:lanes, 0:group],
                    weights[0:blocks, 0, 0, 0:lanes, 0:groups, 0:group])
            T.writes(sums[0:lanes, 0, 0:lanes])
            for o, col, r, g, k in T.grid(lanes, lanes, 1, groups, group):
                with T.sblock("update"):
                    vo, vcol, vg, vk = T.axis.remap("SSRR", [o, col, g, k])
                    sums[vo, 0, vcol] = sums[vo, 0, vcol] + T.cast(data[0, 0, 0, vg, vcol, vk], "int32") * T.cast(
                        weights[0, 0, 0, vo, vg, vk], "int32")

    @T.prim_func(s_tir=True)
    def implementation(a: T.handle, b: T.handle, c: T.handle) -> None:
        data_block, data_row, data_phase, data_group = T.int64(), T.int64(), T.int64(), T.int64()
        weight_block, weight_row, weight_column = T.int64(), T.int64(), T.int64()
        sum_stride, sum_row_stride = T.int64(), T.int64()
        data = T.match_buffer(a, (blocks, 1, 1, groups, lanes, group), "uint8", offset_factor=1,
                              strides=[data_block, data_row, data_phase, data_group, group, 1])
        weights = T.match_buffer(b, (blocks, 1, 1, lanes, groups, group), "int8", offset_factor=1,
                                 strides=[weight_block, weight_row, weight_column, groups * group, group, 1])
        sums = T.match_buffer(c, (lanes, 1, lanes), "int32", strides=[sum_stride, sum_row_stride, 1], offset_factor=1)
        with T.sblock("root"):
            T.reads(sums[0:lanes, 0, 0:lanes], data[0:blocks, 0, 0, 0:groups, 0:lanes, 0:group],
                    weights[0:blocks, 0, 0, 0:lanes, 0:groups, 0:group])
            T.writes(sums[0:lanes, 0, 0:lanes])
            T.evaluate(tile("tileloadd64", SUMS, T.address_of(sums[0, 0, 0]), sum_stride * 4))
            for r in range(blocks):
                T.evaluate(tile("tileloadd64", WEIGHTS, T.address_of(weights[r, 0, 0, 0, 0, 0]), T.int64(ROW_BYTES)))
                T.evaluate(tile("tileloadd64", DATA, T.address_of(data[r, 0, 0, 0, 0, 0]), data_group))
                T.evaluate(T.call_llvm_intrin("void", "llvm.x86.tdpbsud", T.int8(SUMS), T.int8(WEIGHTS),
                                              T.int8(DATA)))
            T.evaluate(tile("tilestored64", SUMS, T.address_of(sums[0, 0, 0]), sum_stride * 4))

    TensorIntrin.register(name, description if blocks > 1 else one_block_description, implementation,
                          override=True)
    _registered.add(name)
    return name


def tile_config_words() -> list[int]:
    """ldtilecfg's 64 bytes as 8 little-endian words: palette 1, then every tile used (0-7) 64 bytes by 16
    rows (bytes per row as uint16 from byte 16, rows as uint8 from byte 48)."""
    config = bytearray(64)
    config[0] = 1
    for tile in range(8):
        config[16 + 2 * tile:18 + 2 * tile] = ROW_BYTES.to_bytes(2, "little")
        config[48 + tile] = ROWS
    return [int.from_bytes(config[i:i + 8], "little") for i in range(0, 64, 8)]


def configure_tiles(func):
    """`func` asking Linux for the tile registers and loading the tile configuration first, and again at the
    start of each iteration of every parallel loop with tile instructions (each thread has its own)."""
    import tvm_ffi
    from tvm import s_tir, tirx
    from tvm.ir import StringImm

    config = tirx.decl_buffer((8,), "int64", name="amx_tile_config")
    load = tirx.Evaluate(tirx.call_llvm_intrin("void", "llvm.x86.ldtilecfg",
                                               tirx.address_of(tirx.BufferLoad(config, [0]))))

    def in_every_thread(loop):
        if loop.kind != tirx.ForKind.PARALLEL or "llvm.x86.tdpbsud" not in str(loop.body):
            return loop
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, tirx.SeqStmt([load, loop.body]),
                        loop.thread_binding, loop.annotations)

    realize = func.body
    root = realize.block
    body = tvm_ffi.structural_map(root.body, ((tirx.For, in_every_thread),))
    granted = tirx.call_extern("int64", "syscall", tirx.IntImm("int64", SYS_ARCH_PRCTL),
                               tirx.IntImm("int64", ARCH_REQ_XCOMP_PERM), tirx.IntImm("int64", XFEATURE_XTILEDATA))
    # TVM 0.27's Python AssertStmt passes (kind, condition) to a constructor that takes (condition, kind)
    permission = tirx.AssertStmt(granted == tirx.IntImm("int64", 0), StringImm("RuntimeError"), [StringImm(
        "the CPU or the Linux kernel does not allow AMX tiles (arch_prctl ARCH_REQ_XCOMP_PERM failed): "
        "build for a target without amx-int8")])
    words = [tirx.BufferStore(config, tirx.IntImm("int64", word), [i]) for i, word in enumerate(tile_config_words())]
    root = s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint,
                        tirx.SeqStmt([permission, *words, load, body]), root.init,
                        [*root.alloc_buffers, config], root.match_buffers, root.annotations)
    return func.with_body(s_tir.SBlockRealize(realize.iter_values, realize.predicate, root))
