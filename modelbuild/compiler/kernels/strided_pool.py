"""Max and average pools in NCHW whose windows are two or three columns wide at a column stride of two (a
ResNet stem's 3x3 max pool in an int8 build, which keeps NCHW; a MobileNet classifier's last pool; a model of
pools alone): each output vector from contiguous vector loads and shuffles.

TVM's pool reads input column 2x + k for output column x: vectorised along the output row, each lane's load
is two floats from the next, which LLVM compiles to one scalar load and insert per lane (measured in
bench/results/README.md). Here each window row is, per vector of outputs, one or two pairs of contiguous
vector loads whose even or odd lanes are the columns a tap reads.

Three blocks: the input copied into a buffer padded with the pool's identity (the lowest float for a max, 0
for an average) out to whole vectors of outputs; the pool over it, output rows rounded up to whole vectors;
and the outputs kept, an average's divided by its window's size (or, where the pool excludes the padding, by
the count of its cells inside the input).

Eligible: max_pool2d or avg_pool2d of float32, NCHW, static shapes, a window two or three columns wide at
column stride two, no dilation, no ceil_mode. A max equals TVM's exactly; a sum adds the same cells in
another order.
"""

from __future__ import annotations

from modelbuild.compiler.relax_rewrite import known_shape

BLOCK = "strided_pool"
PAD_BLOCK = "strided_pool_pad"
BLOCKS = (BLOCK,)
OPS = {"relax.nn.max_pool2d": "max", "relax.nn.avg_pool2d": "avg"}
WIDTHS = (16, 8, 4)  # output floats of one vector, widest first: 16 x 4 bytes, the AVX-512 vector
MAX_ROUNDING = 8  # a row is rounded up to vectors of a width if that adds at most 1/8 of it (37 -> 40, not 48)
PARALLEL_MIN_OUTPUTS = 1 << 15  # below which one thread is faster (the text classifier's pool: 9600)
MIN_PLANES_A_CORE = 4  # channels a core for channels to be the parallel unit, each padded once


def eligible(call) -> bool:
    """A pool this kernel computes (see the module's docstring)."""
    op = getattr(call.op, "name", None)
    attrs = call.attrs
    shape = known_shape(call)
    if shape is None or known_shape(call.args[0]) is None:
        return False
    return (
        op in OPS
        and str(attrs.layout) == "NCHW"
        and str(attrs.out_layout) == "NCHW"
        and str(call.ty.dtype) == "float32"
        and len(shape) == 4
        and int(attrs.pool_size[1]) in (2, 3)
        and int(attrs.strides[1]) == 2
        and all(int(d) == 1 for d in attrs.dilation)
        and not bool(attrs.ceil_mode)
    )


def vector_width(row: int) -> int:
    """The widest vector of WIDTHS whose whole number covering an output row adds at most 1/MAX_ROUNDING of it;
    the narrowest where none does."""
    for width in WIDTHS:
        if (-(-row // width) * width - row) * MAX_ROUNDING <= row:
            return width
    return WIDTHS[-1]


def legalize(bb, call):
    """An eligible pool as the three blocks of the module's docstring; any other as TVM legalises it."""
    from tvm import ir, te, tirx

    op = getattr(call.op, "name", None)
    if not eligible(call):
        return ir.Op.get(op).get_attr("FLegalize")(bb, call)
    kind, attrs = OPS[op], call.attrs
    n, c, h, w = (int(d) for d in call.args[0].ty.shape)
    _, _, out_h, out_w = (int(d) for d in call.ty.shape)
    rows, columns = (int(s) for s in attrs.pool_size)
    row_stride = int(attrs.strides[0])
    top, left = int(attrs.padding[0]), int(attrs.padding[1])
    width = vector_width(out_w)
    computed = -(-out_w // width) * width
    identity = tirx.min_value("float32") if kind == "max" else tirx.const(0.0, "float32")
    # the last vector's taps read up to column 2 * computed + columns - 3 of the padded row
    padded_shape = (n, c, (out_h - 1) * row_stride + rows, 2 * computed + columns - 2)
    include_pad = kind == "max" or bool(getattr(attrs, "count_include_pad", False))

    def pool(data):
        padded = te.compute(
            padded_shape,
            lambda b, ch, y, x: tirx.if_then_else(
                tirx.all(y >= top, y < h + top, x >= left, x < w + left), data[b, ch, y - top, x - left], identity
            ),
            name=PAD_BLOCK,
        )
        r = te.reduce_axis((0, rows), "r")
        k = te.reduce_axis((0, columns), "k")
        reduce = te.max if kind == "max" else te.sum
        pooled = te.compute(
            (n, c, out_h, computed),
            lambda b, ch, y, x: reduce(padded[b, ch, y * row_stride + r, x * 2 + k], axis=[r, k]),
            name=BLOCK,
        )

        def kept(b, ch, y, x):
            if kind == "max":
                return pooled[b, ch, y, x]
            if include_pad:
                return pooled[b, ch, y, x] / tirx.const(float(rows * columns), "float32")
            first_row, first_column = y * row_stride - top, x * 2 - left
            inside_rows = tirx.min(first_row + rows, h) - tirx.max(first_row, 0)
            inside_columns = tirx.min(first_column + columns, w) - tirx.max(first_column, 0)
            return pooled[b, ch, y, x] / (inside_rows * inside_columns).astype("float32")

        return te.compute((n, c, out_h, out_w), kept, name=f"pool_{kind}")

    return bb.call_te(pool, call.args[0], primfunc_name_hint=f"{kind}_pool2d")


def schedule(sch, cores: int) -> None:
    """Channels in parallel where there are outputs enough; each output vector starts at the pool's identity
    and takes the window's rows one at a time, each row one intrinsic. A channel's padded input is copied
    just before its rows are pooled (while it is in cache, and once: a row's windows overlap the next's),
    and each row's outputs kept just after, both vectorised. With fewer channels than MIN_PLANES_A_CORE a
    core, rows are the parallel unit, each with the rows of padded input it reads."""
    block = sch.get_sblock(BLOCK)
    b, c, y, x, r, k = sch.get_loops(block)
    consumers = sch.get_consumers(block)
    kept_width = int(sch.get(sch.get_loops(consumers[0])[-1]).extent) if consumers else int(sch.get(x).extent)
    width = vector_width(kept_width)
    columns = int(sch.get(k).extent)
    planes = int(sch.get(b).extent) * int(sch.get(c).extent)
    outputs = planes * int(sch.get(y).extent) * int(sch.get(x).extent)
    vectors, lanes = sch.split(x, factors=[None, width])
    sch.reorder(b, c, y, vectors, r, lanes, k)
    kind = "max" if _is_max(sch, block) else "avg"
    if planes >= MIN_PLANES_A_CORE * cores:
        plane, row = sch.fuse(b, c), y
        pad_at = plane
    else:
        plane = row = sch.fuse(b, c, y)
        pad_at = row
    if cores > 1 and outputs >= PARALLEL_MIN_OUTPUTS:
        sch.parallel(plane)
    pad = sch.get_sblock(PAD_BLOCK)
    sch.compute_at(pad, pad_at)
    sch.vectorize(sch.get_loops(pad)[-1])
    for consumer in consumers:
        sch.reverse_compute_at(consumer, row)
        sch.vectorize(sch.get_loops(consumer)[-1])
    init = sch.decompose_reduction(block, vectors)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(lanes, _intrinsic(kind, width, columns))


def _is_max(sch, block) -> bool:
    from tvm import tirx

    return isinstance(sch.get(block).body.value, tirx.Max)


_registered: set[str] = set()


def _intrinsic(kind: str, lanes: int, columns: int) -> str:
    """c[i] = c[i] (op) a[2i] (op) a[2i + 1] [(op) a[2i + 2]] for `lanes` float32 outputs and windows `columns`
    wide, op a max or a sum; registered once per kind, width and window."""
    name = f"modelbuild_strided_{kind}_pool_w{lanes}_k{columns}"
    if name in _registered:
        return name
    from tvm import tirx
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    vector = f"float32x{lanes}"
    even = [tirx.IntImm("int32", 2 * i) for i in range(lanes)]
    odd = [tirx.IntImm("int32", 2 * i + 1) for i in range(lanes)]
    span = 2 * lanes + columns - 2  # a[0] to a[2 (lanes - 1) + columns - 1]

    def combine(x, y):
        return T.max(x, y) if kind == "max" else x + y

    @T.prim_func(s_tir=True)
    def description(
        a: T.Buffer((span,), "float32", offset_factor=1), c: T.Buffer((lanes,), "float32", offset_factor=1)
    ) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:span])
            T.writes(c[0:lanes])
            for i, k in T.grid(lanes, columns):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    c[vi] = combine(c[vi], a[vi * 2 + vk])

    @T.prim_func(s_tir=True)
    def implementation(
        a: T.Buffer((span,), "float32", offset_factor=1), c: T.Buffer((lanes,), "float32", offset_factor=1)
    ) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:span])
            T.writes(c[0:lanes])
            pair = [a.vload([0], vector), a.vload([lanes], vector)]
            window = combine(T.Shuffle(pair, even), T.Shuffle(pair, odd))
            if columns == 3:  # a[2i + 2]: the odd lanes of the pair one column on, which ends at a[2 lanes]
                window = combine(window, T.Shuffle([a.vload([1], vector), a.vload([lanes + 1], vector)], odd))
            c[T.ramp(0, 1, lanes)] = combine(c.vload([0], vector), window)

    TensorIntrin.register(name, description, implementation, override=True)
    _registered.add(name)
    return name
