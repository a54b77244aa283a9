"""A GEMV's weights packed so each 16 output columns read theirs in order: the packing alone, no TVM."""

from __future__ import annotations

import numpy as np

from modelbuild.compiler.kernels import packed_gemv


def test_packing_puts_each_run_of_sixteen_columns_weights_row_after_row():
    weight = np.arange(4 * 32, dtype=np.float32).reshape(4, 32)
    runs = packed_gemv.packed(weight)
    assert runs.shape == (2, 4, 16) and runs.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(runs[1, 3], weight[3, 16:32])
