"""Max and average pools in NCHW, two or three columns wide at column stride two: contiguous loads and
shuffles per output vector, the values of a plain pool."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.relax_graphs import build_module, scheduled_kernel


def pooled(x, kind: str, window, strides, padding, include_pad: bool = False) -> np.ndarray:
    """The pool as ONNX defines it, in float64: padding the max never takes, and an average over the cells
    inside the input unless `include_pad`."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (top, left, bottom, right) = window, strides, padding
    out_h, out_w = (h + top + bottom - kh) // sh + 1, (w + left + right - kw) // sw + 1
    data = np.full((n, c, h + top + bottom, w + left + right), -np.inf if kind == "max" else 0.0)
    data[:, :, top : top + h, left : left + w] = x
    inside = np.zeros(data.shape[2:])
    inside[top : top + h, left : left + w] = 1
    out = np.zeros((n, c, out_h, out_w))
    for i in range(out_h):
        for j in range(out_w):
            rows, cols = slice(i * sh, i * sh + kh), slice(j * sw, j * sw + kw)
            if kind == "max":
                out[:, :, i, j] = data[:, :, rows, cols].max(axis=(2, 3))
            else:
                count = kh * kw if include_pad else inside[rows, cols].sum()
                out[:, :, i, j] = data[:, :, rows, cols].sum(axis=(2, 3)) / count
    return out


def pool_module(kind: str, shape, window, strides, padding=(0, 0, 0, 0), include_pad: bool = False, **attrs):
    from tvm import relax

    def body(bb, x):
        if kind == "max":
            return bb.emit(relax.op.nn.max_pool2d(x, pool_size=window, strides=strides, padding=padding, **attrs))
        return bb.emit(
            relax.op.nn.avg_pool2d(
                x, pool_size=window, strides=strides, padding=padding, count_include_pad=include_pad, **attrs
            )
        )

    return build_module(body, shape)


@pytest.mark.parametrize(
    "kind, shape, window, strides, padding, include_pad, shuffles",
    [
        ("max", (1, 200, 2, 96), (2, 2), (2, 2), (0, 0, 0, 0), False, 2),  # the int8 text classifier's last pool
        ("avg", (1, 32, 74, 74), (3, 3), (2, 2), (1, 1, 1, 1), False, 3),  # 37 outputs a row: 5 vectors of 8
        ("max", (2, 5, 73, 73), (3, 3), (2, 2), (1, 1, 1, 1), False, 3),  # a ResNet stem's pool, batch 2
        ("avg", (1, 8, 13, 17), (3, 3), (2, 2), (1, 1, 1, 1), True, 3),  # the padding counted in
        ("avg", (1, 16, 100, 100), (2, 2), (2, 2), (0, 0, 0, 0), False, 2),
        ("max", (1, 3, 9, 40), (3, 2), (1, 2), (0, 1, 2, 0), False, 2),  # uneven padding, row stride 1
        ("avg", (1, 4, 20, 7), (3, 3), (2, 2), (0, 0, 1, 1), False, 3),  # 3 outputs a row: one vector of 4
    ],
    ids=["text-classifier", "avg-37-columns", "resnet-stem", "avg-counting-padding", "avg-2x2", "uneven", "narrow"],
)
def test_a_pool_at_column_stride_two_is_shuffled_and_keeps_the_values(
    kind, shape, window, strides, padding, include_pad, shuffles
):
    """Vectorised along the output row, TVM's pool loads each lane on its own, two floats from the next."""
    import tvm

    module = pool_module(kind, shape, window, strides, padding, include_pad)
    script, run = scheduled_kernel(module, "pool", schedule=True, layout="NCHW")
    assert script.count("T.Shuffle(") == shuffles
    x = np.random.default_rng(7).standard_normal(shape).astype("float32")
    got = run(tvm.runtime.tensor(x)).numpy()
    want = pooled(x, kind, window, strides, padding, include_pad)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "kind, window, strides, attrs",
    [("max", (2, 2), (2, 2), {"ceil_mode": True}), ("max", (2, 3), (2, 3), {}), ("avg", (4, 4), (2, 2), {})],
    ids=["ceil-mode", "column-stride-3", "4-columns"],
)
def test_other_pools_are_tvms_own_with_the_same_values(kind, window, strides, attrs):
    """ceil_mode's last window hangs over the row's end; other strides and windows read no pairs."""
    import tvm

    shape = (1, 4, 8, 31)
    script, run = scheduled_kernel(pool_module(kind, shape, window, strides, **attrs), "pool", schedule=True)
    assert "T.Shuffle(" not in script
    x = np.random.default_rng(8).standard_normal(shape).astype("float32")
    got = run(tvm.runtime.tensor(x)).numpy()
    if attrs.get("ceil_mode"):
        x = np.pad(x, [(0, 0), (0, 0), (0, 0), (0, 1)], constant_values=-np.inf)
    np.testing.assert_allclose(got, pooled(x, kind, window, strides, (0, 0, 0, 0)), rtol=1e-6, atol=1e-6)


def test_a_channels_last_pool_is_tvms_own():
    """A float build's pools are channels-last, their vectors along the channels: nothing to shuffle."""
    from tvm import relax

    module = build_module(
        lambda bb, x: bb.emit(relax.op.nn.max_pool2d(x, pool_size=2, strides=2, layout="NHWC")), (1, 2, 96, 32)
    )
    script, _ = scheduled_kernel(module, "pool", schedule=True)
    assert "T.Shuffle(" not in script


def test_rows_are_rounded_up_to_vectors_that_add_at_most_an_eighth():
    from modelbuild.compiler.kernels.strided_pool import vector_width

    assert [vector_width(row) for row in (48, 37, 20, 19, 3, 128, 130)] == [16, 8, 4, 4, 4, 16, 16]
