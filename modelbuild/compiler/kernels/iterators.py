"""What a scheduled block's iterators say of it: which of them sum, so whether the block is a reduction.
Shared by the default schedule and the kernels that schedule their own reductions."""

from __future__ import annotations


def sums(iter_var) -> bool:
    """Whether a block iterator is a reduction's."""
    return "Reduce" in str(iter_var.iter_type) or int(iter_var.iter_type) == 2


def is_reduction(sch, block) -> bool:
    return any(sums(iv) for iv in sch.get(block).iter_vars)
