"""Transcendental functions as polynomials the vectoriser keeps in vectors.

TVM lowers exp, erf, tanh and sigmoid on CPU to LLVM intrinsics that LLVM, given no vector math library, turns
into one scalar call into libm per element: a vectorised loop over them runs at scalar speed. In real models
they sit in every activation (SiLU and sigmoid in YOLO-style detectors, GELU's erf in transformers, softmax
over a recogniser's 18710 classes): a softmax over [40, 18710] took 4.4 ms (0.7 GFLOP/s), and a 1x1 conv
with a GELU epilogue ran at 5.9 GFLOP/s where plain convs run at 50-70. Here they are legalised to TVM's own
fast_* approximations (range reduction and a polynomial, as onnxruntime's MLAS does), whose float32 error,
measured over their whole range against float64: exp 4.1e-6 relative at worst (5e-7 median), erf 4.2e-7
absolute, tanh 3.6e-7 absolute. Other dtypes keep TVM's own legalisation. A softmax over long rows is
kernels/softmax.py's (fast_exp in a row-by-row kernel); others are TVM's fast_softmax. pow, a libm call as
well, is a product where its exponent is a small whole constant (GPT-2's tanh GELU cubes its input) and a
square root where it is 0.5.
"""

from __future__ import annotations

FAST_DTYPES = ("float32",)


def legalizations() -> dict:
    """LegalizeOps overrides: relax operator name -> its fast legalisation."""
    from tvm import te, topi

    def sigmoid(x):
        denominator = topi.fast_exp(topi.negative(x))
        return te.compute(x.shape, lambda *i: 1.0 / (1.0 + denominator(*i)), name="sigmoid")

    return {"relax.exp": _fast(topi.fast_exp, "exp"), "relax.erf": _fast(topi.fast_erf, "erf"),
            "relax.tanh": _fast(topi.fast_tanh, "tanh"), "relax.sigmoid": _fast(sigmoid, "sigmoid"),
            "relax.nn.softmax": _fast(_softmax, "softmax", with_axis=True), "relax.power": _power}


POWERS_BY_MULTIPLYING = (2.0, 3.0, 4.0)  # x ** n as n - 1 multiplications, within an ulp or two of powf


def _power(bb, call):
    """x ** c by a constant c of 2, 3 or 4 as multiplications, of 0.5 as a square root: TVM's pow is a scalar
    call into libm per element (the cube in GPT-2's tanh GELU, 0.044715 * x ** 3, held its whole element-wise
    kernel to 19 GFLOP/s: 2.6 ms of a 5.5 ms decoder). Any other exponent or dtype keeps TVM's legalisation."""
    from tvm import ir, te, topi

    exponent = _scalar_constant(call.args[1])
    # an exponent of more dimensions than x broadcasts x to its rank: TVM's pow makes that shape
    same_shape = int(call.args[1].ty.ndim) <= int(call.args[0].ty.ndim)
    if (str(call.args[0].ty.dtype) not in FAST_DTYPES or exponent not in (*POWERS_BY_MULTIPLYING, 0.5)
            or not same_shape):
        return ir.Op.get(call.op.name).get_attr("FLegalize")(bb, call)
    if exponent == 0.5:
        return bb.call_te(topi.sqrt, call.args[0], primfunc_name_hint="power")

    def multiplied(x):
        def element(*i):
            product = x(*i)
            for _ in range(int(exponent) - 1):
                product = product * x(*i)
            return product

        return te.compute(x.shape, element, name="power")

    return bb.call_te(multiplied, call.args[0], primfunc_name_hint="power")


def _scalar_constant(expr) -> float | None:
    """The value of a constant of one element, else None."""
    from tvm.ir import Constant  # relax constants are tvm.ir.Constant in TVM 0.27

    value = expr.value.numpy() if isinstance(expr, Constant) else None
    return float(value.reshape(())) if value is not None and value.size == 1 else None


def _softmax(x, axis: int):
    from tvm import topi

    from modelbuild.compiler.kernels import softmax

    return (softmax.compute if softmax.eligible(x.shape, axis) else topi.nn.fast_softmax)(x, axis)


def _fast(compute, name: str, *, with_axis: bool = False):
    """A legalisation calling `compute` on FAST_DTYPES, and TVM's own legalisation on any other dtype."""
    from tvm import ir

    def legalize(bb, call):
        if str(call.args[0].ty.dtype) not in FAST_DTYPES:
            return ir.Op.get(call.op.name).get_attr("FLegalize")(bb, call)
        axis = (int(call.attrs.axis),) if with_axis else ()
        return bb.call_te(compute, call.args[0], *axis, primfunc_name_hint=name)

    return legalize
