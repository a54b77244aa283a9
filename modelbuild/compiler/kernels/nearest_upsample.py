"""Nearest-neighbour upsampling by whole factors in NCHW (an FPN's or a YOLO neck's 2x, a DB detector's 2x, 4x
and 8x), each output vector one load of the input row and one shuffle.

TVM legalises resize2d with the source index clamped and divided per element; vectorised along the output
row, each lane's load has its own index, which LLVM compiles to one scalar load and insert per lane: a 2x
upsampling of 96 x 80 x 80 floats took 2.2 ms alone (2 threads), and an int8 build, which keeps NCHW, has
several (a float build runs them channels-last, moving whole channel vectors). Here output columns
16k..16k+15 of a row repeat input columns 16k/f..16k/f + 16/f - 1, each f times: one vector load and one
shuffle (LLVM picks a permute); rows that 16 does not divide take 8 or 4 columns a shuffle.

Eligible: what TVM itself computes with integer division, so the values are the same by construction:
method nearest_neighbor, coordinate transformation asymmetric, rounding floor (or the default), NCHW, static
shapes, output sides whole multiples of the input's. The shuffle takes rows of whole vectors of 16, 8 or 4
and factors that divide the vector; other eligible resizes keep the plain index (no clamps) and TVM's
vectoriser.
"""

from __future__ import annotations

from modelbuild.compiler.relax_rewrite import known_dims

LAYOUTS = {"NCHW": (2, 3), "NHWC": (1, 2)}  # the height and width axes

BLOCK = "nearest_upsample"
FUNCTION = "resize2d"  # the kernel's name, as TVM names its own resize2d (FuseOps' names read the same)
VECTOR_BYTES = (64, 32, 16)  # one shuffle's output, widest first: the AVX-512 vector, then AVX2's and SSE's
SHUFFLED = {"float32": 4, "int8": 1, "uint8": 1}  # the dtypes whose rows take the shuffle, by their bytes


def eligible(call) -> bool:
    """A resize2d that is a nearest-neighbour upsampling by whole factors, as TVM computes it with integer
    division (see the module's docstring)."""
    attrs = call.attrs
    if not (
        str(attrs.method) == "nearest_neighbor"
        and str(attrs.coordinate_transformation_mode) == "asymmetric"
        and str(attrs.rounding_method) in ("", "floor")
        and str(attrs.layout) == "NCHW"
        and str(call.ty.dtype) == str(call.args[0].ty.dtype)
    ):
        return False
    return upsampling_factors(call.args[0].ty.shape, call.ty.shape) is not None


def upsampling_factors(in_shape, out_shape, layout: str = "NCHW") -> tuple[int, int] | None:
    """(fh, fw) where the output's height and width are whole multiples of the input's (1 included) and every
    other side is the same; None otherwise or if a shape is dynamic. Linear upsampling asks the same."""
    source, target = known_dims(in_shape), known_dims(out_shape)
    if source is None or target is None or len(source) != 4 or len(target) != 4:
        return None
    h, w = LAYOUTS[layout]
    if any(source[a] != target[a] for a in range(4) if a not in (h, w)):
        return None
    if any(target[a] % source[a] or target[a] < source[a] for a in (h, w)):
        return None
    return target[h] // source[h], target[w] // source[w]


def legalize_resize2d(bb, call):
    """An eligible resize2d (see `eligible`) as out[n, c, y, x] = data[n, c, y / fh, x / fw]; any other as TVM
    legalises it."""
    from tvm import ir, te

    if not eligible(call):
        return ir.Op.get("relax.image.resize2d").get_attr("FLegalize")(bb, call)

    fh, fw = upsampling_factors(call.args[0].ty.shape, call.ty.shape)

    def upsample(data):
        n, channels, height, width = (int(d) for d in data.shape)
        return te.compute(
            (n, channels, height * fh, width * fw),
            lambda b, c, y, x: data[b, c, y // fh, x // fw],
            name=BLOCK,
            attrs={"factor": fw},
        )

    return bb.call_te(upsample, call.args[0], primfunc_name_hint=FUNCTION)


def vector_width(row: int, factor: int, dtype: str = "float32") -> int | None:
    """The widest vector of VECTOR_BYTES, in elements of `dtype`, that divides the row and that the factor
    divides (the layout net's 76-column float rows: 4), or None."""
    return next(
        (w for w in (size // SHUFFLED[dtype] for size in VECTOR_BYTES) if row % w == 0 and w % factor == 0), None
    )


def shuffles(sch, block) -> bool:
    """Whether the block's rows take the shuffle (see `vector_width`): float32, or 8-bit data (a DB
    detector's FPN maps, quantized before they are upsampled: compiler/passes/early_quantize.py)."""
    return _dtype(sch, block) in SHUFFLED and _width(sch, block) is not None


def tensorize_rows(sch, block) -> None:
    """Each row of the block in vectors, each one load and one shuffle (see `shuffles`). TVM 0.27 cannot
    copy a schedule after a tensorize (Schedule.copy fails), so this comes last."""
    width = _width(sch, block)
    _, lanes = sch.split(sch.get_loops(block)[-1], factors=[None, width])
    sch.tensorize(lanes, _intrinsic(int(sch.get(block).annotations["factor"]), width, _dtype(sch, block)))


def _width(sch, block) -> int | None:
    return vector_width(
        int(sch.get(sch.get_loops(block)[-1]).extent), int(sch.get(block).annotations["factor"]), _dtype(sch, block)
    )


def _dtype(sch, block) -> str:
    return str(sch.get(block).writes[0].source.dtype)


_registered: set[str] = set()


def _intrinsic(factor: int, lanes: int, dtype: str = "float32") -> str:
    """out[i] = in[i / factor] for `lanes` outputs of `dtype`, registered once per factor, width and dtype."""
    name = f"modelbuild_nearest_upsample_f{factor}_w{lanes}_{dtype}"
    if name in _registered:
        return name
    from tvm import tirx
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    source = lanes // factor
    order = [tirx.IntImm("int32", i // factor) for i in range(lanes)]

    @T.prim_func(s_tir=True)
    def description(
        a: T.Buffer((source,), dtype, offset_factor=1), b: T.Buffer((lanes,), dtype, offset_factor=1)
    ) -> None:
        with T.sblock("root"):
            T.reads(a[0:source])
            T.writes(b[0:lanes])
            for i in T.serial(0, lanes):
                with T.sblock("repeat"):
                    vi = T.axis.remap("S", [i])
                    b[vi] = a[vi // factor]

    @T.prim_func(s_tir=True)
    def implementation(
        a: T.Buffer((source,), dtype, offset_factor=1), b: T.Buffer((lanes,), dtype, offset_factor=1)
    ) -> None:
        with T.sblock("root"):
            T.reads(a[0:source])
            T.writes(b[0:lanes])
            # a shuffle may select no more lanes than its inputs hold: the one vector, given factor times
            b[T.ramp(0, 1, lanes)] = T.Shuffle([a.vload([0], f"{dtype}x{source}")] * factor, order)

    TensorIntrin.register(name, description, implementation, override=True)
    _registered.add(name)
    return name
