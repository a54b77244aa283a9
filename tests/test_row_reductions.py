"""How many partial results a row takes, and which reductions are rows of the last axis."""

from __future__ import annotations

from modelbuild.compiler.kernels import row_reductions


def test_long_rows_take_several_vectors_of_partials_and_short_ones_one():
    assert row_reductions.partial_width(18710) == row_reductions.LANES * row_reductions.CHAINS
    assert row_reductions.partial_width(100) == row_reductions.LANES


def test_a_reduction_is_a_row_of_the_last_axis_alone_two_vectors_long():
    assert row_reductions.long_enough((3136, 96), [-1]) and row_reductions.long_enough((1, 56, 56, 96), [3])
    assert not row_reductions.long_enough((8, 31), [-1])  # under two vectors
    assert not row_reductions.long_enough((8, 64, 64), [1]) and not row_reductions.long_enough((8, 64, 64), [1, 2])
