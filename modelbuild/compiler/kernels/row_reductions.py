"""Reductions over the last axis as vector partial results, one row at a time: what softmax.py and
layer_norm.py are built from.

TVM's own kernels for them (softmax, layer_norm) reduce each row in whole-tensor blocks, which the default
schedule could only vectorise across rows (a gather per vector, from rows a row's length apart), and left
others scalar and on one core. Here a row's reduction is first taken in `width` partial results, CHAINS
vectors of them on a long row (element b * width + l goes to partial l: contiguous vector loads), the CHAINS
vectors and the row's last len % width elements folded into one vector, whose lanes are halved to two;
every block is computed one row at a time under the output's row loop (what a row's later blocks read stays
in cache), rows in parallel, and every sweep along a row is whole vectors and one shorter vector for its
tail.
"""

from __future__ import annotations

from modelbuild.compiler.kernels.iterators import is_reduction

LANES = 16  # float32 lanes of AVX-512: one vector of partial results
CHAINS = 4  # vectors of partial results on a long row: independent max and add chains hide their latency
PARALLEL_MIN_ELEMENTS = 1 << 15  # rows x columns below which one thread is faster


def long_enough(shape, axes) -> bool:
    """Whether a reduction of this static shape over `axes` is the last axis alone, two vectors long or more."""
    dims = [int(d) for d in shape]
    return [int(a) % len(dims) for a in axes] == [len(dims) - 1] and dims[-1] >= 2 * LANES


def partial_width(length: int) -> int:
    """Partial results per row: CHAINS vectors where the row has at least two steps of them, else one."""
    return LANES * CHAINS if length >= 2 * LANES * CHAINS else LANES


def row_reduction(element, rows: tuple, length: int, combine, name: str):
    """combine(element(r, k)) over k < length, per row r: in partial results (block `name + "_partial"`),
    their CHAINS vectors and the row's tail folded into one vector (block `name + "_lanes"`), then its lanes
    halved (blocks `name + "_half8"` to `"_half2"`, each combining a vector's two halves) and the last two
    combined (block `name`): the tail and the 16 lanes had been folded one element at a time, dependent
    scalar steps (a softmax over rows of 1000: 56 a reduction, now 3 vectors, 3 halvings and one step).
    Only te.sum and te.max combine here (the tail's masked lanes take their identity)."""
    from tvm import te

    width = partial_width(length)
    whole = length // width * width
    b = te.reduce_axis((0, whole // width), "b")
    partial = te.compute(
        (*rows, width), lambda *i: combine(element(i[:-1], b * width + i[-1]), axis=b), name=name + "_partial"
    )
    vectors = width // LANES + -(-(length - whole) // LANES)
    if vectors > 1:
        c = te.reduce_axis((0, vectors), "c")
        partial = te.compute(
            (*rows, LANES),
            lambda *i: combine(_fold_term(partial, element, i[:-1], i[-1], c, whole, length, combine), axis=c),
            name=name + "_lanes",
        )
    for lanes in (LANES // 2, LANES // 4, LANES // 8):
        partial = _halved(partial, rows, lanes, combine, f"{name}_half{lanes}")
    j = te.reduce_axis((0, 2), "j")
    return te.compute(rows, lambda *r: combine(partial[(*r, j)], axis=j), name=name)


def _halved(partial, rows: tuple, lanes: int, combine, name: str):
    """The partial results' two halves combined, lane by lane."""
    from tvm import te

    h = te.reduce_axis((0, 2), "h")
    return te.compute((*rows, lanes), lambda *i: combine(partial[(*i[:-1], i[-1] + h * lanes)], axis=h), name=name)


def _fold_term(partial, element, row, lane, c, whole: int, length: int, combine):
    """Term c of lane `lane` of a row's fold: the CHAINS vectors of partial results, the tail's whole vectors,
    then the row's last LANES elements with the lanes a vector before counted masked to the identity. The
    choice between them is by c, the same for every lane: each term is one vector."""
    from tvm import te, tirx

    chains = int(partial.shape[-1]) // LANES
    tail_vectors = (length - whole) // LANES
    counted = whole + tail_vectors * LANES
    term = None
    if counted < length:
        identity = tirx.min_value(partial.dtype) if combine is te.max else tirx.const(0, partial.dtype)
        term = tirx.Select(length - LANES + lane >= counted, element(row, length - LANES + lane), identity)
    if tail_vectors:
        vector = element(row, whole + (c - chains) * LANES + lane)
        term = vector if term is None else tirx.if_then_else(c < chains + tail_vectors, vector, term)
    chained = partial[(*row, c * LANES + lane)]
    return chained if term is None else tirx.if_then_else(c < chains, chained, term)


def partial_names(*reductions: str) -> tuple[str, ...]:
    """The names of the partial-result blocks of row_reduction's with these names (those `schedule` is
    given)."""
    return tuple(name + "_partial" for name in reductions)


def schedule(sch, cores: int, partials: tuple[str, ...]) -> None:
    """Every block one row at a time under the output's row loop; the `partials` blocks and row sweeps in
    vectors."""
    root = sch.get_sblock("root")
    output = sch.get_output_blocks(root)[0]
    loops = sch.get_loops(output)
    elements = 1
    for loop in loops:
        elements *= int(sch.get(loop).extent)
    row = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
    output_name = sch.get(output).name_hint
    blocks = [b for b in sch.get_child_blocks(root) if sch.get(b).name_hint != output_name]
    for block in reversed(blocks):
        sch.compute_at(block, row, preserve_unit_loops=True)
    # annotated before any loop is partitioned: parallel needs whole blocks below it
    if cores > 1 and elements >= PARALLEL_MIN_ELEMENTS and int(sch.get(row).extent) > 1:
        sch.parallel(row)
    totals = {name.removesuffix("_partial") for name in partials}  # the one reduction of each without lanes
    in_lanes = [b for b in blocks if is_reduction(sch, b) and sch.get(b).name_hint not in totals]
    for block in in_lanes:
        _partial_in_lanes(sch, block)
    # partitioned last: a partitioned loop leaves blocks the reductions' steps cannot be applied beside
    for block in [*blocks, output]:
        if block not in in_lanes and not is_reduction(sch, block):
            _sweep_in_vectors(sch, block)


def _partial_in_lanes(sch, block) -> None:
    """[lane, step] -> [step, lane]: each step is one vector load and one vector max or add."""
    *_, lane, step = sch.get_loops(block)
    sch.reorder(step, lane)
    sch.vectorize(lane)
    init = sch.decompose_reduction(block, step)
    sch.vectorize(sch.get_loops(init)[-1])


def _sweep_in_vectors(sch, block) -> None:
    in_vectors(sch, sch.get_loops(block)[-1])


def in_vectors(sch, innermost) -> None:
    """A loop over a row as whole vectors and one shorter vector for its tail (the default schedule's
    element-wise rows too)."""
    length = int(sch.get(innermost).extent)
    whole = length // LANES * LANES
    if whole == 0:
        return
    if whole != length:
        innermost, tail = sch.loop_partition(innermost, factors=[whole, None])
        sch.vectorize(tail)
    _, vector = sch.split(innermost, factors=[None, LANES])
    sch.vectorize(vector)
