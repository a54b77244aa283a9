"""A quantize moved before the data movement it follows, so the movement carries int8, not float32.

A DB detector's FPN upsamples three of its four maps (nearest, 2x, 4x and 8x), concatenates them with the
fourth and quantizes the 96 x 160 x 160 result for the head's int8 conv: 2.4 M floats moved, then 2.4 M
quantized. quantize(concat(a, b, ...)) is concat(quantize(a), quantize(b), ...) with each piece's own
channels of a per-channel scale, and quantize(nearest(x)) is nearest(quantize(x)): a nearest-neighbour
resize only copies values. So the maps are quantized at their own sizes (in the epilogues of the kernels
that compute them) and the upsampling and concatenation move a quarter of the bytes. The values are the
same, bit for bit.

Only values nothing else reads are moved past, and only a quantize whose scale and zero point are constants,
one value or one per index of the concatenated axis. The upsampled int8 rows take a shuffle of bytes per
vector as float ones do (kernels/nearest_upsample.py; gathered byte by byte, the detector's fused upsample
and concatenation took 323 us and the move gained nothing). The int8 zoo call by call, bit-identical: the
bundled detector 0.933x-0.947x, deeplab_ish 0.951x-0.955x, the v6 detector 0.973x-0.978x, style_ish, layout
and yolox 0.974x-0.982x, YOLOv8n 0.988x (1.045x before a concatenation's pieces had to be read by it alone).
"""

from __future__ import annotations

import numpy as np

from modelbuild.compiler.integer_ops import constant_value
from modelbuild.compiler.relax_rewrite import bound_constant, module_pass, operator_name, rewrite_functions, use_counts


def transform():
    """`rewrite` as a module pass: quantizes moved before concatenations and resizes."""
    return module_pass(rewrite, "QuantizedEarly")


def rewrite(module):
    """The module with each eligible quantize moved before the concatenations and nearest resizes it reads."""
    from tvm import relax

    @relax.expr_functor.mutator
    class EarlyQuantize(relax.PyExprMutator):
        def __init__(self, module, uses):
            super().__init__(module)
            self.uses = uses

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", None) != "relax.quantize":
                return call
            scale, zero = (self._constant(arg) for arg in call.args[1:])
            if scale is None or zero is None:
                return call
            moved = self._moved(call.args[0], constant_value(scale), constant_value(zero), call)
            return call if moved is None else moved

        def _moved(self, data, scale, zero, quantize):
            """`quantize` of `data` computed before the concatenation or resize that makes data, or None."""
            value = self._single_use_value(data)
            name = operator_name(value)
            axis = int(quantize.attrs.axis) % len(quantize.ty.shape)
            if name == "relax.concat" and int(value.attrs.axis) % len(quantize.ty.shape) == axis:
                return self._concatenated(value, scale, zero, quantize)
            if name == "relax.image.resize2d" and _copies_values(value) and (scale.size == 1 or axis == 1):
                moved = self._moved(value.args[0], scale, zero, quantize)
                inner = self.builder_.emit(
                    moved if moved is not None else self._quantize(value.args[0], scale, zero, quantize)
                )
                return _resized(value, inner)
            return None

        def _concatenated(self, concat, scale, zero, quantize):
            # a piece something else reads keeps its float value for that reader: its quantize is a kernel
            # of its own (YOLOv8n's neck, whose concatenations read maps its C2f blocks read too: 1.045x)
            if not all(self._single_use_value(piece) is not None for piece in concat.args[0].fields):
                return None
            pieces, start = [], 0
            for piece in concat.args[0].fields:
                channels = int(piece.ty.shape.values[int(concat.attrs.axis)])
                sliced = [v if v.size == 1 else v.reshape(-1)[start : start + channels] for v in (scale, zero)]
                if any(v.size not in (1, channels) for v in sliced):
                    return None
                moved = self._moved(piece, *sliced, quantize)
                pieces.append(
                    self.builder_.emit(moved if moved is not None else self._quantize(piece, *sliced, quantize))
                )
                start += channels
            return relax.op.concat(pieces, axis=int(concat.attrs.axis))

        def _quantize(self, data, scale, zero, quantize):
            return relax.op.quantize(
                data,
                relax.const(scale),
                relax.const(zero),
                axis=int(quantize.attrs.axis),
                out_dtype=str(quantize.attrs.out_dtype),
            )

        def _single_use_value(self, expr):
            if not isinstance(expr, relax.Var) or self.uses.get(expr, 0) != 1:
                return None
            return self.lookup_binding(expr)

        def _constant(self, expr):
            return bound_constant(self, expr)

    module = rewrite_functions(module, lambda module, func: EarlyQuantize(module, use_counts(func)).visit_expr(func))
    # the float concatenations and resizes are read by nothing now
    return relax.transform.DeadCodeElimination()(module)


def _copies_values(resize) -> bool:
    """Whether a resize2d only copies input values to outputs (nearest neighbour), in NCHW."""
    attrs = resize.attrs
    return (
        str(attrs.method) == "nearest_neighbor"
        and str(attrs.layout) == "NCHW"
        and np.dtype(str(resize.ty.dtype)) == np.dtype(str(resize.args[0].ty.dtype))
    )


def _resized(resize, data):
    """`resize` of other data, its output of data's dtype."""
    from tvm import relax

    a = resize.attrs
    return relax.op.image.resize2d(
        data,
        resize.args[1],
        roi=[float(r) for r in a.roi],
        layout=str(a.layout),
        method=str(a.method),
        coordinate_transformation_mode=str(a.coordinate_transformation_mode),
        rounding_method=str(a.rounding_method),
        cubic_alpha=float(a.cubic_alpha),
        cubic_exclude=int(a.cubic_exclude),
        extrapolation_value=float(a.extrapolation_value),
    )
