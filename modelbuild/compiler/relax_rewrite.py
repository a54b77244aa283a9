"""What the graph rewrites before legalisation (compiler/passes/) share: how one becomes a tvm.transform
module pass, the ways they rewrite a Relax module without changing the one they are given, and what they ask
of an expression and of its readers."""

from __future__ import annotations

from collections.abc import Callable

# functions of one element, which commute with any reshape or permutation of the axes
ELEMENTWISE = {
    "relax.sigmoid",
    "relax.nn.relu",
    "relax.tanh",
    "relax.exp",
    "relax.nn.silu",
    "relax.nn.gelu",
    "relax.nn.gelu_tanh",
    "relax.negative",
    "relax.abs",
    "relax.sqrt",
    "relax.log",
    "relax.erf",
    "relax.nn.softplus",
    "relax.clip",
}


# binary arithmetic that broadcasts its operands against each other
ARITHMETIC = {
    "relax.add",
    "relax.subtract",
    "relax.multiply",
    "relax.divide",
    "relax.maximum",
    "relax.minimum",
}


def module_pass(rewrite: Callable, name: str):
    """`rewrite` (a module -> a new module) as a tvm.transform module pass named `name`: lowering composes the
    rewrites with TVM's own passes in one Sequential, and a test applies one as TVM's passes are tested, to a
    Before module, comparing the result with an Expected one."""
    import tvm

    return tvm.transform.module_pass(lambda module, _context: rewrite(module), opt_level=0, name=name)


def rewrite_functions(module, rewrite: Callable, where: Callable = lambda function: True):
    """A copy of the module (the caller's stays as it was) with each Relax function for which `where` holds
    replaced by `rewrite(module, function)`."""
    from tvm import relax

    module = module.clone()
    for gv, func in list(module.functions.items()):
        if isinstance(func, relax.Function) and where(func):
            module[gv] = rewrite(module, func)
    return module


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


def rewrite_and_prune(module, rule):
    """rewrite_calls with a `rule(mutator, call)` that returns what replaces the call, or None to keep it;
    where it replaced any, the bindings nothing reads any more are removed, else the module is returned as
    it was given."""
    from tvm import relax

    changed = []

    def keep_or_replace(mutator, call):
        replacement = rule(mutator, call)
        if replacement is None:
            return call
        changed.append(call)
        return replacement

    rewritten = rewrite_calls(module, keep_or_replace)
    return relax.transform.DeadCodeElimination()(rewritten) if changed else module


def operator_name(expr) -> str | None:
    """The name of the operator a Relax call applies ('relax.nn.conv2d'); None for anything else."""
    return getattr(getattr(expr, "op", None), "name", None)


def known_shape(expr) -> list[int] | None:
    """The expression's shape, or None where it has none or a dimension is symbolic."""
    return known_dims(getattr(getattr(expr, "ty", None), "shape", None))


def known_dims(shape) -> list[int] | None:
    """The sizes of a shape (a Relax shape, its values, or a sequence of sizes), or None where it is absent or
    a size is symbolic."""
    dims = getattr(shape, "values", shape)
    if dims is None:
        return None
    try:
        return [int(d) for d in dims]
    except (TypeError, ValueError):  # a symbolic size (a tirx.Var) has no int; a shape of unknown rank no values
        return None


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


def reshaped(mutator, value, shape: list[int]):
    """`value` reshaped: a constant (weights, a bias) as its array reshaped here, where a reshape left for
    FoldConstant costs an LLVM build of its own; anything else as a reshape emitted through `mutator`."""
    from tvm import relax

    from modelbuild.compiler.integer_ops import constant_value  # integer_ops imports this module

    constant = bound_constant(mutator, value)
    if constant is None:
        return mutator.builder_.emit(relax.op.reshape(value, shape))
    return relax.const(constant_value(constant).reshape(shape), str(constant.ty.dtype))


def single_use_binding(mutator, value, uses: dict):
    """The call bound to `value` where the function reads `value` once, else None."""
    from tvm import relax

    if not isinstance(value, relax.Var) or uses.get(value, 0) != 1:
        return None
    bound = mutator.lookup_binding(value)
    return bound if isinstance(bound, relax.Call) else None


def module_uses(module) -> dict:
    """How many times each variable is read in the module's Relax functions."""
    from tvm import relax

    counts: dict = {}

    def visit(expr):
        if isinstance(expr, relax.Var):
            counts[expr] = counts.get(expr, 0) + 1

    for func in module.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return counts
