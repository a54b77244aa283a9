"""What a block says of itself: which of its iterators sum, so whether it is a reduction, and the expressions
its body computes. Shared by the default schedule and the kernels that schedule their own blocks."""

from __future__ import annotations


def sums(iter_var) -> bool:
    """Whether a block iterator is a reduction's."""
    return "Reduce" in str(iter_var.iter_type) or int(iter_var.iter_type) == 2


def is_reduction(sch, block) -> bool:
    return any(sums(iv) for iv in sch.get(block).iter_vars)


def subexpressions(expr):
    """The expression and every expression under it (calls' arguments, operands, casts, selects): this TVM's
    Python API has no visitor for TIR expressions."""
    yield expr
    for field in ("args", "a", "b", "value", "condition", "true_value", "false_value"):
        child = getattr(expr, field, None)
        if child is None:
            continue
        for item in child if field == "args" else [child]:
            yield from subexpressions(item)
