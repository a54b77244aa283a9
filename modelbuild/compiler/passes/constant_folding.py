"""Constant weights' data movement and dequantisation computed in numpy, before legalisation.

Every conv's weights are transposed channels-last, every bias reshaped to broadcast, every Clip bound from
ONNX tested for NaN, and an int8 model's weights dequantized where a float op reads them: calls on constants
alone, which TVM's FoldConstant evaluates after legalisation by compiling each call with LLVM and running it
(251 compiles for the bundled classifier: 19.6 s of its 28 s compile stage on a 2-core Zen 3). numpy gives the
same bits: these ops move or test values, and dequantize is computed as TVM's legalisation writes it (the
zero point subtracted in int32, one float32 multiply). What is left on constants is still FoldConstant's.
"""

from __future__ import annotations

from modelbuild.compiler.relax_rewrite import known_shape, module_pass, rewrite_calls


def transform():
    """`fold` as a module pass: operators on constants folded."""
    return module_pass(fold, "ConstantsFolded")


def fold(module):
    """The module with every call in FOLDED whose arguments are constants replaced by its value."""
    return rewrite_calls(module, _folded)


def _reshape(call, values):
    return values[0].reshape(known_shape(call))


def _permute_dims(call, values):
    axes = call.attrs.axes
    return values[0].transpose(None if axes is None else [int(a) for a in axes])


def _dequantize(call, values):
    """TVM's legalisation: the data less the zero point in int32, times the scale in float32 (exact to here,
    then one rounding, as numpy's float32 multiply); per channel along `axis` where the scale is a vector."""
    data, scale, zero = values
    if str(call.attrs.out_dtype) != "float32" or data.dtype.kind not in "iu":
        return None
    shape = [1] * data.ndim
    if data.ndim:
        shape[int(call.attrs.axis) % data.ndim] = -1

    def along_axis(v):
        return v.reshape(shape) if v.size > 1 else v.reshape(())

    less_zero = data.astype("int32") - along_axis(zero).astype("int32")
    return less_zero.astype("float32") * along_axis(scale).astype("float32")


def _isnan(call, values):
    import numpy as np

    return np.isnan(values[0])


def _where(call, values):
    import numpy as np

    return np.where(*values)


FOLDED = {
    "relax.reshape": _reshape,
    "relax.permute_dims": _permute_dims,
    "relax.isnan": _isnan,
    "relax.where": _where,
    "relax.dequantize": _dequantize,
}


def _folded(mutator, call):
    from tvm import relax

    compute = FOLDED.get(getattr(call.op, "name", ""))
    if compute is None or known_shape(call) is None:  # symbolic: FoldConstant's
        return call
    tensors = [a for a in call.args if not isinstance(a, relax.ShapeExpr)]  # reshape's shape is its attribute
    values = [_value(mutator, a) for a in tensors]
    if any(v is None for v in values):
        return call
    value = compute(call, values)
    if value is None:  # a form this module does not compute as TVM does: FoldConstant's
        return call
    dtype = str(call.ty.dtype)
    return relax.const(value.astype(dtype), dtype)


def _value(mutator, expr):
    """A constant's value in numpy, looking through the variables bound to one (as a folded call's are)."""
    from tvm import relax
    from tvm.ir import Constant  # relax constants are tvm.ir.Constant in TVM 0.27

    if isinstance(expr, relax.Var):
        expr = mutator.lookup_binding(expr)
    return expr.value.numpy() if isinstance(expr, Constant) else None
