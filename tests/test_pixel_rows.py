"""Which rows a 1x1 int8 conv's pixels are computed as (compiler/pixel_rows.py); no TVM needed."""

from __future__ import annotations

from modelbuild.compiler.pixel_rows import new_rows


def test_a_row_whose_rounding_wastes_too_much_is_cut_into_rows_that_round_well():
    assert new_rows(50, 38, 16) == (20, 95)  # 38 columns computed as 48; 95 as 96
    assert new_rows(20, 20, 16) == (25, 16)  # rows of exactly one vector
    assert new_rows(20, 19, 8) == (4, 95)  # AVX2's 8 lanes: 96 columns, as 190 would be, and nearer 19


def test_rows_that_already_take_column_lanes_are_left_alone():
    assert new_rows(100, 76, 16) is None  # 76 columns as 80
    assert new_rows(3, 64, 16) is None


def test_no_cut_where_none_rounds_well_or_it_would_leave_one_row():
    assert new_rows(13, 11, 16) is None and new_rows(13, 11, 8) is None  # 143 = 11 x 13
    assert new_rows(7, 9, 16) is None  # 63 pixels in one row of 64: no rows to run in parallel
    assert new_rows(1, 1, 16) is None
