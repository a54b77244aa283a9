"""Which channel counts are padded to whole vectors: those no vector width divides, but for up to three."""

from __future__ import annotations

import pytest

from modelbuild.compiler.passes.channel_padding import padded_channels, padded_inputs, per_group_padded


@pytest.mark.parametrize(
    "channels, computed",
    [
        (6625, 6640),  # a recogniser's classes: no width divides them
        (18710, 18720),
        (255, 256),  # a YOLO head: 3 anchors x 85
        (17, 32),
        (24, 32),
        (40, 48),
        (36, 48),
        (12, 16),  # only 8 or 4 divides them, and a third more makes 16-lane vectors
        (96, 96),
        (6624, 6624),
        (20, 20),  # 16 divides them, or padding would add more than a third
        (1, 1),
        (2, 2),
        (3, 3),  # up to three channels: summed in lanes as they are
        (5, 8),
        (7, 8),
        (9, 16),
        (15, 16),  # narrower than a vector: the narrowest width that holds them
        (4, 4),
        (8, 8),  # a vector width already
    ],
)
def test_channels_no_vector_width_divides_are_rounded_up_to_whole_vectors(channels, computed):
    assert padded_channels(channels) == computed


@pytest.mark.parametrize(
    "inputs, outputs, read",
    [
        (33, 1, 40),  # basic-pitch's last conv: a concatenation of 32 and 1 channels, to one
        (9, 3, 16),
        (33, 6, 40),
        (32, 1, 32),
        (40, 2, 40),  # whole half vectors already
        (3, 1, 3),
        (7, 1, 7),  # fewer than half a vector: an image's channels
        (33, 4, 33),
        (33, 16, 33),
        (33, 8, 33),  # the outputs make vectors: the inputs are not summed in lanes
    ],
)
def test_a_narrow_heads_input_channels_are_rounded_up_to_whole_half_vectors(inputs, outputs, read):
    assert padded_inputs(inputs, outputs) == read


@pytest.mark.parametrize(
    "groups, per_group, computed",
    [
        (4, 24, 32),  # 96 channels go in 16-lane vectors, which 24 does not hold whole
        (3, 24, 24),  # 72 go in 8-lane vectors, three to a group
        (13, 8, 8),  # RegNet's odd group counts: 104 in 8-lane vectors, one a group
        (7, 5, 8),  # 35 channels no width divides; 7 groups of 8 go in 8-lane vectors
        (4, 9, 16),
        (4, 83, 96),
        (2, 32, 32),
        (5, 4, 4),
    ],
)
def test_each_group_computes_whole_vectors_so_that_no_vector_spans_two_groups(groups, per_group, computed):
    assert per_group_padded(groups, per_group) == computed
