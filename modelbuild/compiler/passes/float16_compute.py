"""A float16 model computed in float32 on a CPU: its weights widened once, its inputs and outputs cast at the
edges, so the library takes and returns what the model declares.

x86 CPUs have no float16 arithmetic (F16C converts, nothing computes), and TVM compiled each float16 operator
as conversions around float32 math, one lane at a time: the bundled classifier converted to float16 ran 6.95 ms
a call, where its float32 library takes 0.85 ms and onnxruntime, which computes such a model in float32 on a
CPU, 1.26 ms. Every tensor inside is float32 here, so the default schedule and the layout rewrites see the
model they were built for; intermediate values are not rounded to float16 between operators, as onnxruntime
rounds them, which differs from it by float16's own rounding (about 1e-3 relative).
"""

from __future__ import annotations

from modelbuild.compiler.relax_rewrite import module_pass, rewrite_functions

HALF, FULL = "float16", "float32"


def transform():
    """`widen` as a module pass: every float16 tensor computed as float32."""
    return module_pass(widen, "Float16ComputedInFloat32")


def widen(module):
    """The module with every float16 tensor inside its Relax functions computed as float32; unchanged when
    none is float16."""
    from tvm import relax

    if not any(isinstance(f, relax.Function) and _mentions_half(f) for f in module.functions.values()):
        return module

    @relax.expr_functor.mutator
    class Widen(relax.PyExprMutator):
        def visit_call_(self, call):
            # the arguments visited here, not by the base class, which would rebuild the call on widened
            # arguments with its float16 ones still beside them and fail its type check
            args = [self.visit_expr(arg) for arg in call.args]
            return _in_full(self.builder_, call, args)

    module = rewrite_functions(
        module, lambda module, func: _returning(Widen(module).visit_expr(func), func.ret_ty), _mentions_half
    )
    return relax.transform.Normalize()(module)


def _mentions_half(func) -> bool:
    from tvm import relax

    found = []
    relax.analysis.post_order_visit(func, lambda expr: found.append(1) if _is_half(expr) else None)
    return bool(found)


def _is_half(expr) -> bool:
    from tvm import relax

    return isinstance(getattr(expr, "ty", None), relax.TensorType) and str(expr.ty.dtype) == HALF


def _full_constant(const):
    from tvm import relax

    return relax.const(const.value.numpy().astype(FULL))


def _to_full(builder, expr):
    """`expr` as float32: a constant converted now, a tuple field by field, any other float16 value cast."""
    from tvm import relax
    from tvm.ir import Constant  # relax constants are tvm.ir.Constant in TVM 0.27

    if isinstance(expr, relax.Tuple):
        return relax.Tuple([_to_full(builder, field) for field in expr.fields])
    if not _is_half(expr):
        return expr
    if isinstance(expr, Constant):
        return _full_constant(expr)
    return builder.emit(relax.op.astype(expr, FULL))


def _in_full(builder, call, visited: list):
    """The call on its `visited` arguments as float32; a cast to float16 becomes one to float32, and a call whose
    attributes still make float16 (a `full` of a float16 dtype) is cast after it, so no float16 value flows on."""
    from tvm import relax

    args = [_to_full(builder, arg) for arg in visited]
    if getattr(call.op, "name", None) == "relax.astype" and str(call.attrs.dtype) == HALF:
        return args[0] if str(args[0].ty.dtype) == FULL else relax.op.astype(args[0], FULL)
    if all(new.same_as(old) for new, old in zip(args, call.args)):
        widened = call
    else:
        widened = builder.normalize(relax.Call(call.op, args, call.attrs, call.ty_args))
    if _is_half(widened):
        return relax.op.astype(builder.emit(widened), FULL)
    return widened


def _returning(func, declared):
    """`func` returning the float16 outputs `declared` says it returns: each float32 result cast back."""
    from tvm import relax

    value, casts = _cast_back(func.body.body, declared, [])
    if not casts:
        return func
    body = relax.SeqExpr([*func.body.blocks, relax.BindingBlock(casts)], value)
    return relax.Function(func.params, body, declared, func.is_pure, func.attrs)


def _cast_back(expr, declared, casts):
    """(the value, the bindings that make it): `expr` with each tensor `declared` float16 cast back to it."""
    import tvm
    from tvm import relax

    if isinstance(declared, tvm.ir.TupleType):
        fields = []
        for index, info in enumerate(declared.fields):
            item = relax.TupleGetItem(expr, index)
            value, casts = _cast_back(item, info, casts)
            fields.append(value)
        return relax.Tuple(fields), casts
    if isinstance(declared, relax.TensorType) and str(declared.dtype) == HALF:
        var = relax.Var(f"output_{len(casts)}", declared)
        return var, [*casts, relax.VarBinding(var, relax.op.astype(expr, HALF))]
    return expr, casts
