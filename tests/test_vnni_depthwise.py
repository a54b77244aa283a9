"""Weight packing and the window rule of the VNNI depthwise conv: pure numpy, no TVM."""

from __future__ import annotations

import numpy as np

from modelbuild.compiler.kernels.vnni_depthwise import (
    GROUP,
    fits_window,
    load_width,
    pack_weights,
)


def test_packed_weights_group_each_kernel_row_by_4_taps_and_pad_with_zeros():
    weight = np.random.default_rng(0).integers(-128, 128, (6, 1, 3, 5)).astype(np.int8)
    packed, correction = pack_weights(weight, shifted=True)
    assert packed.shape == (6, 3, 2, GROUP)  # 5 taps a row: a group of 4 and a group of 1 + 3 zeros
    for c, row, tap in [(0, 0, 0), (5, 2, 4), (3, 1, 3), (2, 0, 2)]:
        assert packed[c, row, tap // GROUP, tap % GROUP] == weight[c, 0, row, tap]
    assert not packed[:, :, 1, 1:].any()
    assert correction.tolist() == (128 * weight.astype(np.int64).reshape(6, -1).sum(axis=1)).tolist()


def test_unshifted_data_needs_no_correction():
    assert not pack_weights(np.ones((4, 1, 3, 3), np.int8), shifted=False)[1].any()


def test_one_load_holds_the_columns_of_16_lanes_by_4_taps():
    assert fits_window(1, 1)  # 19 columns
    assert fits_window(3, 2)  # 52
    assert fits_window(4, 1)  # 64: columns 0..63
    assert not fits_window(4, 2)  # 67
    assert not fits_window(1, 20)


def test_stride_1_loads_half_a_window():
    assert load_width(1, 1) == 32  # 19 columns
    assert load_width(1, 5) == 32  # 31
    assert load_width(1, 6) == 64  # 34
    assert load_width(2, 1) == 64  # 34
