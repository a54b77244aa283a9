"""Nearest-neighbour upsampling by whole factors: one load and one shuffle per output vector, the same values
as TVM's resize2d."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.relax_graphs import build_module, scheduled_kernel


def resize(bb, x, size, mode="asymmetric"):
    from tvm import relax

    return bb.emit(
        relax.op.image.resize2d(
            x,
            size,
            method="nearest_neighbor",
            coordinate_transformation_mode=mode,
            rounding_method="floor" if mode == "asymmetric" else "round_prefer_floor",
        )
    )


def repeated(x, fh, fw):
    return np.repeat(np.repeat(x, fh, axis=2), fw, axis=3)


def test_an_upsampling_feeding_an_add_is_shuffled_row_by_row_where_the_add_reads_it():
    """Inlined into its consumer, as TVM's resize2d is, every lane loaded on its own (a 2x upsampling of
    96 x 80 x 80: 2.2 ms alone, 2 threads)."""
    import tvm
    from tvm import relax

    shape = (1, 8, 5, 16)
    module = build_module(lambda bb, x: bb.emit(relax.op.add(resize(bb, x, (10, 32)), relax.const(1.0))), shape)
    script, run = scheduled_kernel(module, "resize", schedule=True)
    assert "T.Shuffle(" in script and 'T.sblock("nearest_upsample_o")' in script
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    np.testing.assert_array_equal(run(tvm.runtime.tensor(x)).numpy(), repeated(x, 2, 2) + 1)


def test_upsamplings_into_a_concat_each_take_the_shuffle_and_match():
    """The DB detector's neck: 8x, 4x and 2x maps upsampled to one size and concatenated."""
    import tvm
    from tvm import relax

    def neck(bb, x):
        small = bb.emit(relax.op.strided_slice(x, axes=[2, 3], begin=[0, 0], end=[2, 4]))
        middle = bb.emit(relax.op.strided_slice(x, axes=[2, 3], begin=[0, 0], end=[4, 8]))
        return bb.emit(relax.op.concat([resize(bb, small, (16, 32)), resize(bb, middle, (16, 32)), x], axis=1))

    shape = (1, 4, 16, 32)
    script, run = scheduled_kernel(build_module(neck, shape), "resize", schedule=True)
    assert script.count("T.Shuffle(") == 2
    x = np.random.default_rng(1).standard_normal(shape).astype("float32")
    want = np.concatenate([repeated(x[:, :, :2, :4], 8, 8), repeated(x[:, :, :4, :8], 4, 4), x], axis=1)
    np.testing.assert_array_equal(run(tvm.runtime.tensor(x)).numpy(), want)


def test_int8_upsamplings_into_a_concat_each_take_a_shuffle_of_bytes_and_match():
    """The DB detector's neck once its quantize is moved before the upsamplings (early_quantize.py): 64-byte
    rows, 8x and 2x, of int8. Gathered byte by byte, its fused kernel took 323 us."""
    import tvm
    from tvm import relax

    def neck(bb, x):
        small = bb.emit(relax.op.strided_slice(x, axes=[2, 3], begin=[0, 0], end=[2, 8]))
        middle = bb.emit(relax.op.strided_slice(x, axes=[2, 3], begin=[0, 0], end=[8, 32]))
        return bb.emit(relax.op.concat([resize(bb, small, (16, 64)), resize(bb, middle, (16, 64)), x], axis=1))

    shape = (1, 4, 16, 64)
    script, run = scheduled_kernel(build_module(neck, shape, "int8"), "resize", schedule=True)
    assert script.count("[T.int64(0):T.int64(64)] = T.Shuffle(") == 2  # 64 bytes a shuffle
    x = np.random.default_rng(2).integers(-128, 128, shape).astype("int8")
    want = np.concatenate([repeated(x[:, :, :2, :8], 8, 8), repeated(x[:, :, :8, :32], 2, 2), x], axis=1)
    np.testing.assert_array_equal(run(tvm.runtime.tensor(x)).numpy(), want)


@pytest.mark.parametrize(
    "size, mode, shuffled",
    [((10, 24), "asymmetric", True), ((15, 48), "asymmetric", False), ((10, 32), "half_pixel", False)],
    ids=["2x-in-8-lanes", "3x-no-shuffle", "half-pixel-tvm-own"],
)
def test_every_resize_keeps_the_values_of_tvms_own(size, mode, shuffled):
    """Rows of 24 take 8-lane shuffles; a factor that divides no vector keeps the plain index; another
    coordinate mode is TVM's own."""
    import tvm

    shape = (1, 4, 5, 16) if size[1] != 24 else (1, 4, 5, 12)
    module = build_module(lambda bb, x: resize(bb, x, size, mode), shape)
    _, stock = scheduled_kernel(module, "resize", schedule=False)
    script, run = scheduled_kernel(
        build_module(lambda bb, x: resize(bb, x, size, mode), shape), "resize", schedule=True
    )
    assert ("T.Shuffle(" in script) == shuffled
    assert ("nearest_upsample" in script) == (mode == "asymmetric")
    x = tvm.runtime.tensor(np.random.default_rng(2).standard_normal(shape).astype("float32"))
    np.testing.assert_array_equal(run(x).numpy(), stock(x).numpy())
    if mode == "asymmetric":
        factors = (size[0] // shape[2], size[1] // shape[3])
        np.testing.assert_array_equal(run(x).numpy(), repeated(x.numpy(), *factors))
