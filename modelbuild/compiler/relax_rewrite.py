"""One way to rewrite the calls of a Relax module, shared by the graph rewrites before legalisation
(conv_transpose.py, channel_padding.py, channels_last.py), and what those rewrites ask of an expression and
of its readers."""

from __future__ import annotations


def rewrite_calls(module, rule):
    """A copy of the module (the caller's stays as it was) with `rule(mutator, call)` applied to every call
    of its Relax functions, bottom up. A rule returns the call, or what replaces it; it may emit bindings
    through `mutator.builder_` (call_te among them: the PrimFuncs it adds join the module) and read earlier
    ones with `mutator.lookup_binding`."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def visit_call_(self, call):
            return rule(self, super().visit_call_(call))

    module = module.clone()
    for gv, func in list(module.functions.items()):
        if isinstance(func, relax.Function):
            rewrite = Rewrite(module)
            module[gv] = rewrite.visit_expr(func)
            present = {var.name_hint for var in module.get_global_vars()}
            for added, function in rewrite.builder_.get().functions.items():
                if added.name_hint not in present:
                    module[added] = function
    return module


def known_shape(expr) -> list[int] | None:
    """The expression's shape, or None where it has none or a dimension is symbolic."""
    from tvm import tirx

    dims = getattr(getattr(expr.ty, "shape", None), "values", None)
    if dims is None or not all(isinstance(d, tirx.IntImm) for d in dims):
        return None
    return [int(d) for d in dims]


def use_counts(func) -> dict:
    """Each var of a Relax function -> how many times its bindings and result read it: a rewrite may change
    what computes a value only where nothing else reads it."""
    from tvm import relax

    counts: dict = {}

    @relax.expr_functor.visitor
    class Reads(relax.PyExprVisitor):
        def visit_var_(self, var):
            counts[var] = counts.get(var, 0) + 1

        def visit_dataflow_var_(self, var):
            counts[var] = counts.get(var, 0) + 1

    Reads().visit_expr(func.body)
    return counts


def bound_constant(mutator, expr):
    """The constant `expr` is, inline or bound to a var (an ONNX initializer's name) that `mutator` has
    visited, else None."""
    from tvm import relax
    from tvm.ir import Constant  # relax constants are tvm.ir.Constant in TVM 0.27

    if isinstance(expr, relax.Var):
        expr = mutator.lookup_binding(expr)
    return expr if isinstance(expr, Constant) else None
