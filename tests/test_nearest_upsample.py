"""Which resizes are whole-factor nearest-neighbour upsamplings (no TVM needed)."""

from __future__ import annotations

import pytest

from modelbuild.compiler.kernels.nearest_upsample import upsampling_factors, vector_width


@pytest.mark.parametrize(
    "source, target, factors",
    [
        ((1, 8, 5, 16), (1, 8, 10, 32), (2, 2)),
        ((1, 24, 20, 20), (1, 24, 160, 160), (8, 8)),
        ((2, 3, 4, 4), (2, 3, 4, 12), (1, 3)),
        ((1, 8, 5, 16), (1, 8, 7, 32), None),  # 7 rows from 5: not a whole factor
        ((1, 8, 10, 32), (1, 8, 5, 16), None),  # downsampling
        ((1, 8, 5, 16), (1, 4, 10, 32), None),  # channels changed
        ((1, 8, 16), (1, 8, 32), None),  # not NCHW
    ],
    ids=["2x", "8x", "3x-wide", "fractional", "down", "channels", "rank-3"],
)
def test_upsampling_factors_are_whole_multiples_of_each_side(source, target, factors):
    assert upsampling_factors(source, target) == factors


@pytest.mark.parametrize(
    "row, factor, width",
    [(160, 2, 16), (40, 2, 8), (76, 2, 4), (160, 8, 16), (20, 8, None), (48, 3, None), (38, 1, None)],
)
def test_a_row_takes_the_widest_vector_that_divides_it_and_its_factor_divides(row, factor, width):
    assert vector_width(row, factor) == width


@pytest.mark.parametrize("row, factor, width", [(128, 8, 64), (160, 2, 32), (48, 4, 16), (40, 2, None)])
def test_a_row_of_bytes_takes_vectors_of_as_many_bytes_as_a_float_rows(row, factor, width):
    """64, 32 or 16 bytes: 64 int8 lanes where a float row's vector holds 16."""
    assert vector_width(row, factor, "int8") == width
