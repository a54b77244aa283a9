"""Weight packing for the VNNI conv: pure numpy, no TVM."""

from __future__ import annotations

import numpy as np

from modelbuild.compiler.kernels.vnni_conv import GROUP, LANES, column_lanes, lanes_width, pack_weights


def test_packed_weights_put_16_output_channels_by_4_input_channels_and_pad_with_zeros():
    weight = np.random.default_rng(0).integers(-128, 128, (20, 6, 3, 2)).astype(np.int8)
    packed, correction = pack_weights(weight, shifted=True)
    assert packed.shape == (2, 2, 3, 2, LANES, GROUP)
    for o, c, kh, kw in [(0, 0, 0, 0), (19, 5, 2, 1), (17, 4, 1, 0), (3, 2, 2, 1)]:
        assert packed[o // LANES, c // GROUP, kh, kw, o % LANES, c % GROUP] == weight[o, c, kh, kw]
    assert not packed[1, :, :, :, 4:, :].any()  # output channels 20..31 do not exist
    assert not packed[:, 1, :, :, :, 2:].any()  # nor input channels 6 and 7
    assert correction.tolist() == (128 * weight.astype(np.int64).reshape(20, -1).sum(axis=1)).tolist()


def test_unshifted_data_needs_no_correction():
    weight = np.ones((16, 4, 1, 1), np.int8)
    assert not pack_weights(weight, shifted=False)[1].any()


def test_a_row_is_rounded_up_to_whole_vectors_only_where_few_columns_are_wasted():
    """Column lanes on 64 columns for 57 (the generated ResNet's odd widths: its int8 library went from
    2.09x its float one to 0.8x), not on 48 for 40 (the detector measured slower so) nor 16 for 9."""
    assert [lanes_width(w) for w in (16, 29, 40, 57)] == [16, 32, 48, 64]
    assert [w for w in (9, 12, 16, 20, 29, 32, 40, 57, 80) if column_lanes(w)] == [16, 29, 32, 57, 80]
