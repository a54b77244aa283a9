"""Grouped convs merged into groups one vector wide: which merge, and that the block-diagonal weights give
the same sums (numpy only)."""

from __future__ import annotations

import numpy as np
import pytest

from modelbuild.compiler.passes.group_blocks import block_diagonal, merged
from tests.helpers.relax_graphs import grouped_conv


@pytest.mark.parametrize(
    "groups, per_group_out, k",
    [
        (32, 8, 2),  # ResNeXt's 28x28 stage, RegNet's groups of 8
        (32, 4, 4),  # ResNeXt's 56x56 stage
        (16, 2, 8),
        (13, 8, None),  # RegNet's odd group counts: no count of groups divides them into whole vectors
        (4, 2, None),  # 8 would be needed, 4 groups have not
        (6, 12, None),  # 12 channels: 4 groups (48) would do, but 4 does not divide 6
        (8, 14, None),  # 8 groups (8x the work) would do; padding each group to 16 costs 1.14x
        (4, 12, None),  # 4x the work merged, 1.33x padded
    ],
    ids=["8-wide", "4-wide", "2-wide", "odd-groups", "too-few-groups", "no-divisor", "pad-14", "pad-12"],
)
def test_the_fewest_groups_that_make_whole_vectors_are_merged(groups, per_group_out, k):
    assert merged(groups, per_group_out) == k


@pytest.mark.parametrize("groups, per_group, k", [(8, 4, 4), (6, 8, 2), (4, 3, 2)])
def test_block_diagonal_weights_with_fewer_groups_give_the_grouped_convs_sums(groups, per_group, k):
    rng = np.random.default_rng(groups)
    x = rng.standard_normal((1, groups * per_group, 6, 7))
    w = rng.standard_normal((groups * per_group, per_group, 3, 3))
    wide = block_diagonal(w, groups, k)
    assert wide.shape == (groups * per_group, k * per_group, 3, 3)
    # each output channel's own weights and k - 1 groups' worth of zeros
    assert np.count_nonzero(wide) == np.count_nonzero(w) and np.count_nonzero(wide[0, per_group:]) == 0
    np.testing.assert_allclose(grouped_conv(x, wide, groups // k), grouped_conv(x, w, groups), rtol=1e-12, atol=1e-12)
