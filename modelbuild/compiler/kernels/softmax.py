"""Softmax over the last axis as vector partial reductions, one row at a time.

TVM's softmax (even its fast_softmax) is four blocks over the whole tensor: a max over each row, exp, a sum
over each row, a division. The default schedule could only vectorise the two reductions across rows (a
gather per vector from rows 18710 floats apart) and left the sum scalar: a recogniser's softmax over
[40, 18710] classes ran at 1.5 ns per element, 7x onnxruntime's time. Here the row's max and sum are first
taken in `width` partial results, CHAINS vectors of them on a long row (element b * width + l goes to
partial l: contiguous vector loads), then across the partials and the row's last len % width elements;
every block is computed one row at a time (the row's exponentials stay in cache between the sum and the
scaling), rows in parallel, and the row is scaled by one reciprocal. exp is TVM's fast_exp polynomial
(fast_math.py's error bound). The [40, 18710] softmax: 1.08 -> 0.21 ms alone (2 threads).

Rows shorter than 2 * LANES, and a softmax over any other axis, keep TVM's fast_softmax.
"""

from __future__ import annotations

LANES = 16  # float32 lanes of AVX-512: one vector of partial results
CHAINS = 4  # vectors of partial results on a long row: independent max and add chains hide their latency
PARTIAL_MAX = "softmax_partial_max"
PARTIAL_SUM = "softmax_partial_sum"
BLOCKS = (PARTIAL_MAX,)
PARALLEL_MIN_ELEMENTS = 1 << 15  # rows x columns below which one thread is faster


def eligible(shape, axis: int) -> bool:
    """Whether a softmax of this static shape over `axis` is computed here."""
    dims = [int(d) for d in shape]
    return axis in (-1, len(dims) - 1) and dims[-1] >= 2 * LANES


def partial_width(length: int) -> int:
    """Partial results per row: CHAINS vectors where the row has at least two steps of them, else one."""
    return LANES * CHAINS if length >= 2 * LANES * CHAINS else LANES


def compute(x, axis: int):
    """softmax(x) over the last axis: max and sum in partials, then across them and the row's tail."""
    from tvm import te, tirx, topi

    del axis  # eligible() checked it is the last
    *rows, length = [int(d) for d in x.shape]
    width = partial_width(length)
    whole = length // width * width

    def lanes_then_tail(partial, element, combine, name):
        # one reduction over the partials followed by the row's tail
        j = te.reduce_axis((0, width + length - whole), "j")
        return te.compute(tuple(rows), lambda *r: combine(
            tirx.if_then_else(j < width, partial[(*r, j)], element(r, whole + j - width)), axis=j), name=name)

    b = te.reduce_axis((0, whole // width), "b")
    partial_max = te.compute((*rows, width), lambda *i: te.max(x[(*i[:-1], b * width + i[-1])], axis=b),
                             name=PARTIAL_MAX)
    row_max = lanes_then_tail(partial_max, lambda r, k: x[(*r, k)], te.max, "softmax_max")
    delta = te.compute(x.shape, lambda *i: x[i] - row_max[i[:-1]], name="softmax_delta")
    exp = topi.fast_exp(delta)
    c = te.reduce_axis((0, whole // width), "c")
    partial_sum = te.compute((*rows, width), lambda *i: te.sum(exp[(*i[:-1], c * width + i[-1])], axis=c),
                             name=PARTIAL_SUM)
    row_sum = lanes_then_tail(partial_sum, lambda r, k: exp[(*r, k)], te.sum, "softmax_sum")
    scale = te.compute(tuple(rows), lambda *r: tirx.const(1.0, x.dtype) / row_sum[r], name="softmax_scale")
    return te.compute(x.shape, lambda *i: exp[i] * scale[i[:-1]], name="softmax_norm")


def schedule(sch, cores: int) -> None:
    """Every block one row at a time under the output's row loop; partials and row sweeps in vectors."""
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
    partials = [b for b in blocks if sch.get(b).name_hint in (PARTIAL_MAX, PARTIAL_SUM)]
    for block in partials:
        _partial_in_lanes(sch, block)
    # partitioned last: a partitioned loop leaves blocks the reductions' steps cannot be applied beside
    for block in [*blocks, output]:
        if block not in partials and not _is_reduction(sch, block):
            _sweep_in_vectors(sch, block)


def _is_reduction(sch, block) -> bool:
    return any(int(iv.iter_type) == 2 for iv in sch.get(block).iter_vars)


def _partial_in_lanes(sch, block) -> None:
    """[lane, step] -> [step, lane]: each step is one vector load and one vector max or add."""
    *_, lane, step = sch.get_loops(block)
    sch.reorder(step, lane)
    sch.vectorize(lane)
    init = sch.decompose_reduction(block, step)
    sch.vectorize(sch.get_loops(init)[-1])


def _sweep_in_vectors(sch, block) -> None:
    """A loop over the row as whole vectors and one shorter vector for its tail."""
    innermost = sch.get_loops(block)[-1]
    length = int(sch.get(innermost).extent)
    whole = length // LANES * LANES
    if whole == 0:
        return
    if whole != length:
        innermost, tail = sch.loop_partition(innermost, factors=[whole, None])
        sch.vectorize(tail)
    _, vector = sch.split(innermost, factors=[None, LANES])
    sch.vectorize(vector)
