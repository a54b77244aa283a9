"""Which NCHW conv output rows are widened to whole vectors, and to how many columns (no TVM)."""

from __future__ import annotations

import pytest

from modelbuild.compiler.passes.column_padding import MAX_WIDENING, ROW_LANES, widened_columns


@pytest.mark.parametrize(
    "columns, wide",
    [
        (94, 96),  # the speed fuzzer's 4 groups of 6 over 124 x 94: no vector width divided the row
        (28, 32),  # divided by 4 lanes only: half an AVX2 vector
        (61, 64),
        (7, 8),
        (12, 16),  # a third more columns, still under the widening allowed
        (96, None),  # whole vectors already
        (16, None),
        (5, None),  # 8 columns for 5: more than the widening allowed
        (1, None),
    ],
)
def test_a_row_is_widened_to_the_next_whole_vector_unless_it_is_one_or_would_grow_too_much(columns, wide):
    assert widened_columns(columns) == wide


def test_every_widened_row_is_whole_vectors_within_the_widening_allowed():
    for columns in range(1, 300):
        wide = widened_columns(columns)
        if wide is not None:
            assert wide % ROW_LANES == 0 and columns < wide < columns + ROW_LANES
            assert wide <= MAX_WIDENING * columns
        else:
            assert columns % ROW_LANES == 0 or -(-columns // ROW_LANES) * ROW_LANES > MAX_WIDENING * columns
