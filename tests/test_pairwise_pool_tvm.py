"""Max pools of two-column windows at stride two in NCHW: two loads and two shuffles per output vector, the
same values as TVM's pool."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.relax_graphs import build_module, scheduled_kernel


def max_pool(x, rows, row_stride):
    n, c, h, w = x.shape
    out_h = (h - rows) // row_stride + 1
    windows = [
        x[:, :, r : r + row_stride * out_h : row_stride, k : k + 2 * (w // 2) : 2]
        for r in range(rows)
        for k in range(2)
    ]
    return np.max(windows, axis=0)


@pytest.mark.parametrize(
    "shape, pool, stride, shuffled",
    [
        ((1, 200, 2, 96), (2, 2), (2, 2), 2),  # the int8 text classifier's last pool: rows of 48, vectors of 16
        ((2, 3, 9, 40), (3, 2), (2, 2), 2),  # rows of 20: vectors of 4; a window 3 rows high, batch 2
        ((1, 4, 6, 38), (2, 2), (2, 2), 0),  # rows of 19: no whole vector, TVM's own pool
        ((1, 4, 6, 32), (2, 3), (2, 3), 0),  # three columns: TVM's own
    ],
    ids=["text-classifier", "3-rows-4-lanes", "19-columns", "3-columns"],
)
def test_a_pool_two_columns_wide_at_stride_two_is_shuffled_and_keeps_the_values(shape, pool, stride, shuffled):
    """Vectorised along the output row, TVM's pool loads each lane on its own, two floats from the next."""
    import tvm
    from tvm import relax

    module = build_module(lambda bb, x: bb.emit(relax.op.nn.max_pool2d(x, pool_size=pool, strides=stride)), shape)
    script, run = scheduled_kernel(module, "pool", schedule=True)
    assert script.count("T.Shuffle(") == shuffled
    x = np.random.default_rng(7).standard_normal(shape).astype("float32")
    if pool[1] == 2:
        want = max_pool(x, pool[0], stride[0])
    else:
        want = np.max(
            [
                x[:, :, r :: stride[0], k :: stride[1]][
                    :, :, : (shape[2] - pool[0]) // stride[0] + 1, : (shape[3] - pool[1]) // stride[1] + 1
                ]
                for r in range(pool[0])
                for k in range(pool[1])
            ],
            axis=0,
        )
    np.testing.assert_array_equal(run(tvm.runtime.tensor(x)).numpy(), want)


def test_a_last_window_over_the_edge_is_left_to_tvms_own_pool():
    """With ceil_mode, 31 columns pool into 16 (whole vectors), the last window half past the row's end."""
    import tvm
    from tvm import relax

    shape = (1, 4, 6, 31)
    module = build_module(
        lambda bb, x: bb.emit(relax.op.nn.max_pool2d(x, pool_size=2, strides=2, ceil_mode=True)), shape
    )
    script, run = scheduled_kernel(module, "pool", schedule=True)
    assert "T.Shuffle(" not in script
    x = np.random.default_rng(8).standard_normal(shape).astype("float32")
    padded = np.pad(x, [(0, 0), (0, 0), (0, 0), (0, 1)], constant_values=-np.inf)
    np.testing.assert_array_equal(run(tvm.runtime.tensor(x)).numpy(), max_pool(padded, 2, 2))


def test_a_channels_last_pool_is_tvms_own():
    """A float build's pools are channels-last, their vectors along the channels: nothing to shuffle."""
    from tvm import relax

    module = build_module(
        lambda bb, x: bb.emit(relax.op.nn.max_pool2d(x, pool_size=2, strides=2, layout="NHWC")), (1, 2, 96, 32)
    )
    script, _ = scheduled_kernel(module, "pool", schedule=True)
    assert "T.Shuffle(" not in script
