"""Element-wise steps after a matmul's reshape moved above it, so that FuseOps fuses them into the matmul.

A channels-last pointwise conv computed as a matmul (pointwise_matmul.py) gives [N * H * W, Co] and reshapes it
to the conv's [N, H, W, Co] before its bias, activation and residual add. FuseOps fuses element-wise steps into
a matmul but no reshape, so the steps became a kernel of their own, a pass over the whole output. The reshape
keeps every element in place, so each step can run on the matmul's shape instead: a bias or scale that varies
along the last axis only is read as it is, a residual of the conv's full shape through a reshape of its own
(a view), and the reshape moves after the step, until a reader that is no element-wise step.

Moved: one-input element-wise functions, and binary broadcasting arithmetic whose other operand varies along the
last axis only or has the reshape's full shape; the reshape read by that step alone, from a 2-D value whose last
axis is the reshape's.
"""

from __future__ import annotations

from modelbuild.compiler.relax_rewrite import (
    ARITHMETIC,
    ELEMENTWISE,
    known_shape,
    module_pass,
    module_uses,
    operator_name,
    reshaped,
    rewrite_and_prune,
    single_use_binding,
)


def transform():
    """`sink` as a module pass."""
    return module_pass(sink, "ReshapesSunkBelowElementwise")


def sink(module):
    """The module with every element-wise step that reads a movable reshape computed before it (dead code
    removed)."""
    uses = module_uses(module)
    return rewrite_and_prune(module, lambda mutator, call: _moved(mutator, call, uses))


def _moved(mutator, call, uses: dict):
    """`call` computed on the reshape's input and reshaped after, or None where it cannot be."""
    from tvm import relax

    name = operator_name(call)
    if name not in ELEMENTWISE and name not in ARITHMETIC:
        return None
    target = known_shape(call)
    for position, arg in enumerate(call.args[: 2 if name in ARITHMETIC else 1]):
        source = _reshaped_matrix(mutator, arg, uses)
        if source is None or target is None or known_shape(arg) != target:
            continue
        args = list(call.args)
        args[position] = source
        if name in ARITHMETIC:
            other = _as_rows(mutator, call.args[1 - position], target, known_shape(source))
            if other is None:
                return None
            args[1 - position] = other
        step = mutator.builder_.emit(relax.Call(call.op, args, call.attrs))
        return relax.op.reshape(step, target)
    return None


def _reshaped_matrix(mutator, value, uses: dict):
    """The [rows, C] value that `value`, read once, reshapes to [..., C]; else None."""
    call = single_use_binding(mutator, value, uses)
    if call is None or operator_name(call) != "relax.reshape":
        return None
    source, shape = known_shape(call.args[0]), known_shape(call)
    if source is None or shape is None or len(source) != 2 or not shape or shape[-1] != source[-1]:
        return None
    return call.args[0]


def _as_rows(mutator, operand, target: list[int], rows: list[int]):
    """The other operand of a binary step, read against the [rows, C] matrix as it was against `target`: as it is
    where it varies along the last axis only, reshaped where it has the full shape; else None."""
    shape = known_shape(operand)
    if shape is None:
        return None
    if all(size == 1 for size in shape[:-1]) and len(shape) <= len(target):
        return operand if len(shape) <= 2 else reshaped(mutator, operand, [1, shape[-1]])
    if shape == target:
        return reshaped(mutator, operand, rows)
    return None
