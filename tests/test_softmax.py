"""Which softmaxes get the row-by-row kernel, and how many partial results its rows take."""

from __future__ import annotations

from modelbuild.compiler.kernels import softmax


def test_long_last_axes_are_computed_here_and_others_are_not():
    assert softmax.eligible((40, 18710), -1) and softmax.eligible((2, 3, 32), 2)
    assert not softmax.eligible((2, 31), -1)  # under two vectors: TVM's fast_softmax
    assert not softmax.eligible((2, 300, 5), 1)
