"""Transposes that cancel through a reshape, folded into the reshape.

Channels-last convs (channels_last.py) hand a model's NCHW reshapes their input through a transpose back to
NCHW. Where the model then transposes the result back to channels last, as a ViT's patch embedding does
(`conv(x).flatten(2).transpose(1, 2)`) and YOLOv10's head (each level's [1, 80, H*W] scores concatenated,
a sigmoid, then `.transpose(1, 2)`), the two transposes cancel: the element order at the end is the conv's
own, and the whole chain is a reshape of it, which costs nothing. Computed instead, YOLOv10's chain was one
fused kernel of index arithmetic at 4.5 ns an element (760 us of an 8 ms model).

A transpose is folded where the chain under it is a reshape or transpose of reshapes and transposes (the
leaf), or a concatenation or an element-wise function of such chains, every value in it read only there,
and where the leaves' composite keeps every element in place (checked on the indices themselves). The
transpose then moves down through the element-wise functions and the concatenation (its axis renumbered),
and each leaf becomes one reshape.
"""

from __future__ import annotations

import math

from modelbuild.compiler.relax_rewrite import (
    ELEMENTWISE,
    known_shape,
    module_pass,
    module_uses,
    operator_name,
    rewrite_and_prune,
    single_use_binding,
)

RESHAPES = {"relax.reshape", "relax.permute_dims"}
CHECKED_ELEMENTS = 1 << 22  # a leaf's indices are checked as an array of this many int32 at most (16 MiB)


def transform():
    """`fold` as a module pass: transposes folded into their readers."""
    return module_pass(fold, "TransposesFolded")


def fold(module):
    """The module with every foldable transpose folded (dead code removed)."""
    uses = module_uses(module)

    def rule(mutator, call):
        if operator_name(call) != "relax.permute_dims" or _rank(call.args[0]) is None:
            return None
        return _through(mutator, call.args[0], _axes(call), uses)

    return rewrite_and_prune(module, rule)


def _through(mutator, value, axes: list[int], uses: dict):
    """`value` transposed by `axes`, with the transpose moved down to its leaves and folded there; None where
    some leaf's elements would move."""
    from tvm import relax

    call = single_use_binding(mutator, value, uses)
    if call is None:
        return None
    name = operator_name(call)
    if name in ELEMENTWISE:
        inner = _through(mutator, call.args[0], axes, uses)
        return (
            None
            if inner is None
            else relax.Call(call.op, [mutator.builder_.emit(inner)] + list(call.args[1:]), call.attrs)
        )
    if name == "relax.concat" and isinstance(call.args[0], relax.Tuple) and _concat_axis(call) is not None:
        parts = [_through(mutator, part, axes, uses) for part in call.args[0].fields]
        if any(part is None for part in parts):
            return None
        return relax.op.concat([mutator.builder_.emit(part) for part in parts], axis=axes.index(_concat_axis(call)))
    return _leaf(mutator, value, axes, uses)


def _leaf(mutator, value, axes: list[int], uses: dict):
    """The reshape a chain of reshapes and transposes ending in `value`, then transposed by `axes`, is; None
    where it moves elements."""
    from tvm import relax

    chain, base = [], value
    while (call := single_use_binding(mutator, base, uses)) is not None and operator_name(call) in RESHAPES:
        chain.append(call)
        base = call.args[0]
    shape = known_shape(base)
    if not chain or shape is None or math.prod(shape) > CHECKED_ELEMENTS:
        return None
    steps = [
        (operator_name(c), _axes(c) if operator_name(c) == "relax.permute_dims" else known_shape(c))
        for c in reversed(chain)
    ]
    final = _kept_in_place(shape, steps + [("relax.permute_dims", axes)])
    return None if final is None else relax.op.reshape(base, final)


def _kept_in_place(shape: list[int], steps: list[tuple]) -> list[int] | None:
    """The final shape, where the steps (reshapes to a shape, transposes by axes) leave every element at its
    place in memory; else None."""
    import numpy as np

    indices = np.arange(math.prod(shape), dtype=np.int32).reshape(shape)
    for kind, argument in steps:
        if argument is None:
            return None
        indices = indices.transpose(argument) if kind == "relax.permute_dims" else indices.reshape(argument)
    return list(indices.shape) if np.array_equal(indices.ravel(), np.arange(indices.size)) else None


def _rank(expr) -> int | None:
    """The tensor's number of axes, where known (a symbolic shape's too)."""
    ndim = getattr(expr.ty, "ndim", -1)
    return None if ndim is None or ndim < 0 else int(ndim)


def _axes(call) -> list[int]:
    rank = _rank(call.args[0])
    axes = call.attrs.axes
    return list(reversed(range(rank))) if axes is None else [int(a) % rank for a in axes]


def _concat_axis(call) -> int | None:
    rank = _rank(call)
    return None if rank is None or call.attrs.axis is None else int(call.attrs.axis) % rank
