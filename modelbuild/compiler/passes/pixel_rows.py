"""int8 1x1 convs on maps whose width the vector lanes do not divide, computed on the same pixels cut into
rows that they do divide.

A packed int8 conv (kernels/packed_conv.py) puts output columns in its vector lanes where a row rounds up
to whole vectors with little waste (the extra columns computed and dropped, and the epilogue run per row),
and otherwise output channels, whose accumulators the epilogue must gather back into NCHW: a 38-column row
of the layout net took the gathers. A 1x1 conv of stride 1 without padding is the same matrix product
whatever the rows of its map are, and so are the element-wise operators after it (rescale, bias,
activation, quantize: their constants are per channel or scalars), so the map [N, C, H, W] is computed as
[N, C, H', W'] with H' x W' = H x W and W' a row the lanes take with less waste (50 x 38 as 2 x 950,
computed as 960; 100 x 76 as 5 x 1520, whole vectors), and reshaped back after the last such operator. A
reshape of a contiguous tensor is a view: nothing is copied on either side. The numbers are the same.
"""

from __future__ import annotations

from modelbuild.compiler.kernels import packed_conv
from modelbuild.compiler.passes import channels_last
from modelbuild.compiler.relax_rewrite import module_pass, rewrite_calls

# operators computed element by element, whose tensor arguments may be cut into other rows together
ELEMENTWISE = frozenset(
    f"relax.{op}"
    for op in (
        "astype",
        "add",
        "subtract",
        "multiply",
        "divide",
        "maximum",
        "minimum",
        "clip",
        "round",
        "floor",
        "nn.relu",
        "sigmoid",
        "tanh",
        "exp",
        "quantize",
        "dequantize",
    )
)
CHANNEL_AXIS = 1
MIN_ROWS = 2  # rows of the new map: the packed conv runs its rows in parallel


def transform(lanes: int):
    """`rewrite` as a module pass, for convs whose instruction takes `lanes` pixels at once."""
    return module_pass(lambda module: rewrite(module, lanes), "PixelRows")


def rewrite(module, lanes: int):
    """The module with every int8 1x1 conv whose pixels new_rows cuts into other rows for `lanes`-wide
    vectors computed on those rows, along with the element-wise operators after it (see the module's doc)."""
    from tvm import relax

    cut = {}  # hash of a reshape-back variable's value -> the variable computed on the new rows

    def rule(mutator, call):
        op = getattr(call.op, "name", None)
        if op == "relax.nn.conv2d":
            rows = _new_rows(call, lanes)
            if rows is None:
                return call
            data = call.args[0]
            n, channels = (int(d) for d in data.ty.shape.values[:2])
            recut = mutator.builder_.emit(relax.op.reshape(data, [n, channels, *rows]))
            return _computed_on(
                mutator, cut, relax.Call(call.op, [recut, *call.args[1:]], call.attrs, call.ty_args), call
            )
        if op in ELEMENTWISE:
            args = _args_on_new_rows(mutator, cut, call)
            if args is None:
                return call
            return _computed_on(mutator, cut, relax.Call(call.op, args, call.attrs, call.ty_args), call)
        return call

    rewritten = rewrite_calls(channels_last.plain_elementwise(module), rule)
    return relax.transform.DeadCodeElimination()(rewritten) if cut else module


def _computed_on(mutator, cut: dict, on_rows, call):
    """`on_rows` emitted, and its reshape to `call`'s shape returned in `call`'s place."""
    from tvm import relax

    var = mutator.builder_.emit(on_rows)
    back = relax.op.reshape(var, [int(d) for d in call.ty.shape.values])
    cut[_key(back)] = var
    return back


def _key(expr) -> int:
    return hash(expr)  # a TVM object's hash is its identity


def _args_on_new_rows(mutator, cut: dict, call) -> list | None:
    """`call`'s arguments on the new rows, when at least one tensor argument is a reshape back from them and
    every other one is too (from the same rows) or a constant that does not vary along the rows; else None."""
    from tvm import relax, tirx
    from tvm.ir import Constant

    args, shape = [], None
    for arg in call.args:
        value = mutator.lookup_binding(arg) if isinstance(arg, relax.Var) else arg  # None for a parameter
        on_rows = cut.get(_key(value)) if value is not None else None
        if on_rows is not None:
            rows = [int(d) for d in on_rows.ty.shape.values]
            if shape not in (None, rows):
                return None
            shape = rows
            args.append(on_rows)
        elif isinstance(value, (tirx.IntImm, tirx.FloatImm)) or (
            isinstance(value, Constant) and _same_on_every_pixel(call, value)
        ):
            args.append(arg)
        else:
            return None
    return args if shape is not None else None


def _same_on_every_pixel(call, constant) -> bool:
    """Whether a constant argument of an element-wise operator on a rank-4 map takes one value per channel
    or one in all: a quantize's scale or zero point along the channel axis, or any argument that broadcasts
    with ones in the map's last two dimensions."""
    shape = [int(d) for d in constant.ty.shape.values]
    if getattr(call.attrs, "axis", None) is not None:  # quantize, dequantize: one value per index of `axis`
        return all(d == 1 for d in shape) or int(call.attrs.axis) % 4 == CHANNEL_AXIS
    return len(shape) <= 4 and all(d == 1 for d in ([1] * (4 - len(shape)) + shape)[2:])


def _new_rows(call, lanes: int) -> tuple[int, int] | None:
    """(rows, columns) to compute an eligible 1x1 conv on (see new_rows), or None."""
    attrs = call.attrs
    if not packed_conv.eligible(call) or [int(k) for k in call.args[1].ty.shape.values[2:]] != [1, 1]:
        return None
    if any(int(p) for p in attrs.padding) or [int(s) for s in attrs.strides] != [1, 1]:
        return None
    height, width = (int(d) for d in call.args[0].ty.shape.values[2:])
    return new_rows(height, width, lanes)


def new_rows(height: int, width: int, lanes: int) -> tuple[int, int] | None:
    """The rows a 1x1 conv's H x W pixels are better computed as, or None to keep its own. A cut is into at
    least MIN_ROWS rows of a width that column lanes take; the one computing the fewest pixels (rows rounded
    up to whole vectors), the widest of those. Kept: rows of whole vectors already, and rows no cut computes
    fewer pixels than or as many in wider rows (14 x 14 as 2 x 98: both computed as 224 pixels, and the wider
    rows made MobileNetV3's int8 library 0.93x, the orientation classifier's 0.88-0.93x, call by call).

    Widest, because a row of packed data serves every block of output channels from cache, with one epilogue
    per tile: alone, with a requantising epilogue, 2 threads, VNNI, a 128 -> 128 conv at 100x76 (column lanes
    already, rounded to 80) took 1122 us, 941 us as 95 x 80, 776 us as 5 x 1520; 96 -> 96 at 20x20 (channel
    lanes) 52 us, 52 as 25 x 16, 42 as 5 x 80; 64 -> 256 at 50x38 308 us as 20 x 95, 282 as 4 x 475 (283 as
    2 x 950)."""
    pixels = height * width
    if packed_conv.lanes_width(width, lanes) == width:
        return None
    cuts = [
        (pixels // w, w)
        for w in range(lanes, pixels // MIN_ROWS + 1)
        if pixels % w == 0 and packed_conv.column_lanes(w, lanes)
    ]
    if not cuts:
        return None
    computed = lambda cut: cut[0] * packed_conv.lanes_width(cut[1], lanes)  # noqa: E731
    best = min(cuts, key=lambda cut: (computed(cut), -cut[1]))
    if packed_conv.column_lanes(width, lanes) and (computed(best), -best[1]) >= (computed((height, width)), -width):
        return None  # as many pixels computed, in rows no wider, or more
    return best
