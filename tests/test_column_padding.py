"""Which NCHW conv output rows are widened to whole vectors, and to how many columns (no TVM)."""

from __future__ import annotations

import pytest

from modelbuild.compiler.default_schedule import VECTOR_LANES
from modelbuild.compiler.passes.column_padding import (
    MAX_WIDENING,
    MAX_WIDENING_TO_WIDE,
    QUARTER_LANES,
    ROW_LANES,
    widened_columns,
)


@pytest.mark.parametrize(
    "columns, wide",
    [
        (94, 96),  # the speed fuzzer's 4 groups of 6 over 124 x 94: no vector width divided the row
        (28, 32),  # divided by 4 lanes only: half an AVX2 vector
        (56, 64),  # 7 vectors of 8: no tile of several vectors divides them
        (40, 48),
        (61, 64),
        (12, None),  # 16 would widen by a third, and 4-lane vectors divide 12
        (36, None),
        (7, 8),  # 16 would more than double it, and no vector divides 7: a multiple of 8
        (19, 24),
        (24, None),  # 3 vectors of 8, which a tile of 3 vectors divides; 32 would widen it by a third
        (96, None),  # whole vectors already
        (16, None),
        (5, None),  # 8 columns for 5: more than the widening allowed
        (1, None),
    ],
)
def test_a_row_is_widened_to_whole_wide_vectors_or_else_whole_narrow_ones_within_the_widening_allowed(columns, wide):
    assert widened_columns(columns) == wide


def test_every_widened_row_is_whole_vectors_within_the_widening_allowed():
    for columns in range(1, 300):
        wide = widened_columns(columns)
        if wide is None:
            continue
        assert wide % ROW_LANES == 0 and columns < wide < columns + VECTOR_LANES
        assert wide <= MAX_WIDENING * columns
        if wide > MAX_WIDENING_TO_WIDE * columns:  # the narrow vectors' width, where none divided the row
            assert wide - columns < ROW_LANES and columns % QUARTER_LANES != 0
