"""Stride-2 convs as stride-1 convs over their input's column phases: the weights and padding that give the same
sums (numpy only)."""

from __future__ import annotations

import numpy as np
import pytest

from modelbuild.compiler.passes.column_phases import phase_columns, phase_weights
from tests.helpers.relax_graphs import padded_grouped_conv


def test_each_phase_takes_the_taps_of_its_parity_and_a_zero_where_the_kernel_has_none():
    weight = np.array([1.0, 2.0, 3.0], np.float32).reshape(1, 1, 1, 3)
    assert phase_weights(weight)[0, :, 0].tolist() == [[1.0, 3.0], [2.0, 0.0]]


@pytest.mark.parametrize(
    "columns, out_columns, kernel_width, pad_left, right",
    [
        (56, 28, 3, 1, 1),  # 3x3, padding 1: the conv's own padding on the right
        (57, 29, 3, 1, 2),  # an odd row: one column more makes whole pairs
        (61, 31, 5, 2, 3),
        (9, 4, 2, 0, None),  # a 2-wide kernel at stride 2 never reads the last column: not cut
    ],
)
def test_the_padding_on_the_right_makes_the_row_exactly_the_phases(columns, out_columns, kernel_width, pad_left, right):
    assert phase_columns(columns, out_columns, kernel_width, pad_left) == right


@pytest.mark.parametrize(
    "shape, groups, kernel, padding",
    [
        ((1, 8, 9, 20), 4, 3, (1, 1, 1, 1)),
        ((1, 6, 7, 23), 2, 5, (2, 2, 2, 2)),
        ((1, 4, 6, 16), 1, 7, (3, 3, 3, 3)),
        ((1, 3, 5, 12), 3, 4, (1, 1, 2, 2)),  # depthwise, an even kernel, uneven padding
    ],
)
def test_a_stride_2_conv_over_the_column_phases_gives_the_same_sums(shape, groups, kernel, padding):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((shape[1], shape[1] // groups, kernel, kernel))
    top, left, bottom, right = padding
    expected = padded_grouped_conv(x, w, strides=(2, 2), padding=padding, dilation=(1, 1), groups=groups)
    wide = phase_columns(shape[3], expected.shape[3], kernel, left)
    assert wide is not None
    batch, channels, height, columns = shape
    padded = np.pad(x, ((0, 0), (0, 0), (0, 0), (left, wide)))
    phases = padded.reshape(batch, groups, channels // groups, height, -1, 2).transpose(0, 1, 2, 5, 3, 4)
    data = phases.reshape(batch, 2 * channels, height, -1)
    got = padded_grouped_conv(
        data, phase_weights(w), strides=(2, 1), padding=(top, 0, bottom, 0), dilation=(1, 1), groups=groups
    )
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
