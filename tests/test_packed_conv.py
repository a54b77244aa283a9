"""The packed layouts of the dot-product convs (VNNI, sdot, AVX2's vpmaddwd): pure numpy, no TVM."""

from __future__ import annotations

import numpy as np

from modelbuild.compiler.kernels.packed_conv import (
    GROUP,
    Instruction,
    channel_tile,
    column_lanes,
    lanes_width,
    pack_weights,
)

VNNI = Instruction("vnni", lanes=16, data_dtype="uint8")
SDOT = Instruction("sdot", lanes=4, data_dtype="int8")
AVX2 = Instruction("avx2", lanes=8, data_dtype="int16", group=2, weight_dtype="int16", accumulates=False)
AMX = Instruction("amx", lanes=16, data_dtype="uint8", group_block=16)
AMX_32 = Instruction("amx", lanes=16, data_dtype="uint8", group_block=8)


def test_packed_weights_put_lanes_of_output_channels_by_4_input_channels_and_pad_with_zeros():
    weight = np.random.default_rng(0).integers(-128, 128, (20, 6, 3, 2)).astype(np.int8)
    for instruction, blocks in ((VNNI, 2), (SDOT, 5)):
        lanes = instruction.lanes
        packed, _ = pack_weights(weight, instruction, shift=128)
        assert packed.shape == (blocks, 2, 3, 2, lanes, GROUP) and packed.dtype == np.int8
        for o, c, kh, kw in [(0, 0, 0, 0), (19, 5, 2, 1), (17, 4, 1, 0), (3, 2, 2, 1)]:
            assert packed[o // lanes, c // GROUP, kh, kw, o % lanes, c % GROUP] == weight[o, c, kh, kw]
        assert not packed[:, 1, :, :, :, 2:].any()  # input channels 6 and 7 do not exist
    assert not pack_weights(weight, VNNI, shift=0)[0][1, :, :, :, 4:, :].any()  # nor outputs 20..31


def test_weights_for_a_tile_instruction_put_64_input_channels_of_one_output_channel_in_a_row():
    """AMX's weight tile: row o holds output channel o's 64 input channels (16 groups of 4), so the packed
    weights are [O/16, C/64, KH, KW, 16, 16, 4]; 70 input channels pad to 128, 20 outputs to 32, with zeros."""
    weight = np.random.default_rng(2).integers(-128, 128, (20, 70, 3, 1)).astype(np.int8)
    packed, correction = pack_weights(weight, AMX, shift=128)
    assert packed.shape == (2, 2, 3, 1, 16, 16, GROUP) and packed.dtype == np.int8
    for o, c, kh in [(0, 0, 0), (19, 69, 2), (17, 64, 1), (3, 37, 2)]:
        assert packed[o // 16, c // 64, kh, 0, o % 16, c % 64 // GROUP, c % GROUP] == weight[o, c, kh, 0]
    assert not packed[:, 1, :, :, :, 2:].any() and not packed[:, 1, :, :, :, 1, 2:].any()  # channels 70..127
    assert not packed[1, :, :, :, 4:].any()  # outputs 20..31
    assert correction.tolist() == (128 * weight.astype(np.int64).reshape(20, -1).sum(axis=1)).tolist()


def test_weights_for_a_32_channel_tile_step_put_32_input_channels_of_one_output_channel_in_a_row():
    """AMX's 32-channel step: [O/16, C/32, KH, KW, 16, 8, 4], a weight tile's row 32 bytes."""
    weight = np.random.default_rng(3).integers(-128, 128, (16, 96, 1, 3)).astype(np.int8)
    packed, _ = pack_weights(weight, AMX_32, shift=128)
    assert packed.shape == (1, 3, 1, 3, 16, 8, GROUP)
    for o, c, kw in [(0, 0, 0), (15, 95, 2), (7, 33, 1), (3, 64, 0)]:
        assert packed[0, c // 32, 0, kw, o, c % 32 // GROUP, c % GROUP] == weight[o, c, 0, kw]


def test_weights_for_a_16_bit_instruction_are_widened_and_paired():
    """vpmaddwd multiplies int16 pairs: [O/8, C/2, KH, KW, 8, 2] int16, the same values."""
    weight = np.random.default_rng(0).integers(-128, 128, (20, 5, 3, 2)).astype(np.int8)
    packed, correction = pack_weights(weight, AVX2, shift=AVX2.shift("int8"))
    assert packed.shape == (3, 3, 3, 2, 8, 2) and packed.dtype == np.int16
    for o, c, kh, kw in [(0, 0, 0, 0), (19, 4, 2, 1), (9, 3, 1, 0)]:
        assert packed[o // 8, c // 2, kh, kw, o % 8, c % 2] == weight[o, c, kh, kw]
    assert not packed[:, 2, :, :, :, 1].any() and not correction.any()  # channel 5 does not exist; no shift


def test_the_correction_undoes_the_shift_of_the_data_for_either_sign():
    weight = np.random.default_rng(1).integers(-128, 128, (5, 3, 3, 3)).astype(np.int8)
    sums = weight.astype(np.int64).reshape(5, -1).sum(axis=1)
    assert pack_weights(weight, VNNI, shift=128)[1].tolist() == (128 * sums).tolist()
    assert pack_weights(weight, SDOT, shift=-128)[1].tolist() == (-128 * sums).tolist()
    assert not pack_weights(weight, SDOT, shift=0)[1].any()


def test_data_is_shifted_only_into_the_sign_the_instruction_multiplies():
    """vpdpbusd multiplies uint8 data, sdot int8: int8 + 128 and uint8 - 128 map each range onto the other;
    int16 holds both as they are."""
    assert (VNNI.shift("int8"), VNNI.shift("uint8")) == (128, 0)
    assert (SDOT.shift("int8"), SDOT.shift("uint8")) == (0, -128)
    assert (AVX2.shift("int8"), AVX2.shift("uint8")) == (0, 0)
    data = np.arange(256, dtype=np.int64)
    assert (((data + SDOT.shift("uint8")) >= -128) & ((data + SDOT.shift("uint8")) <= 127)).all()


def test_a_row_is_rounded_up_to_whole_vectors_only_where_few_columns_are_wasted():
    """Column lanes on 64 columns for 57 (the generated ResNet's odd widths: its int8 library went from
    2.09x its float one to 0.8x with VNNI), not on 48 for 40 (the detector measured slower so) nor 16 for 9.
    Four lanes waste at most 3 columns, so sdot takes column lanes for every width from 20 up."""
    assert [lanes_width(w, 16) for w in (16, 29, 40, 57)] == [16, 32, 48, 64]
    assert [w for w in (9, 12, 16, 20, 29, 32, 40, 57, 80) if column_lanes(w, 16)] == [16, 29, 32, 57, 80]
    assert [w for w in (1, 3, 4, 7, 9, 12, 13, 20, 21, 29) if column_lanes(w, 4)] == [4, 7, 12, 20, 21, 29]


def test_a_tile_of_output_channels_computes_fewest_that_are_dropped():
    """Column lanes: 24 channels as two tiles of 12, not two of 16 with 8 dropped (the detectors' 96 -> 24
    3x3 convs, 0.93x; 128 -> 6 0.66x, 32 -> 20 0.76x, VNNI, alone); whole vectors keep 16. Tiles of fewer
    than 8 channels would leave the instruction's latency showing, so 6 channels compute 8; a 4-lane sdot
    and an 8-lane AVX2 tile keep their width."""
    assert [channel_tile(c, 16) for c in (96, 24, 12, 18, 20, 40, 6, 1, 360)] == [16, 12, 12, 9, 10, 10, 8, 8, 15]
    assert [channel_tile(c, 4) for c in (24, 6)] == [4, 4] and [channel_tile(c, 8) for c in (24, 12)] == [8, 8]
