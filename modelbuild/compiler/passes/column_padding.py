"""NCHW convs whose output rows make no whole vectors computed over rows widened to whole vectors, then cut.

A conv that stays NCHW (thin groups, depthwise, a model whose convs do not pay for channels-last) vectorises each
output row, its columns. The default schedule splits that loop by the widest vector width dividing it: a row of
94 columns divides by none and the conv ran in scalars, one of 28 by 4 lanes only, half an AVX2 vector, and one
of 56 by 8 lanes into 7 vectors, which no register tile of several vectors divides. Widened, the same conv
computes a few columns more over its zero padding and the extra columns are cut off after it, several times
faster for thin grouped convs (bench/results/README.md, "NCHW convs over rows of whole vectors"). The cut is a
copy of the output, a pass over it, which the conv's tail cost many times over.

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
# Rows of narrower vectors (40 or 56 columns: 8 lanes) run half the accumulators of a tile of 16-lane ones and
# repay a widening of a quarter; not one of a third (24 columns ran faster than 32 computed and cut).
MAX_WIDENING_TO_WIDE = 1.25
# Rows that narrower vectors divide already (36 columns, in 4 lanes) ran no faster widened to 8-lane vectors; a
# depthwise conv, too little work an output to repay the cut, widens only rows that no vector width divides.
QUARTER_LANES = VECTOR_LANES // 4


def transform():
    """`rewrite` as a module pass: NCHW convs' output rows widened to whole vectors."""
    return module_pass(rewrite, "ColumnsPaddedToVectors")


def rewrite(module):
    """The module with every eligible conv2d (see the module's docstring) computed over wider rows and cut."""
    return rewrite_calls(module, _widened)


def widened_columns(columns: int) -> int | None:
    """The row width a conv of `columns` output columns computes: the next multiple of VECTOR_LANES where it
    widens the row by at most MAX_WIDENING_TO_WIDE; else, where no vector width divides the row, the next
    multiple of ROW_LANES where it widens it by at most MAX_WIDENING; else None, the row as it is."""
    if columns % VECTOR_LANES == 0:
        return None
    wide = -(-columns // VECTOR_LANES) * VECTOR_LANES
    if wide <= MAX_WIDENING_TO_WIDE * columns:
        return wide
    if columns % QUARTER_LANES == 0:
        return None
    wide = -(-columns // ROW_LANES) * ROW_LANES
    return wide if wide <= MAX_WIDENING * columns else None


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
    if wide is None or (_depthwise(call) and out[3] % QUARTER_LANES == 0):  # 4-lane rows stay, 16 lanes or not
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
