"""A schedule for every kernel without a tuned record: parallel outer loops, vectorised inner loops.

Stock TVM 0.27 schedules nothing for CPU targets: every kernel is one thread of scalar loops. This is a fixed,
measurement-free recipe for the kernels that dominate CNNs and transformers (conv2d, dense/matmul, pooling,
element-wise chains, reductions):
- an element-wise producer feeding another element-wise block (bias, activation) is inlined into it;
  padding that feeds a reduction stays a block of its own, so the reduction's inner loop has no selects,
  unless the reduction is a depthwise conv's few taps (SHORT_REDUCTION), where copying the padded input
  cost more than the selects (a 3x3 stride-2 depthwise conv at 112x112x32: 0.30 -> 0.07 ms inlined);
- a reduction block keeps its spatial loops outside and its reduction loops inside, with the innermost
  spatial loop (output channels once convs are channels-last, a matmul's columns) split by the vector width
  and moved below the reductions, so each step of the reduction updates whole vectors of outputs: a
  register tile of rows x vectors (Machine), its rows split with a tail where they do not divide; its
  epilogue is computed after the tile, while the values are hot;
- where one block of output channels serves every row (more channels than pixels) and its weights over the
  whole reduction would not stay in cache, the input channels are summed in passes of a block each, every
  pass sweeping the rows with one block of weights (magika's conv1d: 45-58 -> 93-121 GFLOP/s);
- a reduction whose output has no axis to vectorise (a global pool: one sum per channel) sums its
  innermost reduction axis in vector-wide partial sums instead (the classifier's ten pools: 65 -> 9 us),
  one output's sums one vector, computed under the parallel loop, and a pool's rows and columns summed as
  one axis where its columns make no whole vectors (96 x 40 x 40 alone: 0.07-0.10x);
  one whose output rows no vector width divides (an NCHW 5x5 pool at 10x10, in an int8 build) takes each
  row as one vector, its padding computed apart first (a 5x5 pool at 10x10: 60 -> 33 us);
- a nearest-neighbour upsampling by whole factors (kernels/nearest_upsample.py) stays a block of its own,
  computed where its consumer reads each row, every 16 outputs one load and one shuffle;
- padding whose condition varies across a vector's lanes (an NCHW row's columns, as an int8 depthwise conv
  summed in float has) is kept apart from its reduction and written as the pad value over the whole buffer,
  then the input copied in with no condition: TVM's vectoriser had run it lane by lane (23 -> 12 us);
- other blocks are split by the vector width, or vectorised whole when their rows are short and the vector
  width does not divide them: the padding of a 5x5 conv's 96-column rows (100) had been split by 4, and
  4-lane vectors with a bounds select compiled to masked gathers (the classifier's fp32 build: 0.82 ->
  0.75 ms);
- the outermost spatial loops of a kernel with enough work are fused and run in parallel;
- an int8 conv legalised for a dot-product instruction gets its own schedule (AMX tiles: amx_conv.py;
  AVX-512 VNNI: vnni_conv.py, vnni_depthwise.py; Arm's sdot: sdot_conv.py), and so do a softmax over long
  rows (softmax.py) and an NCHW max pool two columns wide at stride two (pairwise_pool.py); where one
  does not fit its kernel (a fused epilogue it does not expect), the kernel gets the generic steps.
Each step runs on a copy of the schedule and is kept only if TVM accepts it, so an unusual kernel keeps a
simpler schedule rather than failing the build.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from modelbuild.compiler.kernels import (
    amx_conv,
    avx2_conv,
    layer_norm,
    linear_upsample,
    nearest_upsample,
    packed_conv,
    row_reductions,
    sdot_conv,
    softmax,
    strided_pool,
    transposed_tiles,
    vnni_conv,
    vnni_depthwise,
)
from modelbuild.compiler.kernels.iterators import is_reduction, subexpressions, sums

VECTOR_LANES = 16  # float32 lanes of AVX-512; narrower vector units run the loop in several instructions
HALF_LANES = VECTOR_LANES // 2
WHOLE_ROW_LANES = 8 * VECTOR_LANES  # rows up to this long are vectorised whole when 16 does not divide them
MIN_ROW_LANES = 4  # and from this short: 512 channels at 4x4, 3.2 -> 1.0 us (a 3x3 pool has too few rows to pay)
PARALLEL_MIN_WORK = 1 << 18  # spatial iterations below which a parallel region costs more than it saves
# (measured on 2 cores: 4096 made the small classifier 1.25 ms, 65536 0.98 ms, 262144 0.93 ms; the detector
# is unchanged, its kernels being far larger)
# terms of an element-wise function that cost what a copy of its element costs (_worth_running_in_parallel):
# on 2 cores a sigmoid over 32 Ki elements 11 -> 8 us in parallel, over 128 Ki 42 -> 25 us, an exponential
# (387 terms) over 64 Ki 15 -> 9 us; 16 Ki elements of a sigmoid 5 -> 6 us
TERMS_PER_COPY = 48
SHORT_REDUCTION = 25  # steps per output up to which padding is computed inside the reduction (5x5 taps)
PARALLEL_MIN_MACS = 1 << 20  # the same for a reduction, counted in multiply-adds
PARALLEL_MIN_SUMS = 1 << 15  # the same for one summed in lanes (a pool), far slower a step (_sum_in_lanes)
BROADCAST_RATIO = 16  # a fused consumer with this many times a reduction's steps broadcasts it (_broadcasts)
GATE_MIN_TERMS = 32  # terms of an element-wise block that cost more than reading it back (_gates_broadcast)
# Weights one pass of a register tile's reduction reads, above which the reduction is split into passes over
# blocks of input channels (_channel_blocks): the L1 data cache of x86 cores since Ice Lake. The weight rows of
# one vector block lie a whole row of output channels apart, so a strided slice is all the cache holds of them;
# measured on 2 cores, magika's conv1d (256 -> 512, 5 taps, 327 KB of weights a pass) ran at 45-58 GFLOP/s, in
# blocks of 16-64 channels (20-82 KB) 93-121, of 128 (164 KB) 88; a 3x3 512 -> 512 conv at 7x7 26-34, in
# blocks of 8-64 channels 79-102, of 128 (295 KB) 41; a 1x1 256 -> 256 conv at 14x14 (64 KB) 50-55, in
# blocks of 128 (32 KB) 75-86. Blocks of half the largest that fits cost 3x3 and 5-tap convs 3-10%.
WEIGHT_PASS_BYTES = 48 * 1024
# a concatenation's pieces are cut apart in vectors of the lanes that divide them all, at least this many
# (YOLOv8's head concatenates 1600, 400 and 100 anchors: 4 lanes)
MIN_PIECE_LANES = 4
PADDED_ROWS_FRACTION = 20  # a matmul's rows are padded to whole tiles where that adds at most 1/20 (_rows_padded)
MIN_CHANNEL_BLOCK = 8  # fewer channels a pass would load and store the tile's outputs for too little work
# kernels legalised with blocks of these names have their own schedule(sch, cores), and some a finish(func)
# for what the scheduled function needs besides its loops (amx_conv: the tile state)
HAND_WRITTEN = (
    (amx_conv, amx_conv.BLOCKS),
    (vnni_conv, vnni_conv.BLOCKS),
    (sdot_conv, sdot_conv.BLOCKS),
    (avx2_conv, avx2_conv.BLOCKS),
    (vnni_depthwise, (vnni_depthwise.BLOCK,)),
    (softmax, softmax.BLOCKS),
    (layer_norm, layer_norm.BLOCKS),
    (strided_pool, strided_pool.BLOCKS),
)


@dataclass(frozen=True)
class Machine:
    """What the schedule adapts to: cores to run on, and the register tile of a reduction: `rows` output
    rows (pixels) by `vectors` output vectors accumulated in registers, so each loaded weight vector feeds
    `rows` multiply-adds and each broadcast input `vectors`."""

    cores: int = 1
    rows: int = 4
    vectors: int = 1
    fewer_rows: int = 2  # how many rows fewer a tile over a long loop may take rather than a tail


# AVX-512 has 32 vector registers: a 6 x 4 tile keeps 24 accumulators in them. Measured on 1x1 and 3x3 convs
# and a matmul head (NHWC, 2 cores), GFLOP/s went from 46-60 with the 4 x 1 tile to 80-140; 4 x 4 and 2 x 8
# came close. With 16 registers (AVX2) a 16-lane vector takes two, so one vector wide: 6 x 1 is 12
# accumulators, two weight registers and a broadcast (onnxruntime's AVX2 kernel is the same 6 x 16 floats;
# NEON's 32 registers of 4 lanes hold it too). On a Zen 4 with AVX2 alone, against 4 x 1: ViT-B/16's matmuls
# 67-85 -> 100-134 GFLOP/s (the model 0.81x call by call), resnet_ish 0.83x, the zoo's other libraries
# 0.92-1.03x.
WIDE_REGISTERS = Machine(rows=6, vectors=4)
MIN_TILE_ROWS = 3  # fewer rows reuse each loaded weight vector too little
FEWER_ROWS = 2  # a tile may take this many rows fewer, where that divides its rows and `rows` does not
LONG_ROWS = 8  # tiles a loop must hold for its tail to cost less than a smaller tile (Machine.fewer_rows)
# On AVX2, over a loop of 8 tiles or more, 6 rows with a tail beat 4 without, and 5 without did not lose to
# them; call by call against 4-row tiles: the BERT-style encoder's [128, K] matmuls 0.82-0.93x, magika's conv1d
# over 508 rows 0.88-0.92x, YOLOv8n (160/80/40/20 rows: 5-row tiles either way) 0.98-1.03x; a batch of 8 rows
# (MTCNN's dense layers) lost 4-5% to 6 + 2 and keeps 4-row tiles. The wide tile (AVX-512) was measured the
# other way (magika: 74 GFLOP/s in 6-row tiles with a tail, 120 in 4-row ones) and takes up to two rows fewer.
NARROW_REGISTERS = Machine(rows=6, vectors=1, fewer_rows=1)


def machine(target) -> Machine:
    """The cores and register tile for an llvm target."""
    from tvm.target import codegen

    cores = int(target.attrs["num-cores"]) if "num-cores" in target.attrs else 1
    wide = target.kind.name == "llvm" and bool(codegen.target_has_features("avx512f", target))
    tile = WIDE_REGISTERS if wide else NARROW_REGISTERS
    return Machine(cores, tile.rows, tile.vectors, tile.fewer_rows)


REFUSED = "modelbuild.refused_steps"  # PrimFunc attribute: how many schedule steps TVM refused for it


def apply(module, target):
    """Schedule every PrimFunc of `module` that no tuning record scheduled already; each keeps the number of
    steps TVM refused (attribute REFUSED), which the compile figures report."""
    from tvm import tirx

    on = machine(target)
    scheduled = {}
    for gv, func in module.functions.items():
        if isinstance(func, tirx.PrimFunc) and not (func.attrs and "tirx.is_scheduled" in func.attrs):
            new = schedule_function(func, on)
            if new is not None:
                scheduled[gv] = new.with_attr("tirx.is_scheduled", True)
    for gv, func in scheduled.items():
        module[gv] = func
    return module


def schedule_function(func, on: Machine):
    """The function with the default schedule, or None when it has no block to schedule."""
    from tvm.s_tir import Schedule, ScheduleError

    sch = Schedule(_simplified(func))
    try:
        root = sch.get_sblock("root")
    except ScheduleError:
        return None
    if _written_by_hand(sch, root):
        return None
    refused: list[str] = []
    sch = _inline_elementwise(sch, root, refused)
    kernel = next((k for k, blocks in HAND_WRITTEN if any(_has_block(sch, root, name) for name in blocks)), None)
    trial = sch if kernel is None else _attempt(sch, lambda s: kernel.schedule(s, on.cores), refused)
    held = trial is not sch
    if held:
        sch = trial
    else:  # no hand-written kernel, or one whose schedule did not fit (an unusual fused epilogue)
        if linear_upsample.read_transposed(sch):
            sch = _attempt(sch, linear_upsample.columns_channels_first, refused)
        for block in sch.get_child_blocks(root):
            if is_reduction(sch, block):
                sch = _attempt(sch, lambda s, b=block: _schedule_reduction(s, b, on), refused)
        upsampled = [sch.get(b).name_hint for b in sch.get_child_blocks(root) if _shuffled_upsample(sch, b)]
        for block in sch.get_child_blocks(root):
            if (
                not is_reduction(sch, block)
                and not _is_nested(sch, block)
                and sch.get(block).name_hint not in upsampled
            ):
                sch = _attempt(sch, lambda s, b=block: _schedule_spatial(s, b, on.cores), refused)
        for name in upsampled:
            sch = _place_upsample(sch, sch.get_sblock(name), on.cores, refused)
        if upsampled:
            sch = _shuffle_upsampled_rows(sch, upsampled, refused)
    func = sch.mod["main"]
    if held and hasattr(kernel, "finish"):  # what a hand-written schedule adds once scheduled
        func = kernel.finish(func)
    return func.with_attr(REFUSED, len(refused))


def _simplified(func):
    """The function with its blocks' index expressions simplified over their iterators' ranges: a reshape
    fused after a concatenation or transpose reads through its flat index (`v % 2100`, `v // 80` of an
    iterator that never reaches 2100 or 80), which hides a concatenation's pieces and which TVM's vectoriser
    computes lane by lane."""
    from tvm import IRModule
    from tvm.s_tir import transform

    return transform.StmtSimplify()(IRModule({"main": func}))["main"]


def _written_by_hand(sch, root) -> bool:
    """Whether the function holds a block with no iterators of its own that none of modelbuild's kernels
    wrote: TVM's hand-written loops (NonMaxSuppression's argsort and suppression, which rewrite their inputs
    in place). Inlining the element-wise blocks around them left a buffer they use undefined and tvm.compile
    failed; such a function keeps TVM's own schedule, as `schedule = "none"` builds it."""
    ours = {name for _, blocks in HAND_WRITTEN for name in blocks}
    blocks = sch.get_child_blocks(root)
    return any(not sch.get(b).iter_vars for b in blocks) and not any(sch.get(b).name_hint in ours for b in blocks)


def _has_block(sch, root, name: str) -> bool:
    return any(sch.get(b).name_hint == name for b in sch.get_child_blocks(root))


def _attempt(sch, step, refused: list[str]):
    """Run a step on a copy (the copy keeps the symbol table, so handles stay valid); keep it if it worked.

    Only refusals are caught: TVM's ScheduleError, and ValueError, which the steps here raise for a kernel
    they do not fit. Anything else (a TVM API that moved) fails the compile instead of quietly costing speed."""
    from tvm.s_tir import ScheduleError

    trial = sch.copy()
    try:
        step(trial)
    except (ScheduleError, ValueError) as err:
        refused.append(type(err).__name__)
        return sch
    return trial


def _spatial_and_reduce(sch, block):
    loops = sch.get_loops(block)
    kinds = ["R" if sums(iv) else "S" for iv in sch.get(block).iter_vars]
    if len(loops) != len(kinds):
        raise ValueError("loops and iterators do not line up")
    return [loop for loop, k in zip(loops, kinds) if k == "S"], [loop for loop, k in zip(loops, kinds) if k == "R"]


def _is_nested(sch, block) -> bool:
    """Whether the block was moved under another block's loops (an epilogue computed at a reduction)."""
    loops = sch.get_loops(block)
    return bool(loops) and len(sch.get_child_blocks(loops[0])) > 1


def _inline_elementwise(sch, root, refused: list[str]):
    """Inline blocks that are neither outputs, reductions, nor inputs of a reduction with more than
    SHORT_REDUCTION steps or whose rows are vectorised whole (a select per lane compiled to masked gathers:
    a 5x5 pool at 10x10 took 60 -> 128 us), nor a dot-product conv's staging or padding of its input (their
    schedules expect them)."""
    kept: set[str] = {
        *amx_conv.STAGING_BLOCKS,
        *vnni_conv.STAGING_BLOCKS,
        *sdot_conv.STAGING_BLOCKS,
        *avx2_conv.STAGING_BLOCKS,
        vnni_depthwise.PAD_BLOCK,
        strided_pool.PAD_BLOCK,
        linear_upsample.COLUMNS_BLOCK,
    }
    while True:
        outputs = {sch.get(b).name_hint for b in sch.get_output_blocks(root)}
        candidates = [
            b
            for b in sch.get_child_blocks(root)
            if sch.get(b).name_hint not in outputs | kept
            and not is_reduction(sch, b)
            and not _shuffled_upsample(sch, b)
            and not _gates_broadcast(sch, b)
            and not _read_again(sch, b)
            and not any(
                is_reduction(sch, c)
                and (
                    _is_long_reduction(sch, c)
                    or _casts(sch, b)
                    or _takes_whole_rows(sch, c)
                    or _pads_along_rows(sch, b)
                )
                for c in sch.get_consumers(b)
            )
        ]
        if not candidates:
            return sch
        block = candidates[0]
        trial = _attempt(sch, lambda s, b=block: s.compute_inline(b), refused)
        if trial is sch:
            kept.add(sch.get(block).name_hint)
        sch = trial


def _read_again(sch, block) -> bool:
    """Whether the block is a costly function (GATE_MIN_TERMS terms and more) that a consumer reads more than
    once an element: a polynomial exp reads its argument at its clamp, its NaN test and its polynomial.
    Inlining writes the block's whole expression at each read, and down a chain of such functions the copies
    multiply, so the kernel's code, its build time and its run time grow exponentially with the chain's length
    (bench/results/README.md); kept apart, the block is computed once an element, into a buffer."""
    if _terms(sch, block) < GATE_MIN_TERMS:
        return False
    written = sch.get(block).writes[0].source
    return any(_reads_of(sch.get(consumer), written) > 1 for consumer in sch.get_consumers(block))


def _reads_of(block, buffer) -> int:
    """How many loads of `buffer` the value a block stores holds."""
    value = getattr(block.body, "value", None)
    if value is None:
        return 0
    return sum(
        1 for node in subexpressions(value) if getattr(node, "source", None) is not None and node.source.same_as(buffer)
    )


def _gates_broadcast(sch, block) -> bool:
    """Whether the block is a costly function (GATE_MIN_TERMS terms and more: a sigmoid's exponential) of few
    elements that a consumer spreads over a map of BROADCAST_RATIO times as many: a squeeze-and-excite gate,
    one per channel, scaling a whole feature map. Inlined, the gate was computed again for every vector of
    the map (EfficientNet's int8 480-channel gate at 14x14: thirteen scalar sigmoids per channel); kept
    apart, it is computed once per channel where its producer's epilogue is."""
    gated = _domain(sch.get(block))
    return _terms(sch, block) >= GATE_MIN_TERMS and any(
        _scales_a_map(sch.get(c), BROADCAST_RATIO * gated) for c in sch.get_consumers(block)
    )


def _scales_a_map(consumer, least: int) -> bool:
    """Whether the block is element-wise over a map of `least` elements or more that it reads whole: not a
    reduction, which reads its inputs many times by design (a conv its padding), nor a concatenation of
    pieces each smaller than its output (an LSTM's 32 hidden states)."""
    domain = _domain(consumer)
    return (
        domain >= least
        and not any(sums(iv) for iv in consumer.iter_vars)
        and any(math.prod(_constant(d) for d in read.source.shape) == domain for read in consumer.reads)
    )


def _constant(dimension) -> int:
    try:
        return int(dimension)
    except (TypeError, ValueError):
        return 0


def _domain(block) -> int:
    """How many times the block runs: the product of its iterators' extents (1 for one not constant)."""
    total = 1
    for iter_var in block.iter_vars:
        total *= _extent_of(iter_var) or 1
    return total


def _shuffled_upsample(sch, block) -> bool:
    """Whether the block is a nearest-neighbour upsampling whose rows take a shuffle per vector: it stays a
    block of its own (inlined into a consumer, its loads were a scalar load per lane again)."""
    return sch.get(block).name_hint.startswith(nearest_upsample.BLOCK) and nearest_upsample.shuffles(sch, block)


def _place_upsample(sch, block, cores: int, refused: list[str]):
    """A nearest-neighbour upsampling computed row by row where its consumer, already scheduled, takes that
    output row (the DB detector's 8x, 4x and 2x maps read by a concat), else the whole map apart, channels
    in parallel: apart, the upsampled map is written out and read back."""

    def at_consumer(s):
        row = _consumer_row_loop(s, block)
        if row is None:
            raise ValueError("no consumer loop over whole rows")
        s.compute_at(block, row)
        # a predicate (the consumer a concat: the map's rows computed only at its channels) leaves rows
        # that TVM 0.27 cannot blockize, so no shuffle
        if not _always(s.get(s.get_loops(block)[-1]).body.predicate):
            raise ValueError("computed under a predicate")

    def apart(s):
        n, c, *_ = s.get_loops(block)
        _parallelize(s, [n, c], cores, _work(s, s.get_loops(block)) >= PARALLEL_MIN_WORK)

    trial = _attempt(sch, at_consumer, [])
    return trial if trial is not sch else _attempt(sch, apart, refused)


def _always(predicate) -> bool:
    try:
        return bool(int(predicate))
    except (TypeError, ValueError):
        return False


def _shuffle_upsampled_rows(sch, names: list[str], refused: list[str]):
    """The placed upsamplings' rows in shuffles (nearest_upsample.tensorize_rows), the function's last step;
    where TVM refuses one, every row in plain vectors."""

    def shuffled(s):
        for name in names:
            nearest_upsample.tensorize_rows(s, s.get_sblock(name))

    def vectorised(s):
        for name in names:
            _vectorize_innermost(s, s.get_sblock(name))

    trial = _attempt(sch, shuffled, refused)
    return trial if trial is not sch else _attempt(sch, vectorised, refused)


def _consumer_row_loop(sch, block):
    """The loop of the block's one consumer that runs over output rows: the loops below it cover one row."""
    consumers = sch.get_consumers(block)
    if len(consumers) != 1:
        return None
    loops = sch.get_loops(consumers[0])
    width = int(sch.get(consumers[0]).writes[0].source.shape[-1])
    covered = 1
    for index in range(len(loops) - 1, 0, -1):
        covered *= _extent(sch, loops[index]) or 0
        if covered == width:
            return loops[index - 1]
    return None


def _casts(sch, block) -> bool:
    """Whether the block converts a dtype: an integer conv's inputs converted to float once per element stay
    apart, or a 5x5 depthwise conv would convert each 25 times (its kernel 1.9 -> 35.6 ms)."""
    return "T.Cast(" in str(sch.get(block).body)


def _is_long_reduction(sch, block) -> bool:
    if not is_reduction(sch, block):
        return False
    try:
        return _work(sch, _spatial_and_reduce(sch, block)[1]) > SHORT_REDUCTION
    except ValueError:  # loops and iterators that do not line up: keep the padding apart, as before
        return True


def _extent(sch, loop) -> int | None:
    try:
        return int(sch.get(loop).extent)
    except (TypeError, ValueError):
        return None


_WIDTHS = (VECTOR_LANES, VECTOR_LANES // 2, VECTOR_LANES // 4)  # vector widths a loop is split by, widest first


def _vector_split(sch, loop):
    """Split a loop into (outer, inner) with the widest inner that divides it, up to VECTOR_LANES; or None."""
    extent = _extent(sch, loop)
    width = next((w for w in _WIDTHS if extent and extent % w == 0), None)
    if width is None:
        return None
    return sch.split(loop, factors=[None, width])


def _work(sch, loops) -> int:
    total = 1
    for loop in loops:
        total *= _extent(sch, loop) or 1
    return total


def _parallelize(sch, loops, cores: int, worth_it: bool) -> None:
    """Fuse leading loops until each core has several chunks, then run them in parallel."""
    chosen = _parallel_loops(sch, loops, cores, worth_it)
    if chosen:
        sch.parallel(sch.fuse(*chosen) if len(chosen) > 1 else chosen[0])


def _parallel_loops(sch, loops, cores: int, worth_it: bool) -> list:
    """The leading loops `_parallelize` fuses and runs in parallel: none where it runs on one core."""
    if cores < 2 or not worth_it:
        return []
    chosen, chunks = [], 1
    for loop in loops:
        extent = _extent(sch, loop)
        if extent is None:
            break
        chosen.append(loop)
        chunks *= extent
        if chunks >= 4 * cores:
            break
    return chosen if chunks >= 2 else []


def _schedule_reduction(sch, block, on: Machine) -> None:
    block, pads = _rows_padded(sch, block, on)
    spatial, reduce = _spatial_and_reduce(sch, block)
    # a conv1d as an NCHW conv2d, [n, c, l, 1] with a kernel [k, 1]: its vectors run along l (a kept
    # dimension of a pool, [n, c, 1, 1], is no such axis: its input is summed along the reduction)
    while len(spatial) > 1 and _extent(sch, spatial[-1]) == 1 and reduce and _extent(sch, reduce[-1]) == 1:
        spatial = spatial[:-1]
    if not spatial and reduce:
        _reduce_to_one_value(sch, block, reduce)
        return
    if not reduce:
        return
    # counted in multiply-adds: a depthwise conv's few outputs (56x56x32) each cost 9 of them
    macs = _work(sch, spatial) * _work(sch, reduce)
    worth_it = macs >= PARALLEL_MIN_MACS
    weights_outermost = (_extent(sch, spatial[-1]) or 0) > _work(sch, spatial[:-1])
    split = _vector_split(sch, spatial[-1])
    consumers = sch.get_consumers(block)
    if split is None and _whole_rows(sch, spatial, reduce):
        _whole_row_in_lanes(sch, block, spatial, reduce, on.cores, worth_it)
        return
    if split is None:
        sch.reorder(*spatial, *reduce)
        partial = _sum_in_lanes(sch, block, spatial, reduce)
        spatial = sch.get_loops(block)[: len(spatial)]
        for consumer in consumers:
            sch.reverse_compute_at(consumer, spatial[-1])
        _parallelize(sch, spatial, on.cores, worth_it or (partial is not None and macs >= PARALLEL_MIN_SUMS))
        if partial is not None:  # only now: a decomposed reduction cannot be placed or run in parallel
            _partial_sums_from_zero(sch, *partial)
        return
    outer, inner = split
    sharing = _rows_sharing_vectors(sch, block, len(spatial))
    block_loop = _row_block(sch, spatial[:-1], on.rows, on.fewer_rows, sharing)
    if block_loop is not None:
        index, (rows_outer, rows) = block_loop
        leading, tile = [*spatial[:index], rows_outer, *spatial[index + 1 : -1]], [rows]
    else:
        leading, tile = spatial[:-1], []
    vectors = _extent(sch, outer) or 1
    across = next((n for n in range(on.vectors, 1, -1) if vectors % n == 0), 1)
    if across > 1:
        outer, vector_tile = sch.split(outer, factors=[None, across])
        tile.append(vector_tile)
    # With more output channels (a matmul's columns) than output pixels (rows), the weights outweigh the
    # activations, so the loop over vector blocks goes outermost: one block of weights serves every row
    # while it is in cache and is read from memory once (a [40,120]x[120,6640] matmul: 17 -> 40 GFLOP/s).
    # Otherwise the activations stay put (a 1x1 256->256 conv at 50x38: 34 GFLOP/s weights-outermost, 43
    # not).
    order = [outer, *leading] if weights_outermost else [*leading, outer]
    parallel = _parallel_loops(sch, order, on.cores, worth_it)
    lanes = across * (_extent(sch, inner) or 1)
    passes = _channel_blocks(sch, reduce, lanes) if weights_outermost else None
    if passes is not None:
        # each pass sweeps every row of its chunk with one block of weights, which stays in cache; the
        # passes go below the parallel loops (a reduction cannot run in parallel), and the epilogue after
        # the last of them
        blocks, channels = passes
        reduce = [*reduce[:-1], channels]
        at = max(1, len(parallel))
        order = [*order[:at], blocks, *order[at:]]
    sch.reorder(*order, *reduce, *tile, inner)
    for row in tile:
        sch.unroll(row)
    for consumer in consumers:
        if not worth_it and _broadcasts(sch, consumer, macs):
            _schedule_loops(sch, consumer, on.cores)
            continue
        sch.reverse_compute_at(consumer, order[-1] if passes is None else order[at - 1])
        _vectorize_innermost(sch, consumer)
    if parallel and not weights_outermost:  # else each block of columns would copy every row again
        _computed_under(sch, pads, parallel[-1])
    # Annotate first: parallel and vectorize need a whole reduction block (with its init) below them.
    _parallelize(sch, order if passes is None else order[:at], on.cores, worth_it)
    sch.vectorize(inner)
    init = sch.decompose_reduction(block, reduce[0] if passes is None else blocks)
    _vectorize_innermost(sch, init)


def _computed_under(sch, pads: list, loop) -> None:
    """The copies padding a matmul's inputs (_rows_padded's) computed under its parallel `loop` of rows or
    heads, a part in each iteration, rather than whole on one core before it. A loop over blocks of columns
    does not take them: each block would copy every row."""
    from tvm.s_tir import ScheduleError

    for pad in pads:
        try:
            sch.compute_at(pad, loop)
        except ScheduleError:
            continue
        _vectorize_innermost(sch, pad)


def _broadcasts(sch, consumer, macs: int) -> bool:
    """Whether a fused consumer of a reduction of `macs` steps in all spreads its outputs over a map large
    enough to share among the cores, doing far more work than the reduction: a squeeze-and-excite conv's
    scaling of the feature map it gates, fused into the conv. Computed under the conv's loops it ran on one
    core, in one pass per block of channels (the DB detector's 24 -> 96 one scaling a map of 160x160: 439 us);
    it runs after the conv, on its own loops. (A softmax's exponentials are no more work than its sums.)"""
    return _work(sch, sch.get_loops(consumer)) >= max(PARALLEL_MIN_WORK, BROADCAST_RATIO * macs)


def _channel_blocks(sch, reduce, lanes: int):
    """The innermost reduction loop (input channels, a matmul's inner dimension) split into (blocks,
    channels), where a register tile of `lanes` float outputs reads more than WEIGHT_PASS_BYTES of weights
    over its reduction: the largest block of at least MIN_CHANNEL_BLOCK channels whose weights fit. None
    where they fit already or no such block divides the loop."""
    channels = _extent(sch, reduce[-1])
    per_channel = _work(sch, reduce[:-1]) * lanes * 4  # bytes of float32 weights per input channel
    if channels is None or channels * per_channel <= WEIGHT_PASS_BYTES:
        return None
    fitting = WEIGHT_PASS_BYTES // per_channel
    if fitting < MIN_CHANNEL_BLOCK:  # one channel's taps alone fill a pass (a 256-tap conv1d): no block helps
        return None
    block = packed_conv.largest_divisor(channels, fitting)
    if block < MIN_CHANNEL_BLOCK:
        return None
    return tuple(sch.split(reduce[-1], factors=[None, block]))


def _whole_rows(sch, spatial, reduce) -> bool:
    """Whether a reduction's output rows go in one vector each (`_whole_row_in_lanes`): no vector width
    divides them, they fit four vectors, and the reduction cannot sum its own innermost axis in lanes, nor
    in half vectors (an NHWC conv to 3 channels from 40, whose rows of 3 made 3-lane vectors)."""
    row = _extent(sch, spatial[-1]) or 0
    innermost = _extent(sch, reduce[-1])
    return (
        len(spatial) > 1
        and 1 < row <= 4 * VECTOR_LANES
        and not any(row % w == 0 for w in _WIDTHS)
        and not _summable_in_lanes(innermost)
        and _partial_sum_lanes(innermost, _work(sch, reduce)) != HALF_LANES
    )


def _takes_whole_rows(sch, block) -> bool:
    try:
        return _whole_rows(sch, *_spatial_and_reduce(sch, block))
    except ValueError:
        return False


def _whole_row_in_lanes(sch, block, spatial, reduce, cores: int, worth_it: bool) -> None:
    """A reduction whose output rows no vector width divides, as an NCHW pool's 10 columns (a YOLO's SPPF in
    an int8 build, which keeps NCHW): one vector of the whole row, the reduction outside it. Split by lanes
    the row had no vector loop at all and ran one element at a time. (A reduction whose own innermost axis
    can be summed in lanes, a mean over 512 features into 10 rows, keeps that: it reads contiguously.)"""
    consumers = sch.get_consumers(block)
    sch.reorder(*spatial[:-1], *reduce, spatial[-1])
    for consumer in consumers:
        sch.reverse_compute_at(consumer, spatial[-2])
        _vectorize_innermost(sch, consumer)
    _parallelize(sch, spatial[:-1], cores, worth_it)
    sch.vectorize(spatial[-1])
    init = sch.decompose_reduction(block, reduce[0])
    _vectorize_innermost(sch, init)


def _sum_in_lanes(sch, block, spatial, reduce):
    """A reduction with no vector axis in its output (a global pool: one sum per channel) that reads its
    innermost reduction axes contiguously: summed in VECTOR_LANES partial sums, one vector add a step
    (rfactor), which the block then adds up. Returns the partial sums' block and its first reduction loop,
    for `_partial_sums_from_zero` once the block is placed, or None if the axes are too short or uneven,
    leaving the schedule as it was. Expects the loops ordered spatial, reduce."""
    reduce = _contiguous_reduction(sch, block, reduce)
    # the innermost axis that is not a unit: a conv1d's taps as an NHWC conv2d with one input channel
    axis = next((loop for loop in reversed(reduce) if _extent(sch, loop) != 1), reduce[-1])
    width = _partial_sum_lanes(_extent(sch, axis), _work(sch, reduce))
    if width is None:
        return None
    _, lanes = sch.split(axis, factors=[None, width])
    # the lanes last in the partial sums' buffer and the partial sums computed under each output: one
    # output's sums are one vector, in a register. With the lanes first and the partial sums apart, every
    # vector add read and wrote its sums VECTOR_LANES outputs apart (a gather and a scatter), on one core
    partial = sch.rfactor(lanes, factor_axis=-1)
    sch.compute_at(partial, sch.get_loops(block)[len(spatial) - 1])
    lanes, *steps = sch.get_loops(partial)[len(spatial) :]
    sch.reorder(*steps, lanes)
    sch.vectorize(lanes)
    return partial, steps[0]


def _reduce_to_one_value(sch, block, reduce) -> None:
    """A reduction of a whole tensor to one value (the min and max a dynamically quantized model takes of
    every activation) in VECTOR_LANES partial results, one vector step per VECTOR_LANES elements, which the
    block then combines; it had no schedule, one element a step: 70 us over a [128, 1024] activation."""
    whole = sch.fuse(*reduce) if len(reduce) > 1 else reduce[0]
    if not _summable_in_lanes(_extent(sch, whole)):
        raise ValueError("not a whole number of vectors")
    steps, lanes = sch.split(whole, factors=[None, VECTOR_LANES])
    partial = sch.rfactor(lanes, factor_axis=0)
    steps, lanes = sch.get_loops(partial)
    sch.vectorize(lanes)
    _partial_sums_from_zero(sch, partial, steps)


def _partial_sums_from_zero(sch, partial, first_step) -> None:
    """The partial sums' initialisation as a vector loop of its own before their first step."""
    init = sch.decompose_reduction(partial, first_step)
    _vectorize_innermost(sch, init)


def _contiguous_reduction(sch, block, reduce) -> list:
    """The reduction loops, the innermost ones fused into one where they run over the whole trailing axes of
    the one tensor the block reads (a global pool's rows and columns): a pool at 40x40 is summed over 1600
    contiguous floats, 100 vectors, where 40 columns split into no whole vectors."""
    if len(reduce) < 2 or _summable_in_lanes(_extent(sch, reduce[-1])):
        return reduce
    from tvm.tirx import IterVar

    stmt = sch.get(block)
    written = [region.source for region in stmt.writes]
    reads = [r for r in stmt.reads if not any(r.source.same_as(w) for w in written)]
    summed = [iv for iv in stmt.iter_vars if iv.iter_type == IterVar.CommReduce]
    if len(reads) != 1 or len(summed) != len(reduce):
        return reduce
    region, shape = reads[0].region, reads[0].source.shape
    trailing = 0
    for loop, var, axis in zip(reversed(reduce), reversed(summed), reversed(range(len(shape)))):
        if not (
            region[axis].min.same_as(var.var)
            and _is_const(shape[axis], _extent(sch, loop) or -1)
            and _is_const(var.dom.extent, _extent(sch, loop) or -1)
        ):
            break
        trailing += 1
    if trailing < 2 or not _summable_in_lanes(math.prod(_extent(sch, loop) for loop in reduce[-trailing:])):
        return reduce
    return [*reduce[:-trailing], sch.fuse(*reduce[-trailing:])]


def _is_const(expr, value: int) -> bool:
    from tvm.tirx import IntImm

    return isinstance(expr, IntImm) and int(expr) == value


def _partial_sum_lanes(extent: int | None, steps: int) -> int | None:
    """How many partial sums a reduction with no vector axis in its output sums its innermost axis in (of
    `steps` steps in all): VECTOR_LANES where that axis is long and even enough, else half as many where
    it is a whole number of half vectors and the steps fill four of them: an NHWC conv to one output channel
    sums its eight input channels in one vector at each of its 25 taps (basic-pitch's 5x5 conv, 8 -> 1
    channel at 172x264, had run one lane at a time)."""
    if _summable_in_lanes(extent):
        return VECTOR_LANES
    if extent and extent % HALF_LANES == 0 and steps >= 4 * HALF_LANES:
        return HALF_LANES
    # a row no vector width divides, summed as one vector of the whole row, row after row: an int8 build's
    # NCHW global pool over 29x29 (no split of 29 or 841 into whole vectors; one split with a tail, rfactored,
    # summed wrongly in TVM 0.27) ran one element at a time, 217 us for 512 channels, 22 us channels-last;
    # rows as short as MIN_ROW_LANES too: the squeeze-and-excitation pools of a MobileNetV3 at 7x7 (512
    # channels: 6.2 -> 2.2 us a call, four calls an inference in the orientation classifier's int8 build)
    return extent if extent and MIN_ROW_LANES <= extent <= WHOLE_ROW_LANES and steps >= 4 * extent else None


def _summable_in_lanes(extent: int | None) -> bool:
    """Whether an innermost reduction axis is long and even enough to be summed in VECTOR_LANES partial sums."""
    return bool(extent) and extent % VECTOR_LANES == 0 and extent >= 2 * VECTOR_LANES


def _rows_sharing_vectors(sch, block, count: int) -> list[bool]:
    """Per leading spatial axis of the block (of `count` spatial axes, the vector axis last): whether some
    operand read along the vector axis is the same at every index of that axis, so that a register tile over
    it reuses the vectors it loads (a depthwise conv's weights across its rows, though not its input). A
    batched matmul's heads are no such axis (each head reads its own keys); its rows are. Whisper's attention
    over 1500 positions had its 6-row tile across its 6 heads: 6 loads for every 4 multiply-adds, 91 GFLOP/s."""
    from tvm import tirx

    stmt = sch.get(block)
    spatial = [iv.var for iv in stmt.iter_vars if not sums(iv)][:count]
    written = [region.source for region in stmt.writes]
    depending: list[set[int]] = []  # per operand read along the vector axis, the leading axes it depends on
    for read in stmt.reads:
        if any(read.source.same_as(buffer) for buffer in written):
            continue
        used = [var for axis in read.region for var in tirx.analysis.undefined_vars(axis.min)]
        if any(var.same_as(spatial[-1]) for var in used):
            depending.append({i for i, axis in enumerate(spatial[:-1]) if any(var.same_as(axis) for var in used)})
    return [not depending or any(i not in axes for axes in depending) for i in range(count - 1)]


def _row_block(sch, spatial, rows: int, fewer: int, sharing: list[bool]):
    """Split one of the outer spatial loops (given without the vector loop) into (outer, rows), the rows of
    the register tile: the output rows of an NHWC conv [n, h, w] or the channels of an NCHW one [n, c, h]
    come second from the end, the rows of a matmul [i] last; only loops `sharing` marks (_rows_sharing_vectors)
    are tiled, the batched matmul's heads [n, h, i] never. A loop `rows` divides is preferred, then one a
    tile of up to FEWER_ROWS fewer rows divides (over a loop of LONG_ROWS tiles or more, up to `fewer`); else
    the first long enough is split with a tail, whose bounds test does not depend on the vector lanes, so the
    vectors stay whole (an NHWC conv at 26x26: 17 GFLOP/s untiled, 50-60 tiled with a tail, as at 32x32). The
    tail's test sits inside the reduction, though: on the wide tile magika's conv1d over 508 rows ran at 74
    GFLOP/s in 6-row tiles with a tail and 120 in 4-row tiles without; on the narrow one the tail cost less than
    two rows fewer (NARROW_REGISTERS). A matmul whose tail is short is padded to whole tiles first
    (_rows_padded)."""
    choice = _row_tile(sch, spatial, rows, fewer, sharing)
    if choice is None:
        return None
    index, count, _ = choice
    return index, sch.split(spatial[index], factors=[None, count])


def _extent_of(iter_var) -> int | None:
    try:
        return int(iter_var.dom.extent)
    except (TypeError, ValueError):
        return None


def _row_tile(sch, spatial, rows: int, fewer: int, sharing: list[bool]) -> tuple[int, int, bool] | None:
    """(which loop, how many rows, whether with a tail) of _row_block's split, or None."""
    order = [i for i in (len(spatial) - 2, len(spatial) - 1, *range(len(spatial) - 3, -1, -1)) if i >= 0 and sharing[i]]
    extents = {i: _extent(sch, spatial[i]) for i in order}
    for count in range(rows, max(rows - FEWER_ROWS, MIN_TILE_ROWS) - 1, -1):
        # a long loop takes a tail rather than a tile more than `fewer` rows smaller; a short one (a batch of
        # 8 rows) would spend too much of itself in the tail
        divisible = [
            i
            for i in order
            if extents[i]
            and extents[i] >= count
            and extents[i] % count == 0
            and (count >= rows - fewer or extents[i] < LONG_ROWS * rows)
        ]
        if divisible:
            return divisible[0], count, False
    with_tail = [i for i in order if extents[i] and extents[i] > rows]
    return (with_tail[0], rows, True) if with_tail else None


def _rows_padded(sch, block, on: Machine):
    """(block, the blocks copying its inputs padded): the block with its tile's row loop padded to whole tiles
    where it would take a tail (pad_einsum: its input rows copied into a buffer with zero rows after them, the
    extra output rows dropped by the consumer).
    A tail's bounds test sits inside the reduction: a matmul over ViT's 197 tokens ran at 180 GFLOP/s where
    192 rows ran at 210, and padded to 198 the ViT library is 0.85x call by call. Only where the padding adds
    at most 1 / PADDED_ROWS_FRACTION of the rows (a Conformer's 49 frames padded to 54 made its library 1.02x),
    and matmuls only: convs keep the tail."""
    from tvm.s_tir import ScheduleError

    if "matmul" not in sch.get(block).name_hint:  # convs keep the tail: padded, unmeasured (26 rows compute 30)
        return block, []
    iters, loops = sch.get(block).iter_vars, sch.get_loops(block)
    extents = [_extent(sch, loop) for loop in loops]
    if len(loops) != len(iters) or None in extents or extents != [_extent_of(iv) for iv in iters]:
        return block, []  # pad_einsum pads iterators; here they are the loops, one for one
    positions = [p for p, iv in enumerate(iters) if not sums(iv)]
    if (
        len(positions) == len(iters)
        or len(positions) < 2
        or not any(extents[positions[-1]] % width == 0 for width in _WIDTHS)
    ):  # no register tile then
        return block, []
    spatial = [loops[p] for p in positions]
    choice = _row_tile(sch, spatial[:-1], on.rows, on.fewer_rows, _rows_sharing_vectors(sch, block, len(spatial)))
    if choice is None or not choice[2]:
        return block, []
    index, rows, _ = choice
    padded = -(-extents[positions[index]] // rows) * rows
    if (padded - extents[positions[index]]) * PADDED_ROWS_FRACTION > extents[positions[index]]:
        return block, []
    extents[positions[index]] = padded
    name, inputs = sch.get(block).name_hint, {sch.get(b).name_hint for b in sch.get_producers(block)}
    try:
        sch.pad_einsum(block, extents)
    except ScheduleError:
        return block, []
    block = sch.get_sblock(name)
    pads = [b for b in sch.get_producers(block) if sch.get(b).name_hint not in inputs]
    for consumer in sch.get_consumers(block):  # the copy dropping the extra rows, into what reads it
        try:
            sch.compute_inline(consumer)
        except ScheduleError:
            pass
    return block, pads


def _vectorize_innermost(sch, block) -> None:
    loops = sch.get_loops(block)
    extent = _extent(sch, loops[-1]) if loops else None
    if extent and 1 < extent <= 4 * VECTOR_LANES:
        sch.vectorize(loops[-1])


def _pads_along_rows(sch, block) -> bool:
    """Whether the block pads its input along its innermost axis (an NCHW row's columns): an if_then_else
    whose condition varies across a vector's lanes, which TVM's vectoriser turns into a scalar loop, with a
    constant outside the input (a concatenation's if_then_else picks between inputs: not padding)."""
    from tvm import ir, tirx

    store = sch.get(block).body
    value = getattr(store, "value", None)
    if not (
        isinstance(value, ir.Call)
        and getattr(value.op, "name", None) == "prim.if_then_else"
        and isinstance(value.args[2], (tirx.IntImm, tirx.FloatImm))
        and sch.get(block).iter_vars
    ):
        return False
    innermost = sch.get(block).iter_vars[-1].var
    return any(
        var.same_as(innermost) for var in tirx.analysis.undefined_vars(value.args[0])
    ) and sch.can_decompose_padding(block, sch.get_loops(block)[0])


def _schedule_spatial(sch, block, cores: int) -> None:
    """A spatial block split by the vector width (or vectorised whole), its outer loops in parallel. Padding
    along the vectors' axis is written as the pad value over the whole buffer first, then the input copied
    into it with no condition (decompose_padding): vectorised with its selects, it ran lane by lane (an int8
    depthwise conv's padded rows on AVX2: the kernel 23 -> 12 us). A concatenation along the vectors' axis
    is computed input by input (_concatenated_pieces), and a copy moving the input's innermost axis in square
    tiles (kernels/transposed_tiles.py)."""
    if _pads_along_rows(sch, block):
        name = sch.get(block).name_hint
        _schedule_loops(sch, sch.decompose_padding(block, sch.get_loops(block)[0]), cores)
        block = sch.get_sblock(name)
    transposed = transposed_tiles.transposed_read(sch, block, VECTOR_LANES)
    if transposed is not None:
        worth_it = _worth_running_in_parallel(sch, block, _work(sch, sch.get_loops(block)))
        outer = transposed_tiles.tile(sch, block, *transposed, VECTOR_LANES)
        _parallelize(sch, outer, cores, worth_it)
        return
    pieces = _concatenated_pieces(sch, block)
    if pieces:
        outer = sch.get_loops(block)[:-1]
        worth_it = _worth_running_in_parallel(sch, block, _work(sch, outer) * sum(pieces))
        for piece in _cut_at(sch, sch.get_loops(block)[-1], pieces):  # the block copied into each piece
            sch.vectorize(piece)
        _parallelize(sch, outer, cores, worth_it)
        return
    along_outer = _concatenated_outer(sch, block)
    if along_outer:
        position, pieces = along_outer
        for cut in sch.loop_partition(sch.get_loops(block)[position], factors=[*pieces[:-1], None]):
            _schedule_loops(sch, sch.get_child_blocks(cut)[0], cores)
        return
    _schedule_loops(sch, block, cores)


def _cut_at(sch, loop, pieces: list[int]) -> list:
    """The loops to vectorise, the innermost `loop` cut at the pieces' bounds: each piece whole where all are
    short, else the loop split into vectors first and the loop over them cut (a piece vectorised whole is one
    vector of its length: YOLOv8-seg's head concatenates 6400, 1600 and 400 anchors, and LLVM had not compiled
    its float32x6400 in 15 minutes)."""
    if max(pieces) <= WHOLE_ROW_LANES:
        return sch.loop_partition(loop, factors=[*pieces[:-1], None])
    lanes = math.gcd(VECTOR_LANES, *pieces)
    vectors, _ = sch.split(loop, [None, lanes])
    cuts = sch.loop_partition(vectors, factors=[piece // lanes for piece in pieces[:-1]] + [None])
    return [sch.get_loops(sch.get_child_blocks(cut)[0])[-1] for cut in cuts]


def _concatenated_pieces(sch, block) -> list[int] | None:
    """The sizes of the inputs a concatenation along the block's innermost axis reads, in order, where each is
    a whole number of vectors: one if_then_else per input on that axis (`start <= v`), evaluated by every lane
    of a vector. torchvision's DenseNet concatenates up to 25 inputs, and such a kernel at 14x14 x 1024 took
    2.8 ms; cut at the inputs' bounds, each piece is a copy whose branch TVM knows."""
    pieces = _pieces_along(sch, block, -1)
    return pieces if pieces and math.gcd(VECTOR_LANES, *pieces) >= MIN_PIECE_LANES else None


def _concatenated_outer(sch, block) -> tuple[int, list[int]] | None:
    """(the position of the iterator, the pieces) of a concatenation along an outer axis with nothing but
    loops of one iteration outside it (YOLOv10's class scores, [1, 2100, 80] from three maps' anchors, then a
    sigmoid): vectorised along the innermost axis, every vector evaluated the if_then_else per use of its
    input, which a sigmoid's exponential has a dozen of (118 us; cut apart, 26 us)."""
    loops, iter_vars = sch.get_loops(block), sch.get(block).iter_vars
    if [_extent(sch, loop) for loop in loops] != [_extent_of(iv) for iv in iter_vars]:
        return None  # the loops are not the block's iterators one for one
    for position in range(len(loops) - 1):
        pieces = _pieces_along(sch, block, position)
        if pieces:
            return position, pieces
        if _extent(sch, loops[position]) != 1:
            return None
    return None


def _pieces_along(sch, block, position: int) -> list[int] | None:
    """The sizes of the inputs a concatenation along the block's iterator at `position` reads, in order (the
    loop at `position` its loop): one if_then_else per input on that iterator (`start <= v`); or None."""
    from tvm import ir, tirx

    value = getattr(sch.get(block).body, "value", None)
    loops, iter_vars = sch.get_loops(block), sch.get(block).iter_vars
    extent = _extent(sch, loops[position]) if loops else None
    if value is None or not extent or not iter_vars:
        return None
    var, starts = iter_vars[position].var, set()
    for node in subexpressions(value):
        if (
            isinstance(node, ir.Call)
            and getattr(node.op, "name", None) == "prim.if_then_else"
            and isinstance(node.args[0], tirx.LE)
            and isinstance(node.args[0].a, tirx.IntImm)
            and node.args[0].b.same_as(var)
        ):
            starts.add(int(node.args[0].a.value))
    bounds = [0, *sorted(b for b in starts if 0 < b < extent), extent]
    pieces = [b - a for a, b in zip(bounds, bounds[1:])]
    return pieces if len(pieces) > 1 else None


def _schedule_loops(sch, block, cores: int) -> None:
    loops = sch.get_loops(block)
    if not loops:
        return
    worth_it = _worth_running_in_parallel(sch, block, _work(sch, loops))
    extent = _extent(sch, loops[-1])
    if extent and extent % VECTOR_LANES and VECTOR_LANES < extent <= WHOLE_ROW_LANES:
        sch.vectorize(loops[-1])
        loops = loops[:-1]
    # the row's own loop stays whole where it is all there is to run in parallel (a 1-D tensor)
    elif (
        extent
        and extent % VECTOR_LANES
        and extent > WHOLE_ROW_LANES
        and not _divides_row(sch, block)
        and (not worth_it or _work(sch, loops[:-1]) >= 2 * cores)
    ):
        row_reductions.in_vectors(sch, loops[-1])  # YOLO's 2100 anchors had run in 4-lane vectors: 3.3x slower
        loops = loops[:-1]
    elif (split := _vector_split(sch, loops[-1])) is not None:
        outer, inner = split
        sch.vectorize(inner)
        loops = [*loops[:-1], outer]
    _parallelize(sch, loops, cores, worth_it)


def _divides_row(sch, block) -> bool:
    """Whether the block's value divides, or takes the remainder of, an index by the row's iterator (a reshape
    read through its flat index): a row split by its widest divisor keeps each vector inside one row of the
    input, which TVM can prove, and one of 16 lanes beside a tail does not, so its loads became gathers
    (layout's int8 reshape [64, 2, 15200] -> [64, 200, 152]: 75 -> 1330 us). _simplified now makes that read
    affine in the row's iterator; this keeps the rows whose division the simplifier leaves."""
    from tvm import tirx

    value = getattr(sch.get(block).body, "value", None)
    if value is None or not sch.get(block).iter_vars:
        return False
    innermost = sch.get(block).iter_vars[-1].var
    indices = (
        part
        for load in subexpressions(value)
        for index in getattr(load, "indices", ())  # buffer loads
        for part in subexpressions(index)
    )
    return any(
        isinstance(part, (tirx.FloorDiv, tirx.FloorMod))
        and any(v.same_as(innermost) for v in tirx.analysis.undefined_vars(part.a))
        for part in indices
    )


def _worth_running_in_parallel(sch, block, elements: int) -> bool:
    """Whether an element-wise block over `elements` runs faster on every core: a copy from PARALLEL_MIN_WORK
    elements, a function of many terms from as many fewer as it has TERMS_PER_COPY times its terms (a
    sigmoid, 549 terms once fast_math has written out its exponential, from 24 Ki elements)."""
    return elements * max(1, _terms(sch, block) // TERMS_PER_COPY) >= PARALLEL_MIN_WORK


def _terms(sch, block) -> int:
    """The terms of the value the block stores (0 where it stores none): what an element costs to compute."""
    value = getattr(sch.get(block).body, "value", None)
    return 0 if value is None else sum(1 for _ in subexpressions(value))
