"""Chains of element-wise multiplications, divisions, additions and subtractions by constants folded into
one addition and one multiplication, (x + b) * m, before legalisation.

Such chains sit in the epilogue of nearly every conv of an int8 build: the rescale of the int32 sums and the
bias, then a model's own affine steps (PP-OCR's learnable affine blocks, x * 1.9 + 0.8 after a conv and
again after its hardswish), then hardswish's / 6: four to six vector instructions per element where two do
the same, in kernels whose epilogue is most of their time. Written (x + b) * m rather than x * m + b, a chain
that ends in a quantize loses its multiplication too: `integer_ops.fold_into_quantize` takes a positive m
into the quantize's scale (so a quantize's two-step chain, an int8 stem conv's rescale and bias, is
rewritten as well). The constants are composed in float64 and rounded once, so the result moves by an
ulp or two, as it does between onnxruntime and TVM.

A chain follows only values that nothing else reads (a value read twice, as hardswish reads its input, ends
it), and only float32 constants whose broadcast keeps the chain's shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from modelbuild.compiler.integer_ops import constant_value, fold_into_quantize
from modelbuild.compiler.relax_rewrite import (
    bound_constant,
    known_shape,
    module_pass,
    operator_name,
    rewrite_functions,
    use_counts,
)

AFFINE = ("relax.multiply", "relax.divide", "relax.add", "relax.subtract")
COMMUTATIVE = ("relax.multiply", "relax.add")


@dataclass(frozen=True)
class Chain:
    """`base` * m + b, built by `steps` operations (m and b in float64, broadcasting with base)."""

    base: object
    m: np.ndarray
    b: np.ndarray
    steps: int


def transform():
    """`fold` as a module pass: chains of scalings and shifts folded."""
    return module_pass(fold, "AffineChainsFolded")


def fold(module):
    """The module with every chain of more than two steps rewritten as (x + b) * m, or fewer steps, and the
    multiplication of one that a quantize reads taken into its scale."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Folding(relax.PyExprMutator):
        def __init__(self, module, uses):
            super().__init__(module)
            self.uses = uses  # var -> how many times the function reads it
            self.made = set()  # the vars this pass binds: each read once, by the call it returns

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", None) == "relax.quantize":
                return self._quantized(call)
            chain = self._chain(call)
            if chain.steps <= 2 or known_shape(call) is None:
                return call
            folded = self._folded(chain, call)
            return call if folded is None else folded

        def _chain(self, expr) -> Chain:
            """The chain `expr` ends: a call given, or the value of a var read only once."""
            if isinstance(expr, relax.Var):
                if self.uses.get(expr, 0) != 1 and expr not in self.made:
                    return Chain(expr, np.ones(()), np.zeros(()), 0)
                value = self.lookup_binding(expr)
                if value is None:
                    return Chain(expr, np.ones(()), np.zeros(()), 0)
            else:
                value = expr
            step = _step(value, self._constant)
            if step is None:
                return Chain(expr, np.ones(()), np.zeros(()), 0)
            operand, compose = step
            inner = self._chain(operand)
            m, b = compose(inner.m, inner.b)
            return Chain(inner.base, m, b, inner.steps + 1)

        def _constant(self, expr):
            return bound_constant(self, expr)

        def _quantized(self, call):
            """A quantize of x * m + b (two steps, m > 0) as a quantize of (x + b / m) * m, whose m
            fold_into_quantize then takes: the stem conv's epilogue, a rescale and a bias, loses a step."""
            data = call.args[0]
            chain = self._chain(data) if isinstance(data, relax.Var) else None
            if chain is None or chain.steps != 2 or not np.any(chain.b) or not np.all(chain.m > 0):
                return call
            folded = self._folded(chain, data)
            if folded is None:
                return call
            return relax.Call(call.op, [self.builder_.emit(folded), *call.args[1:]], call.attrs)

        def _folded(self, chain: Chain, call):
            """(base + b) * m, base * m or base + b where that takes fewer steps; None where the constants would
            change the shape or are not finite in float32."""
            m, b = chain.m, chain.b
            shape = known_shape(chain.base)
            if shape is None or list(np.broadcast_shapes(tuple(shape), m.shape, b.shape)) != known_shape(call):
                return None
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                if not all(np.all(np.isfinite(v.astype(np.float32))) for v in (m, b, b / np.where(m, m, 1))):
                    return None
            scaled = not np.all(m == 1)
            if not np.any(b):
                return relax.op.multiply(chain.base, _const(m)) if scaled else None
            if not scaled:
                return relax.op.add(chain.base, _const(b))
            if not np.all(m):
                return None
            shifted = self.builder_.emit(relax.op.add(chain.base, _const(b / m)))
            self.made.add(shifted)
            return relax.op.multiply(shifted, _const(m))

    module = rewrite_functions(module, lambda module, func: Folding(module, use_counts(func)).visit_expr(func))
    # the links of each chain, and the multiplications quantizes took, are read by nothing now
    return relax.transform.DeadCodeElimination()(fold_into_quantize(module))


def _step(value, constant):
    """(the operand, composing (m, b) -> (m', b')) when `value` is a float32 call of AFFINE with one operand
    a constant (`constant(expr)` gives it, or None), else None."""
    name = operator_name(value)
    if name not in AFFINE or len(value.args) != 2 or str(getattr(value.ty, "dtype", "")) != "float32":
        return None
    left, right = (constant(arg) for arg in value.args)
    if right is not None and left is None:
        operand, c, constant_first = value.args[0], right, False
    elif left is not None and right is None and name in (*COMMUTATIVE, "relax.subtract"):
        operand, c, constant_first = value.args[1], left, True
    else:
        return None
    if str(c.ty.dtype) != "float32":
        return None
    k = constant_value(c).astype(np.float64)
    if not np.all(np.isfinite(k)) or (name == "relax.divide" and not np.all(k)):
        return None
    return operand, _compose(name, k, constant_first)


def _compose(name: str, k: np.ndarray, constant_first: bool):
    if name == "relax.multiply":
        return lambda m, b: (m * k, b * k)
    if name == "relax.divide":
        return lambda m, b: (m / k, b / k)
    if name == "relax.add":
        return lambda m, b: (m, b + k)
    if constant_first:  # k - x
        return lambda m, b: (-m, k - b)
    return lambda m, b: (m, b - k)


def _const(values: np.ndarray):
    from tvm import relax

    return relax.const(values.astype(np.float32), "float32")
