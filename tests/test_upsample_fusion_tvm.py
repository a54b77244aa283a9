"""Nearest upsamplings fused into their element-wise consumer's kernel, but not beside a conv of many pixels."""

from __future__ import annotations

import numpy as np

from tests.helpers.relax_graphs import build_module, scheduled_kernel

SHAPE = (1, 16, 8, 32)
WEIGHTS = np.random.default_rng(0).standard_normal((16, 16, 1, 1)).astype("float32") * 0.25


def upsampled_corner(bb, x):
    """x's top-left quarter, upsampled 2x back to x's size: an FPN's coarser level."""
    from tvm import relax

    corner = bb.emit(relax.op.strided_slice(x, axes=[2, 3], begin=[0, 0], end=[4, 16]))
    return bb.emit(
        relax.op.image.resize2d(
            corner,
            (8, 32),
            method="nearest_neighbor",
            coordinate_transformation_mode="asymmetric",
            rounding_method="floor",
        )
    )


def kernel_names(module) -> list[str]:
    import tvm
    from tvm import tirx

    from modelbuild.compiler import lowering

    with tvm.target.Target({"kind": "llvm", "num-cores": 2}), tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, tvm.target.Target.current(), fuse=True, layout=None, schedule=True)
    return [gv.name_hint for gv, f in phases.fused.functions.items() if isinstance(f, tirx.PrimFunc)]


def test_an_upsampling_added_after_a_gate_of_one_pixel_is_computed_in_the_gates_kernel():
    """The DB detectors' FPN: x + x * gate + upsample(coarser), the gate a 1x1 conv of x's mean. Kept a kernel
    of its own, each level's upsampled map was written whole and read back (0.21 ms at the finest level)."""
    import tvm
    from tvm import relax

    def neck(bb, x):
        pooled = bb.emit(relax.op.mean(x, axis=[2, 3], keepdims=True))
        gate = bb.emit(relax.op.sigmoid(bb.emit(relax.op.nn.conv2d(pooled, relax.const(WEIGHTS)))))
        return bb.emit(relax.op.add(bb.emit(relax.op.multiply(x, gate)), upsampled_corner(bb, x)))

    script, run = scheduled_kernel(build_module(neck, SHAPE), "resize", schedule=True)
    # the kernel applying the gate (its sigmoid; the 1x1 conv itself a matmul in NCHW, pointwise_matmul.py)
    # computes the upsampling, a load and a shuffle per vector
    assert "sigmoid" in script.lower() and "T.Shuffle(" in script
    x = np.random.default_rng(1).standard_normal(SHAPE).astype("float32")
    gate = 1 / (1 + np.exp(-np.einsum("oc,nc->no", WEIGHTS[:, :, 0, 0], x.mean(axis=(2, 3)))))
    corner = np.repeat(np.repeat(x[:, :, :4, :16], 2, axis=2), 2, axis=3)
    np.testing.assert_allclose(
        run(tvm.runtime.tensor(x)).numpy(), x * gate[:, :, None, None] + corner, rtol=1e-5, atol=1e-5
    )


def test_an_upsampling_added_to_a_conv_of_many_pixels_stays_a_kernel_of_its_own():
    """A classic FPN's lateral 1x1 conv plus the coarser level: in the conv's kernel, the upsampling would be a
    block the hand-written int8 convs do not expect, and they would leave the conv to the generic steps."""
    from tvm import relax

    def lateral(bb, x):
        return bb.emit(relax.op.add(bb.emit(relax.op.nn.conv2d(x, relax.const(WEIGHTS))), upsampled_corner(bb, x)))

    names = kernel_names(build_module(lateral, SHAPE))
    assert any("resize2d" in name and "conv2d" not in name for name in names), names
    assert not any("conv2d" in name and "resize2d" in name for name in names), names
