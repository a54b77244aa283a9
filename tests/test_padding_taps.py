"""Which kernel taps some output reads a real input through (compiler/passes/padding_taps.py), by hand."""

from __future__ import annotations

import pytest

from modelbuild.compiler.passes.padding_taps import used_taps


@pytest.mark.parametrize(
    "size, pad, kernel, stride, outputs, taps",
    [
        (2, 2, 5, 1, 2, (1, 3)),  # the text classifier's 5x5 at 2 rows: output 0 reads taps 2-3, output 1 taps 1-2
        (1, 1, 3, 1, 1, (1, 1)),  # one row, a 3x3 kernel: the middle tap alone
        (3, 2, 5, 1, 3, (0, 4)),  # 3 rows: every tap serves some output
        (96, 2, 5, 1, 96, (0, 4)),  # a long row: all
        (3, 2, 5, 2, 2, (0, 4)),  # stride 2 over 3 rows: output 1 reads taps 0-2, output 0 taps 2-4
        (2, 1, 3, 2, 1, (1, 2)),  # stride 2, one output: tap 0 reads the padding above
    ],
)
def test_the_taps_used_are_those_some_output_reads_a_real_input_through(size, pad, kernel, stride, outputs, taps):
    assert used_taps(size, pad, kernel, stride, outputs) == taps
    read = {t for o in range(outputs) for t in range(kernel) if 0 <= o * stride + t - pad < size}
    assert read == set(range(taps[0], taps[1] + 1))  # the same, counted input by input
