"""int8 conv2d on x86 CPUs with AMX (Sapphire Rapids and later): one tdpbsud multiplies a 16 x 64 tile of
int8 weights by a 64 x 16 tile of uint8 data into a 16 x 16 tile of int32 sums, 16384 multiply-adds an
instruction where vpdpbusd does 64.

The conv is computed in packed_conv.py's layouts with column lanes, 16 input-channel groups (64 channels) a
step, or 8 (32 channels) where the channels are an odd multiple of 32: a data tile's row is one group of 4
channels for 16 neighbouring output columns, 64 contiguous bytes of the packed data, packed
[N, C/64, H, stride, 16, W, 4] so that a tile's rows lie a packed row apart (a few KB), not a channel plane
(over 100 KB on the detector's larger maps); a weight tile's row is one output channel's 64 input channels,
packed [O/16, C/64, KH, KW, 16, 16, 4] (with 32 and 8 for a step of 32); the sum tile is 16 output channels by
16 columns, the accumulators of column lanes. Output channels are padded to 16 and columns to 16 (computed and
dropped); input channels are not padded (the convs that would need it stay on VNNI, see instruction). Data is
shifted into uint8 as for VNNI.

A tensor intrinsic works on memory, so the sum tile is zeroed in its register and stored once per tile,
around all its taps and blocks of channels (register_intrinsic); two blocks of 16 output channels share each
loaded tile of data where they pair up (PAIRED_BLOCKS). Measured in C on this kind of CPU, tdpbsud with every
tile loaded from L1 runs 275-400 G multiply-adds per second per core, against ~97 G for vpdpbusd; the convs
measured whole (packing and epilogue included) ran in 0.43x-0.69x of VNNI's time (see instruction).

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
from modelbuild.compiler.kernels.packed_conv import block_names, epilogue_at, extent, parallel, reduction_length

AMX = packed_conv.Instruction("amx", lanes=16, data_dtype="uint8", group_block=16)
# 32 channels a step, for convs of 96, 160, ... input channels: measured in C, tdpbsud with both operands loaded
# from L1 for each one multiplies 70-100% as many int8 pairs a second with K = 32 as with 64 (the loads bound
# it), so a 96-channel conv in 3 steps of 32 does no worse than in 2 of 64 half padded, and measured whole
# better (3x3 96 -> 24 at 160x160 0.86x of VNNI's time, 0.90x padded). The same blocks and layouts, its groups
# per step read off the scheduled reduction.
AMX_32 = packed_conv.Instruction("amx", lanes=16, data_dtype="uint8", group_block=8)
BLOCKS = (AMX.column_block,)  # default_schedule recognises the kernel by it
STAGING_BLOCKS = AMX.staging_blocks
# tile registers: the sums of two blocks of 16 output channels, their weights and the data of a step by its
# channels; one configuration for every AMX kernel (tile_config_words)
SUMS = (0, 1)
WEIGHTS, DATA = {64: (4, 5), 32: (2, 3)}, {64: 6, 32: 7}
# Output channels a tile of the schedule computes, in blocks of 16: two, where the blocks pair up, load each
# tile of data once for both (measured alone, bit-identical: 96 -> 24 3x3 at 160x160, padded to 2 blocks,
# 0.89x, at 80x80 0.87x)
PAIRED_BLOCKS = 2
SUM_ROWS, ROW_BYTES = 16, 64  # 16 output channels x 16 columns of int32; a data row: 16 columns x 4 channels
# A conv of several taps whose weights all fit in a core's L1 (48 KB on Sapphire Rapids) loops over rows
# outermost, its blocks of output channels inside: the rows of data a tile reads serve every block from L1
# rather than streaming through once per block. Measured against blocks outermost (one process): 3x3 96 -> 24
# at 160x160 0.79x, at 80x80 0.84x, 64 -> 64 at 40x40 0.75x, at 56x56 0.90x, 64 -> 32 at 160x160 0.87x,
# 64 -> 64 stride 2 0.61x; with weights of 83 KB and more no gain (96 -> 96 at 26x26 1.05x, 128 -> 128 at
# 29x29 1.03x, 256 -> 256 at 10x10 1.01x).
ROWS_FIRST_WEIGHT_BYTES = 48 * 1024
MIN_COLUMN_SHARE = 0.6  # of a row's 16-column tiles, output columns (10 of 16 ran 0.93x VNNI's time, 7 1.17x)
# Linux's arch_prctl: ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA
SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 158, 0x1023, 18


def supported(target) -> bool:
    """Whether the target has AMX's int8 tiles (Sapphire Rapids, Granite Rapids and later)."""
    from tvm.target import codegen

    return (
        target is not None
        and target.kind.name == "llvm"
        and bool(codegen.target_has_features("amx-int8", target))
        and bool(codegen.target_has_features("amx-tile", target))
    )


def instruction(call) -> packed_conv.Instruction | None:
    """The AMX step for a conv packed_conv takes, None where it stays on VNNI: steps of 64 input channels, or
    of 32 where the channels are an odd multiple of 32 (padded to 64 instead, 96 -> 24 3x3 at 160x160 ran
    0.90x of VNNI's time); two steps or more per tile of sums (blocks times taps); at least
    MIN_COLUMN_SHARE of its rows' 16-column tiles output columns; output channels are padded to 16.
    Measured against VNNI (2 cores, bit-identical, one process): 3x3 64 -> 64 at 56x56 0.48x, 128 -> 128 at
    29x29 0.43x, 64 -> 32 at 160x160 0.50x, 64 -> 64 stride 2 to 40x40 0.69x, 256 -> 256 at 10x10 0.93x;
    1x1 256 -> 64 at 76x100 0.53x, 128 -> 128 0.69x; with outputs padded, 64 -> 8 3x3 at 40x40 0.57x,
    64 -> 40 0.62x, 64 -> 24 at 56x56 0.61x, 1x1 128 -> 40 at 80x80 0.72x, 256 -> 72 0.71x. Left on VNNI: a
    1x1 conv of one step (64 -> 64 at 56x56 0.95x, 64 -> 256 at 40x40 1.09x); input channels not a multiple
    of 32; 7 columns computed as 16 (512 -> 512 1x1 at 7x7 1.17x)."""
    if not packed_conv.eligible(call):
        return None
    _, in_ch, kh, kw = (int(d) for d in call.args[1].ty.shape.values)
    out_w = int(call.ty.shape.values[3])
    if out_w < MIN_COLUMN_SHARE * packed_conv.lanes_width(out_w, AMX.lanes):
        return None
    step = next((s for s in (AMX, AMX_32) if in_ch % (s.group * s.group_block) == 0), None)
    if step is None or in_ch // (step.group * step.group_block) * kh * kw < 2:
        return None
    return step


def schedule(sch, cores: int) -> None:
    """Tensorise each 16 x 16 tile of sums, or pair of them (PAIRED_BLOCKS), with tdpbsud over every tap and
    step of input channels, the sums in tile registers throughout (register_intrinsic); rows outermost as for
    VNNI's data-heavy 1x1 convs, and for convs of several taps whose weights fit in L1
    (ROWS_FIRST_WEIGHT_BYTES); the epilogue per row tile as for VNNI (packed_conv.epilogue_at); padded data
    packed 16 columns x 4 channels per shuffle."""
    block = sch.get_sblock(AMX.column_block)
    taps = sch.get(block).annotations
    b, o, h, col, rc, rh, rw, rg, ri = sch.get_loops(block)
    channels = extent(sch, o)
    blocks = PAIRED_BLOCKS if channels // AMX.lanes % PAIRED_BLOCKS == 0 else 1
    ob, oi = sch.split(o, factors=[None, AMX.lanes * blocks])
    col_outer, col_inner = sch.split(col, factors=[None, AMX.lanes])
    pixels = extent(sch, h) * extent(sch, col_outer) * AMX.lanes
    taps_count = extent(sch, rh) * extent(sch, rw)
    weight_bytes = channels * extent(sch, rc) * extent(sch, rg) * AMX.group * taps_count
    rows_first = packed_conv.rows_outermost(sch, AMX, taps_count, pixels, channels) or (
        taps_count > 1 and weight_bytes <= ROWS_FIRST_WEIGHT_BYTES
    )
    parallel_loops = packed_conv.reorder_outer(
        sch, block, rows_first, b, ob, h, col_outer, oi, col_inner, rc, rh, rw, rg, ri
    )
    macs = extent(sch, b) * pixels * channels * reduction_length(sch, AMX.group * extent(sch, rg), rc, rh, rw)
    epilogue_at(sch, block, col_outer, AMX.lanes, row=h)
    parallel(sch, AMX, cores, macs, *parallel_loops)
    sch.decompose_reduction(block, oi)
    sch.vectorize(sch.get_loops(sch.get_sblock(f"{AMX.column_block}_init"))[-1])
    tile = sch.blockize(oi)
    _, data, weights = (_extents(region) for region in sch.get(tile).reads)
    sch.tensorize(
        tile, register_intrinsic(data, weights, [int(d) for d in taps["dilation"]], int(taps["stride"][1]), blocks)
    )
    if AMX.pad_block in block_names(sch):
        packed_conv.schedule_padding(sch, AMX)


def finish(func):
    """The scheduled function with the tile state it needs (configure_tiles)."""
    return configure_tiles(func)


def _extents(region) -> tuple[int, ...]:
    """The extents of a tile's region of packed data or weights, less the batch or blocks of output channels:
    data (steps, rows, phases, groups, columns, 4), weights (steps, KH, KW, 16, groups, 4): 16 or 8 groups."""
    return tuple(int(r.extent) for r in region.region[1:])


_registered: set[str] = set()


def register_intrinsic(
    data: tuple[int, ...], weights: tuple[int, ...], dilation: list[int], stride: int, blocks: int = 1
) -> str:
    """The tensor intrinsic for one conv's tile of sums, `blocks` blocks of 16 output channels by 16 columns:
    sums[o, col] += data[r, rh * dh, phase, g, col + shift, k] * weights[o // 16, r, rh, rw, o % 16, g, k] summed
    over its steps r of 64 or 32 input channels, its taps (rh, rw) (phase and shift: column rw * dw of stride
    `stride`) and the 16 or 8 groups g of 4 channels k. It covers the tile's whole reduction: its
    implementation zeroes each block's sums in their registers (tilezero, where loading the zeros TVM's init
    had just written cost the convs 1.03x-1.17x their time), then per step and tap loads each block's weights
    and one tile of data, which every block's tdpbsud multiplies, and stores the sums once (loaded and stored
    around each tap instead, 3x3 convs ran 0.62x-0.86x of VNNI's time, then 0.43x-0.69x). `data` and
    `weights` are the extents of the regions TVM computed for the scheduled tile (less the blocks of output
    channels), so the description matches them by construction.
    Written as TVMScript text because a tap loop of one iteration has no iteration variable in the scheduled
    block, and TVMScript binds variables only in straight-line code."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T
    from tvm.script.parser import parse

    steps, kh, kw, groups = weights[0], weights[1], weights[2], weights[4]
    (dh, dw), lanes, step = dilation, AMX.lanes, groups * AMX.group
    weight_tiles, data_tile, rows = WEIGHTS[step][:blocks], DATA[step], lanes * blocks
    name = f"modelbuild_amx_{'x'.join(map(str, data))}_{steps}x{kh}x{kw}_d{dh}x{dw}_s{stride}_b{blocks}"
    if name in _registered:
        return name
    loops = {"r": steps, "h": kh, "w": kw}
    var = {axis: f"v{axis}" if n > 1 else "0" for axis, n in loops.items()}
    bound = [axis for axis, n in loops.items() if n > 1]
    # one block of output channels has no axis of blocks in the scheduled tile's weights
    weight_shape = (blocks, *weights) if blocks > 1 else weights
    block_axis = (lambda block: f"{block}, ") if blocks > 1 else (lambda block: "")
    lane = f"vo % {lanes}" if blocks > 1 else "vo"
    weight_at = f"{block_axis(f'vo // {lanes}')}{var['r']}, {var['h']}, {var['w']}, {lane}, vg, vk"

    def data_at(r, h, w, g, col, k):
        return f"{r}, {h} * {dh}, T.floormod({w} * {dw}, {stride}), {g}, {col} + T.floordiv({w} * {dw}, {stride}), {k}"

    def tile_op(op, *args):
        return f'T.evaluate(T.call_llvm_intrin("void", "llvm.x86.{op}", {", ".join(map(str, args))}))'

    regions = (("data", data), ("weights", weight_shape))
    reads = ", ".join(f"{x}[{', '.join(f'0:{d}' for d in shape)}]" for x, shape in regions)
    header = f"""
@T.prim_func(s_tir=True)
def intrinsic(a: T.handle, b: T.handle, c: T.handle):
    s0, s1, s2, s3, s4 = T.int64(), T.int64(), T.int64(), T.int64(), T.int64()
    sum_stride, sum_row_stride = T.int64(), T.int64()
    data = T.match_buffer(a, {data}, "uint8", strides=[s0, s1, s2, s3, 4, 1], offset_factor=1)
    weights = T.match_buffer(b, {weight_shape}, "int8", offset_factor=1)
    sums = T.match_buffer(c, ({rows}, 1, {lanes}), "int32", strides=[sum_stride, sum_row_stride, 1],
                          offset_factor=1)
    with T.sblock("root"):
        T.reads(sums[0:{rows}, 0, 0:{lanes}], {reads})
        T.writes(sums[0:{rows}, 0, 0:{lanes}])
"""
    description = (
        header
        + f"""
        for o, col, r, h, w, g, k in T.grid({rows}, {lanes}, {steps}, {kh}, {kw}, {groups}, {AMX.group}):
            with T.sblock("update"):
                vo, vcol, {"".join(f"v{axis}, " for axis in bound)}vg, vk = T.axis.remap(
                    "SS{"R" * len(bound)}RR", [o, col, {"".join(f"{axis}, " for axis in bound)}g, k])
                sums[vo, 0, vcol] = sums[vo, 0, vcol] + (
                    T.Cast("int32", data[{data_at(var["r"], var["h"], var["w"], "vg", "vcol", "vk")}])
                    * T.Cast("int32", weights[{weight_at}]))
"""
    )
    sum_at = [f"T.address_of(sums[{block * lanes}, 0, 0])" for block in range(blocks)]
    # the init's zeros are written still: without them the tile stores missed (a model of 1x200 AMX convs,
    # faster conv by conv, ran 1.03x slower), and loaded after them, the tiles waited on those stores
    zeros = [tile_op("tilezero", f"T.int8({SUMS[i]})") for i in range(blocks)]
    stores = [tile_op("tilestored64", f"T.int8({SUMS[i]})", sum_at[i], "sum_stride * 4") for i in range(blocks)]
    step_body = [
        *(
            tile_op(
                "tileloadd64",
                f"T.int8({tile})",
                f"T.address_of(weights[{block_axis(i)}r, h, w, 0, 0, 0])",
                f"T.int64({step})",
            )
            for i, tile in enumerate(weight_tiles)
        ),
        tile_op("tileloadd64", f"T.int8({data_tile})", f"T.address_of(data[{data_at('r', 'h', 'w', 0, 0, 0)}])", "s3"),
        *(
            tile_op("tdpbsud", f"T.int8({SUMS[i]})", f"T.int8({tile})", f"T.int8({data_tile})")
            for i, tile in enumerate(weight_tiles)
        ),
    ]
    indent, step_indent = "\n        ", "\n            "
    implementation = (
        header
        + f"""
        {indent.join(zeros)}
        for r, h, w in T.grid({steps}, {kh}, {kw}):
            {step_indent.join(step_body)}
        {indent.join(stores)}
"""
    )
    parsed = [parse(text, extra_vars={"T": T}, s_tir=True) for text in (description, implementation)]
    TensorIntrin.register(name, *parsed, override=True)
    _registered.add(name)
    return name


def tile_shapes() -> dict[int, tuple[int, int]]:
    """Each tile register's (rows, bytes per row): the sums 16 output channels of 16 int32 columns; for a
    step of `step` channels, the weights 16 output channels of `step` bytes and the data step / 4 groups of
    16 columns x 4 channels (tdpbsud takes K = step from the weights' row and the data's rows)."""
    return {
        **{tile: (SUM_ROWS, ROW_BYTES) for tile in SUMS},
        **{tile: (AMX.lanes, step) for step in WEIGHTS for tile in WEIGHTS[step]},
        **{DATA[step]: (step // AMX.group, ROW_BYTES) for step in DATA},
    }


def tile_config_words() -> list[int]:
    """ldtilecfg's 64 bytes as 8 little-endian words: palette 1, then each tile used (tile_shapes), bytes
    per row as uint16 from byte 16 and rows as uint8 from byte 48; the tiles no step uses unconfigured. One
    configuration for both steps, so every AMX kernel loads the same one."""
    config = bytearray(64)
    config[0] = 1
    for tile, (rows, row_bytes) in tile_shapes().items():
        config[16 + 2 * tile : 18 + 2 * tile] = row_bytes.to_bytes(2, "little")
        config[48 + tile] = rows
    return [int.from_bytes(config[i : i + 8], "little") for i in range(0, 64, 8)]


def configure_tiles(func):
    """`func` asking Linux for the tile registers and loading the tile configuration first, and again at the
    start of each iteration of every parallel loop with tile instructions (each thread has its own)."""
    import tvm_ffi
    from tvm import s_tir, tirx
    from tvm.ir import StringImm

    config = tirx.decl_buffer((8,), "int64", name="amx_tile_config")
    load = tirx.Evaluate(
        tirx.call_llvm_intrin("void", "llvm.x86.ldtilecfg", tirx.address_of(tirx.BufferLoad(config, [0])))
    )

    def in_every_thread(loop):
        if loop.kind != tirx.ForKind.PARALLEL or "llvm.x86.tdpbsud" not in str(loop.body):
            return loop
        return tirx.For(
            loop.loop_var,
            loop.min,
            loop.extent,
            loop.kind,
            tirx.SeqStmt([load, loop.body]),
            loop.thread_binding,
            loop.annotations,
        )

    realize = func.body
    root = realize.block
    body = tvm_ffi.structural_map(root.body, ((tirx.For, in_every_thread),))
    granted = tirx.call_extern(
        "int64",
        "syscall",
        tirx.IntImm("int64", SYS_ARCH_PRCTL),
        tirx.IntImm("int64", ARCH_REQ_XCOMP_PERM),
        tirx.IntImm("int64", XFEATURE_XTILEDATA),
    )
    # TVM 0.27's Python AssertStmt passes (kind, condition) to a constructor that takes (condition, kind)
    permission = tirx.AssertStmt(
        granted == tirx.IntImm("int64", 0),
        StringImm("RuntimeError"),
        [
            StringImm(
                "the CPU or the Linux kernel does not allow AMX tiles (arch_prctl ARCH_REQ_XCOMP_PERM failed): "
                "build for a target without amx-int8"
            )
        ],
    )
    words = [tirx.BufferStore(config, tirx.IntImm("int64", word), [i]) for i, word in enumerate(tile_config_words())]
    root = s_tir.SBlock(
        root.iter_vars,
        root.reads,
        root.writes,
        root.name_hint,
        tirx.SeqStmt([permission, *words, load, body]),
        root.init,
        [*root.alloc_buffers, config],
        root.match_buffers,
        root.annotations,
    )
    return func.with_body(s_tir.SBlockRealize(realize.iter_values, realize.predicate, root))
