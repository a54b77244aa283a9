"""Layer normalisation over the last axis as vector partial reductions, one row at a time (row_reductions.py).

TVM's layer_norm is a sum, a mean, a sum of squared deviations and the normalisation, each over the whole
tensor. The default schedule vectorised the sum across rows (a gather per vector, from rows a row's length
apart) and left the squared deviations scalar on one core: ConvNeXt's LayerNorm over 96 channels at 56x56
took 1.03 ms, 3.4 ns an element, a fifth of its int8 library. Here a row's sum and its squared deviations
from the mean are taken in partial results while the row stays in cache, rows in parallel; the two passes
are kept (a sum of squares less the squared mean loses digits where the mean is large).

A layer norm over any other axes, rows shorter than 2 * LANES, and other dtypes keep TVM's.
"""

from __future__ import annotations

from modelbuild.compiler.kernels import row_reductions

PARTIAL_SUM, PARTIAL_DEVIATIONS = row_reductions.partial_names("layer_norm_sum", "layer_norm_deviations")
BLOCKS = (PARTIAL_SUM,)
DTYPES = ("float32",)


def eligible(shape, axes, dtype: str) -> bool:
    """Whether a layer norm of this shape (None where only the rank is known) over `axes` is computed here:
    every dimension a number."""
    static = shape is not None and all(isinstance(d, int) or hasattr(d, "value") for d in shape)
    return static and dtype in DTYPES and row_reductions.long_enough(shape, axes)


def legalize(bb, call):
    """LegalizeOps override for relax.nn.layer_norm: this kernel where eligible, else TVM's."""
    from tvm import ir

    x = call.args[0]
    if not eligible(x.ty.shape, list(call.attrs.axes), str(x.ty.dtype)):
        return ir.Op.get(call.op.name).get_attr("FLegalize")(bb, call)
    epsilon = float(call.attrs.epsilon)
    return bb.call_te(lambda *args: compute(*args, epsilon=epsilon), *call.args, primfunc_name_hint="layer_norm")


def compute(x, gamma, beta, *, epsilon: float):
    """(x - mean) / sqrt(variance + epsilon) * gamma + beta over the last axis, as TVM's layer_norm computes it."""
    from tvm import te, tirx

    *rows, length = [int(d) for d in x.shape]
    rows = tuple(rows)
    row_sum = row_reductions.row_reduction(lambda r, k: x[(*r, k)], rows, length, te.sum, "layer_norm_sum")
    mean = te.compute(rows, lambda *r: row_sum[r] / tirx.const(length, x.dtype), name="layer_norm_mean")

    def squared_deviation(r, k):
        deviation = x[(*r, k)] - mean[r]
        return deviation * deviation

    deviations = row_reductions.row_reduction(squared_deviation, rows, length, te.sum, "layer_norm_deviations")
    scale = te.compute(
        rows,
        lambda *r: tirx.rsqrt(deviations[r] / tirx.const(length, x.dtype) + tirx.const(epsilon, x.dtype)),
        name="layer_norm_scale",
    )
    return te.compute(
        x.shape, lambda *i: (x[i] - mean[i[:-1]]) * scale[i[:-1]] * gamma[i[-1]] + beta[i[-1]], name="layer_norm"
    )


def schedule(sch, cores: int) -> None:
    """Every block one row at a time under the output's row loop; partials and row sweeps in vectors."""
    row_reductions.schedule(sch, cores, (PARTIAL_SUM, PARTIAL_DEVIATIONS))
