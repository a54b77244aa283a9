"""Heads whose output channels no vector width divides: computed in whole vectors, the padding sliced off."""

from __future__ import annotations

import numpy as np
import pytest

from tests.relax_graphs import build_module, kernel_shapes, scheduled_kernel

pytestmark = pytest.mark.tvm


def matmul_head(columns: int):
    from tvm import relax

    rng = np.random.default_rng(8)
    weight = rng.standard_normal((32, columns)).astype("float32")
    bias = rng.standard_normal(columns).astype("float32")

    def body(bb, x):
        return bb.emit(relax.op.add(bb.emit(relax.op.matmul(x, relax.const(weight))), relax.const(bias)))

    return build_module(body, (40, 32)), lambda x: x @ weight + bias


def conv_head(channels: int, inputs: int = 8):
    from tvm import relax

    weight = np.random.default_rng(9).standard_normal((channels, inputs, 3, 3)).astype("float32")

    def body(bb, x):
        return bb.emit(relax.op.sigmoid(bb.emit(relax.op.nn.conv2d(x, relax.const(weight), padding=1))))

    return build_module(body, (1, inputs, 6, 10)), weight


def test_a_matmul_head_of_37_columns_computes_48_and_returns_37_equal_to_numpy():
    import tvm

    module, reference = matmul_head(37)
    assert any([32, 48] in shapes and [40, 37] in shapes for shapes in kernel_shapes(module, "auto").values())
    script, run = scheduled_kernel(module, "matmul", schedule=True, layout="auto")
    assert "T.vectorized(T.int64(16))" in script
    x = np.random.default_rng(10).standard_normal((40, 32)).astype("float32")
    out = run(tvm.runtime.tensor(x)).numpy()
    assert out.shape == (40, 37)
    np.testing.assert_allclose(out, reference(x), rtol=1e-5, atol=1e-4)


def test_a_channels_last_conv_of_37_channels_is_padded_and_matches_the_stock_nchw_conv():
    import tvm

    module, _ = conv_head(37)
    assert any([3, 3, 8, 48] in shapes for shapes in kernel_shapes(module, "auto").values())
    _, run = scheduled_kernel(module, "conv2d", schedule=True, layout="auto")
    _, stock = scheduled_kernel(conv_head(37)[0], "conv2d", schedule=False, layout="NCHW")
    x = tvm.runtime.tensor(np.random.default_rng(11).standard_normal((1, 8, 6, 10)).astype("float32"))
    out = run(x).numpy()
    assert out.shape == (1, 37, 6, 10)
    np.testing.assert_allclose(out, stock(x).numpy(), rtol=1e-5, atol=1e-5)


def test_a_conv_from_33_channels_to_one_reads_40_summed_in_lanes_and_matches_the_stock_nchw_conv():
    import tvm

    module, _ = conv_head(1, inputs=33)
    assert any([3, 3, 40, 1] in shapes for shapes in kernel_shapes(module, "auto").values())
    script, run = scheduled_kernel(module, "conv2d", schedule=True, layout="auto")
    assert '_rf_update"' in script and "T.vectorized(T.int64(8))" in script
    _, stock = scheduled_kernel(conv_head(1, inputs=33)[0], "conv2d", schedule=False, layout="NCHW")
    x = tvm.runtime.tensor(np.random.default_rng(12).standard_normal((1, 33, 6, 10)).astype("float32"))
    out = run(x).numpy()
    assert out.shape == (1, 1, 6, 10)
    np.testing.assert_allclose(out, stock(x).numpy(), rtol=1e-5, atol=1e-5)


def test_heads_the_vector_width_divides_or_narrower_than_a_vector_are_left_as_they_are():
    for columns in (48, 10):
        module, _ = matmul_head(columns)
        assert any([32, columns] in shapes for shapes in kernel_shapes(module, "auto").values())
