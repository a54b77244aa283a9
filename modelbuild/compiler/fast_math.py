"""Transcendental functions as polynomials the vectoriser keeps in vectors.

TVM lowers exp, erf, tanh and sigmoid on CPU to LLVM intrinsics that LLVM, given no vector math library, turns
into one scalar call into libm per element: a vectorised loop over them runs at scalar speed. In real models
they sit in every activation (SiLU and sigmoid in YOLO-style detectors, GELU's erf in transformers, softmax
over a recogniser's 18710 classes): a softmax over [40, 18710] took 4.4 ms (0.7 GFLOP/s), and a 1x1 conv
with a GELU epilogue ran at 5.9 GFLOP/s where plain convs run at 50-70. Here they are legalised to TVM's own
fast_* approximations (range reduction and a polynomial, as onnxruntime's MLAS does), whose float32 error,
measured over their whole range against float64: exp 4.1e-6 relative at worst (5e-7 median), erf 4.2e-7
absolute, tanh 3.6e-7 absolute. Other dtypes keep TVM's own legalisation. A softmax over long rows is
kernels/softmax.py's (fast_exp in a row-by-row kernel); others are TVM's fast_softmax.
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
            "relax.nn.softmax": _fast(_softmax, "softmax", with_axis=True)}


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
