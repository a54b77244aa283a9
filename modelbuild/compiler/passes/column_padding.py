"""NCHW convs whose output rows make no whole vectors computed over rows widened to whole vectors, then cut.

A conv that stays NCHW (thin groups, depthwise, a model whose convs do not pay for channels-last) vectorises each
output row, its columns. The default schedule splits that loop by the widest vector width dividing it: a row of
94 columns divides by none and the conv ran in scalars, one of 28 by 4 lanes only, half an AVX2 vector, and one
of 56 by 8 lanes into 7 vectors, which no register tile of several vectors divides. Widened, the same conv
computes a few columns more over its zero padding and the extra columns are cut off after it: a 3x3 conv of 4
groups of 6 channels over 124 x 94, 0.82 -> 0.29 ms with rows of 96; 4 groups of 10 channels at 28 x 28, 0.28 ->
0.09 ms with rows of 32; 2 groups of 16 -> 13 channels at 56 x 56, 0.71 -> 0.25 ms with rows of 64
(bench/results/README.md). The cut is a copy of the output, a pass over it, which the conv's tail cost many
times over.

The padding on the right grows by `stride` columns for each column added, so each of the conv's own output
columns reads the same inputs with the same weights: the same sums, exactly. The extra columns read zero padding.

Eligible: a float conv2d that is NCHW with OIHW weights once the layout is chosen, static shapes, and output rows
that `widened_columns` widens; for a depthwise conv, rows that no vector width divides (QUARTER_LANES). A 1x1
conv is a matmul by then (pointwise_matmul.py) and does not come here.
"""

from __future__ import annotations

from modelbuild.compiler.default_schedule import VECTOR_LANES
from modelbuild.compiler.relax_rewrite import known_shape, module_pass, rewrite_calls

ROW_LANES = VECTOR_LANES // 2  # an AVX2 vector of float32; on AVX-512 the schedule runs it as half a vector
MAX_WIDENING = 1.5  # rows of 5 would compute 8 columns: no gain left against the cut
# Rows of 8-lane vectors whose count the register tile's vectors cannot divide (40 or 56 columns: 5 or 7 vectors)
# ran one vector to a tile row, 2.9x slower than at 64; 24 columns (3 vectors) ran faster than widened to 32.
MAX_WIDENING_TO_WIDE = 1.25
# A depthwise conv's 9 multiply-adds an output ran as fast on 4-lane vectors as widened (144 channels, dilated,
# over 28 columns: 20% slower over 32 and the cut); only rows that no vector divides are widened.
QUARTER_LANES = VECTOR_LANES // 4


def transform():
    """`rewrite` as a module pass: NCHW convs' output rows widened to whole vectors."""
    return module_pass(rewrite, "ColumnsPaddedToVectors")


def rewrite(module):
    """The module with every eligible conv2d (see the module's docstring) computed over wider rows and cut."""
    return rewrite_calls(module, _widened)


def widened_columns(columns: int) -> int | None:
    """The row width a conv of `columns` output columns computes: the next multiple of VECTOR_LANES where it
    widens the row by at most MAX_WIDENING_TO_WIDE, else the next of ROW_LANES by at most MAX_WIDENING; None
    where the row is that width already or no such width exists."""
    for lanes, most in ((VECTOR_LANES, MAX_WIDENING_TO_WIDE), (ROW_LANES, MAX_WIDENING)):
        wide = -(-columns // lanes) * lanes
        if wide <= most * columns:
            return wide if wide != columns else None
    return None


def eligible(call) -> bool:
    """A float NCHW conv2d with OIHW weights and static shapes."""
    if getattr(call.op, "name", None) != "relax.nn.conv2d":
        return False
    attrs = call.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout))
    return (
        layouts == ("NCHW", "OIHW", "NCHW")
        and str(getattr(call.args[0].ty, "dtype", "")) == "float32"
        and str(getattr(call.args[1].ty, "dtype", "")) == "float32"
        and str(attrs.out_dtype) in ("float32", "None", "void", "")
        and None not in (known_shape(call.args[0]), known_shape(call.args[1]), known_shape(call))
    )


def _depthwise(call) -> bool:
    weight = known_shape(call.args[1])
    return weight[1] == 1 and int(call.attrs.groups) == weight[0]


def _widened(mutator, call):
    from tvm import relax

    if not eligible(call):
        return call
    out = known_shape(call)
    wide = widened_columns(out[3])
    if wide is None or (_depthwise(call) and out[3] % QUARTER_LANES == 0):
        return call
    attrs = call.attrs
    top, left, bottom, right = (int(p) for p in attrs.padding)
    stride = int(attrs.strides[1])
    conv = relax.op.nn.conv2d(
        call.args[0],
        call.args[1],
        strides=attrs.strides,
        padding=[top, left, bottom, right + (wide - out[3]) * stride],
        dilation=attrs.dilation,
        groups=int(attrs.groups),
        data_layout="NCHW",
        kernel_layout="OIHW",
        out_layout="NCHW",
        out_dtype=attrs.out_dtype,
    )
    return relax.op.strided_slice(mutator.builder_.emit(conv), axes=[3], begin=[0], end=[out[3]])
