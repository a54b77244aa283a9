"""Max pools whose windows are two columns wide at a stride of two, in NCHW (a MobileNet classifier's last
pool in an int8 build, which keeps NCHW), each vector of outputs two vector loads and two shuffles.

TVM's pool reads input columns 2x and 2x + 1 for output column x: vectorised along the output row, each
lane's load is two floats from the next, which LLVM compiles to one scalar load and insert per lane (the int8
text classifier's 2x2 pool over 200 x 2 x 96 floats took 17-20 us alone, its float build's channels-last pool
4 us). Here each row of the window is one max of a vector of even and a vector of odd columns, shuffled from
two contiguous vector loads.

Eligible: max_pool2d of float32, NCHW, static shapes, window width 2 and column stride 2, no padding, no
dilation, and output rows of whole vectors of 16, 8 or 4 floats. The values are those of TVM's pool: a max
is exact, whatever its order.
"""

from __future__ import annotations

BLOCK = "pairwise_max_pool"
BLOCKS = (BLOCK,)
WIDTHS = (16, 8, 4)  # output floats of one vector, widest first: 16 x 4 bytes, the AVX-512 vector
PARALLEL_MIN_OUTPUTS = 1 << 15  # below which one thread is faster (the text classifier's pool: 9600)


def eligible(call) -> bool:
    """A max_pool2d this kernel computes (see the module's docstring)."""
    attrs = call.attrs
    try:
        shape = [int(d) for d in call.ty.shape]
        in_shape = [int(d) for d in call.args[0].ty.shape]
    except (AttributeError, TypeError, ValueError):
        return False
    rows, row_stride = int(attrs.pool_size[0]), int(attrs.strides[0])
    return (
        str(attrs.layout) == "NCHW"
        and str(attrs.out_layout) == "NCHW"
        and str(call.ty.dtype) == "float32"
        and int(attrs.pool_size[1]) == 2
        and int(attrs.strides[1]) == 2
        and all(int(p) == 0 for p in attrs.padding)
        and all(int(d) == 1 for d in attrs.dilation)
        and len(shape) == 4
        and vector_width(shape[3]) is not None
        # every window inside the input: ceil_mode's last window may hang over its edge
        and 2 * shape[3] <= in_shape[3]
        and (shape[2] - 1) * row_stride + rows <= in_shape[2]
    )


def vector_width(row: int) -> int | None:
    """The widest vector of WIDTHS that divides an output row, or None."""
    return next((w for w in WIDTHS if row % w == 0), None)


def legalize_max_pool2d(bb, call):
    """An eligible max_pool2d as out[n, c, y, x] = max over (r, k) of data[n, c, y * stride + r, 2x + k]; any
    other as TVM legalises it."""
    from tvm import ir, te

    if not eligible(call):
        return ir.Op.get("relax.nn.max_pool2d").get_attr("FLegalize")(bb, call)
    rows, row_stride = int(call.attrs.pool_size[0]), int(call.attrs.strides[0])
    out_shape = [int(d) for d in call.ty.shape]

    def pool(data):
        r = te.reduce_axis((0, rows), "r")
        k = te.reduce_axis((0, 2), "k")
        return te.compute(
            out_shape, lambda b, c, y, x: te.max(data[b, c, y * row_stride + r, x * 2 + k], axis=[r, k]), name=BLOCK
        )

    return bb.call_te(pool, call.args[0], primfunc_name_hint="max_pool2d")


def schedule(sch, cores: int) -> None:
    """Rows in parallel when there are outputs enough; each output vector starts at the max's identity and takes
    the window's rows one at a time, each row one intrinsic (two loads, two shuffles, two maxes)."""
    block = sch.get_sblock(BLOCK)
    b, c, y, x, r, k = sch.get_loops(block)
    width = vector_width(int(sch.get(x).extent))
    outputs = 1
    for loop in (b, c, y, x):
        outputs *= int(sch.get(loop).extent)
    columns, lanes = sch.split(x, factors=[None, width])
    sch.reorder(b, c, y, columns, r, lanes, k)
    if cores > 1 and outputs >= PARALLEL_MIN_OUTPUTS:
        sch.parallel(sch.fuse(b, c, y))
    init = sch.decompose_reduction(block, r)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(lanes, _intrinsic(width))


_registered: set[str] = set()


def _intrinsic(lanes: int) -> str:
    """c[i] = max(c[i], a[2i], a[2i + 1]) for `lanes` float32 outputs, registered once per width."""
    name = f"modelbuild_pairwise_max_w{lanes}"
    if name in _registered:
        return name
    from tvm import tirx
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    vector = f"float32x{lanes}"
    even = [tirx.IntImm("int32", 2 * i) for i in range(lanes)]
    odd = [tirx.IntImm("int32", 2 * i + 1) for i in range(lanes)]

    @T.prim_func(s_tir=True)
    def description(
        a: T.Buffer((2 * lanes,), "float32", offset_factor=1), c: T.Buffer((lanes,), "float32", offset_factor=1)
    ) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0 : 2 * lanes])
            T.writes(c[0:lanes])
            for i, k in T.grid(lanes, 2):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    c[vi] = T.max(c[vi], a[vi * 2 + vk])

    @T.prim_func(s_tir=True)
    def implementation(
        a: T.Buffer((2 * lanes,), "float32", offset_factor=1), c: T.Buffer((lanes,), "float32", offset_factor=1)
    ) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0 : 2 * lanes])
            T.writes(c[0:lanes])
            pair = [a.vload([0], vector), a.vload([lanes], vector)]
            c[T.ramp(0, 1, lanes)] = T.max(c.vload([0], vector), T.max(T.Shuffle(pair, even), T.Shuffle(pair, odd)))

    TensorIntrin.register(name, description, implementation, override=True)
    _registered.add(name)
    return name
