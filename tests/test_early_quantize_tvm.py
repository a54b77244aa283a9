"""A quantize moved before the concatenation and nearest upsampling it reads: they move int8, the same values."""

from __future__ import annotations

import numpy as np

from tests.helpers.relax_graphs import SHAPE, build_module, kernel_shapes, scheduled_kernel

SCALES = np.linspace(0.01, 0.05, 16, dtype="float32")  # per channel of the concatenation: 8 upsampled, 8 not


def operators(module) -> list[str]:
    from tvm import relax

    return [
        b.value.op.name
        for block in module["main"].body.blocks
        for b in block.bindings
        if isinstance(b.value, relax.Call)
    ]


def upsampled_beside(bb, x, method: str = "nearest_neighbor", full=None):
    """An FPN's last step: a map of half the size upsampled 2x, concatenated with a full-size one (`full`, else
    -x, which only the concatenation reads)."""
    from tvm import relax

    half = bb.emit(relax.op.strided_slice(x, axes=[2, 3], begin=[0, 0], end=[16, 16], strides=[2, 2]))
    up = bb.emit(
        relax.op.image.resize2d(
            half,
            (16, 16),
            layout="NCHW",
            method=method,
            coordinate_transformation_mode="asymmetric",
            rounding_method="floor",
        )
    )
    return bb.emit(relax.op.concat([up, full if full is not None else bb.emit(relax.op.negative(x))], axis=1))


def quantized(bb, concatenated):
    from tvm import relax

    return bb.emit(
        relax.op.quantize(concatenated, relax.const(SCALES), relax.const(0, "int8"), axis=1, out_dtype="int8")
    )


def test_a_quantize_of_an_upsampled_concatenation_quantizes_each_piece_first_with_the_same_values():
    import tvm

    from modelbuild.compiler.passes import early_quantize

    module = build_module(lambda bb, x: quantized(bb, upsampled_beside(bb, x)))
    moved = early_quantize.rewrite(module)
    assert operators(moved) == [
        "relax.strided_slice",
        "relax.negative",
        "relax.quantize",
        "relax.image.resize2d",
        "relax.quantize",
        "relax.concat",
    ]
    resize = next(
        b.value
        for b in moved["main"].body.blocks[0].bindings
        if getattr(b.value, "op", None) is not None and b.value.op.name == "relax.image.resize2d"
    )
    assert str(resize.ty.dtype) == "int8"
    assert "quantize_resize2d" in next(iter(kernel_shapes(module, layout="auto")))  # as the compile stage lowers it
    _, run = scheduled_kernel(module, "concat", schedule=True)
    x = np.random.default_rng(5).uniform(-4, 4, SHAPE).astype("float32")
    up = x[:, :, ::2, ::2].repeat(2, axis=2).repeat(2, axis=3)
    reciprocals = (np.float32(1) / SCALES).reshape(1, 16, 1, 1)
    want = np.clip(np.rint(np.concatenate([up, -x], axis=1) * reciprocals), -128, 127).astype("int8")
    np.testing.assert_array_equal(run(tvm.runtime.tensor(x)).numpy(), want)


def test_a_concatenation_that_something_else_reads_stays_float():
    from tvm import relax

    from modelbuild.compiler.passes import early_quantize

    def read_twice(bb, x):
        concatenated = upsampled_beside(bb, x)
        q = quantized(bb, concatenated)
        return bb.emit(relax.op.add(relax.op.astype(q, "float32"), concatenated))

    assert operators(early_quantize.rewrite(build_module(read_twice)))[:5] == [
        "relax.strided_slice",
        "relax.image.resize2d",
        "relax.negative",
        "relax.concat",
        "relax.quantize",
    ]


def test_a_concatenation_of_a_map_something_else_reads_stays_float():
    """That map would keep its float value for its other reader and take a quantize kernel of its own
    (YOLOv8n's neck, whose C2f blocks read the maps it concatenates: 1.045x)."""
    from tvm import relax

    from modelbuild.compiler.passes import early_quantize

    def piece_read_twice(bb, x):
        negated = bb.emit(relax.op.negative(x))
        concatenated = upsampled_beside(bb, x, full=negated)
        return bb.emit(relax.op.add(relax.op.astype(quantized(bb, concatenated), "float32"), relax.op.sum(negated)))

    assert operators(early_quantize.rewrite(build_module(piece_read_twice)))[:5] == [
        "relax.negative",
        "relax.strided_slice",
        "relax.image.resize2d",
        "relax.concat",
        "relax.quantize",
    ]


def test_a_linear_resize_is_not_passed():
    """A linear upsampling computes new values between its inputs: quantized first, they would be rounded
    twice. The concatenation is still split, the resize's piece quantized after it."""
    from modelbuild.compiler.passes import early_quantize

    module = build_module(lambda bb, x: quantized(bb, upsampled_beside(bb, x, method="linear")))
    assert operators(early_quantize.rewrite(module)) == [
        "relax.strided_slice",
        "relax.image.resize2d",
        "relax.negative",
        "relax.quantize",
        "relax.quantize",
        "relax.concat",
    ]


def test_a_quantize_after_a_concatenation_quantizes_each_piece_before_it():
    """Before -> Expected: the concatenation moves int8 pieces, each quantized with the same constants."""
    import tvm
    from tvm.script import ir as I
    from tvm.script import relax as R

    from modelbuild.compiler.passes import early_quantize

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 4, 4, 4), "float32"), y: R.Tensor((1, 4, 4, 4), "float32")) -> R.Tensor(
            (1, 8, 4, 4), "int8"
        ):
            with R.dataflow():
                a = R.nn.relu(x)
                b = R.nn.relu(y)
                c = R.concat([a, b], axis=1)
                q = R.quantize(c, R.const(0.5, "float32"), R.const(0, "int8"), axis=1, out_dtype="int8")
                R.output(q)
            return q

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 4, 4, 4), "float32"), y: R.Tensor((1, 4, 4, 4), "float32")) -> R.Tensor(
            (1, 8, 4, 4), "int8"
        ):
            with R.dataflow():
                a = R.nn.relu(x)
                b = R.nn.relu(y)
                qa = R.quantize(a, R.const(0.5, "float32"), R.const(0, "int8"), axis=1, out_dtype="int8")
                qb = R.quantize(b, R.const(0.5, "float32"), R.const(0, "int8"), axis=1, out_dtype="int8")
                q = R.concat([qa, qb], axis=1)
                R.output(q)
            return q

    tvm.ir.assert_structural_equal(early_quantize.transform()(Before), Expected)
