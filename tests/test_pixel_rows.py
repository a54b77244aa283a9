"""Which rows a 1x1 int8 conv's pixels are computed as (compiler/passes/pixel_rows.py); no TVM needed."""

from __future__ import annotations

from modelbuild.compiler.passes.pixel_rows import new_rows


def test_a_row_whose_rounding_wastes_too_much_is_cut_into_the_widest_rows_that_round_least():
    assert new_rows(50, 38, 16) == (2, 950)  # 38 columns would be computed as 48; 950 as 960
    assert new_rows(20, 20, 16) == (5, 80)  # whole vectors
    assert new_rows(20, 19, 8) == (2, 190)  # AVX2's 8 lanes: 384 pixels computed, as with 95 and 96


def test_a_row_rounded_up_for_column_lanes_is_cut_where_a_cut_computes_fewer_pixels():
    assert new_rows(100, 76, 16) == (5, 1520)  # 80 columns computed per row of 76; 1520 is 95 vectors
    assert new_rows(28, 28, 16) == (7, 112)


def test_of_cuts_that_compute_as_many_pixels_as_the_rows_do_the_wider_rows_are_taken():
    """Rows of 14 computed as 16, an epilogue per row: int8 1x1 convs at 14x14 as 2 x 98 (computed as 112)
    made MobileNetV3's library 0.93x and the orientation classifier's 0.88-0.93x call by call."""
    assert new_rows(14, 14, 16) == (2, 98)
    assert new_rows(3, 56, 16) == (2, 84)  # 168 pixels: computed as 192 either way


def test_rows_of_whole_vectors_are_left_alone():
    assert new_rows(3, 64, 16) is None and new_rows(160, 160, 16) is None


def test_no_cut_where_none_rounds_well_or_it_would_leave_one_row():
    assert new_rows(13, 11, 16) is None and new_rows(13, 11, 8) is None  # 143 = 11 x 13
    assert new_rows(7, 9, 16) is None  # 63 pixels in one row of 64: no rows to run in parallel
    assert new_rows(1, 1, 16) is None
