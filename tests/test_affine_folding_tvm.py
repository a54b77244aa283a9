"""Chains of multiplications, divisions, additions and subtractions by constants as one addition and one
multiplication: fewer vector instructions in every int8 conv's epilogue."""

from __future__ import annotations

import numpy as np

from tests.helpers.relax_graphs import SHAPE, build_module, kernel_shapes, op_names, scheduled_kernel

CHANNELS = np.arange(1, 9, dtype="float32").reshape(1, 8, 1, 1)  # a per-channel constant: a rescale, a bias


def constant(value):
    from tvm import relax

    return relax.const(np.asarray(value, "float32"), "float32")


def rescaled_and_shifted(bb, x):
    """An int8 conv's epilogue as PP-OCR's detector has it: the sums' rescale and bias per channel, then the
    model's learnable affine block, x * 1.9 + 0.8, written with the constant first as the export writes it."""
    from tvm import relax

    y = bb.emit(relax.op.multiply(x, constant(CHANNELS / 16)))
    y = bb.emit(relax.op.add(y, constant(CHANNELS)))
    y = bb.emit(relax.op.multiply(constant(1.9), y))
    return bb.emit(relax.op.add(y, constant(0.8)))


def test_a_chain_of_four_constant_steps_is_one_addition_and_one_multiplication():
    import tvm

    from modelbuild.compiler.passes import affine_folding

    module = build_module(rescaled_and_shifted)
    assert op_names(affine_folding.fold(module)) == ["relax.add", "relax.multiply"]
    assert list(kernel_shapes(module, layout="auto")) == ["fused_add_multiply"]  # as the compile stage lowers it
    _, run = scheduled_kernel(module, "add", schedule=True)
    x = np.random.default_rng(3).uniform(-1000, 1000, SHAPE).astype("float32")
    want = (x.astype(np.float64) * (CHANNELS / 16) + CHANNELS) * 1.9 + 0.8
    np.testing.assert_allclose(run(tvm.runtime.tensor(x)).numpy(), want, rtol=1e-6, atol=1e-4)


def test_a_value_read_twice_ends_a_chain_and_the_steps_after_it_fold_apart():
    """Hardswish reads its input twice: the chain before it folds, the chain after it (/ 6, then the next
    affine block) folds again, and the hardswish between them is left as it was."""
    from tvm import relax

    from modelbuild.compiler.passes import affine_folding

    def hardswish_between(bb, x):
        y = rescaled_and_shifted(bb, x)
        gate = bb.emit(relax.op.clip(bb.emit(relax.op.add(y, constant(3.0))), 0, 6))
        h = bb.emit(relax.op.divide(bb.emit(relax.op.multiply(y, gate)), constant(6.0)))
        return bb.emit(relax.op.subtract(bb.emit(relax.op.multiply(h, constant(0.63))), constant(0.55)))

    assert op_names(affine_folding.fold(build_module(hardswish_between))) == [
        "relax.add",
        "relax.multiply",
        "relax.add",
        "relax.clip",
        "relax.multiply",
        "relax.add",
        "relax.multiply",
    ]


def test_a_chain_that_ends_in_a_quantize_gives_it_its_multiplication():
    """(x + b) * m, m > 0, then quantize(., s) is quantize(x + b, s / m): the epilogue keeps one addition."""
    from tvm import relax

    from modelbuild.compiler.passes import affine_folding

    def quantized(bb, x):
        y = bb.emit(relax.op.multiply(rescaled_and_shifted(bb, x), constant(0.5)))
        return bb.emit(relax.op.quantize(y, constant(0.25), relax.const(0, "int8"), axis=1, out_dtype="int8"))

    folded = affine_folding.fold(build_module(quantized))
    assert op_names(folded) == ["relax.add", "relax.quantize"]
    quantize = next(
        b.value
        for b in folded["main"].body.blocks[0].bindings
        if getattr(b.value, "op", None) is not None and b.value.op.name == "relax.quantize"
    )
    scale = quantize.args[1].value.numpy()
    np.testing.assert_allclose(scale, 0.25 / (CHANNELS.ravel() / 16 * 1.9 * 0.5), rtol=1e-6)


def test_a_division_by_zero_ends_the_chain():
    """x / 0 is inf, NaN or -inf by x's sign: no product by a reciprocal. The steps before it still fold."""
    from tvm import relax

    from modelbuild.compiler.passes import affine_folding

    def by_zero(bb, x):
        return bb.emit(relax.op.divide(rescaled_and_shifted(bb, x), constant(np.zeros((1, 8, 1, 1)))))

    assert op_names(affine_folding.fold(build_module(by_zero))) == ["relax.add", "relax.multiply", "relax.divide"]


def test_a_rescale_and_a_bias_that_a_quantize_reads_keep_only_the_bias():
    """x * m + b then quantize (an int8 stem conv's epilogue): (x + b / m) * m, whose m the quantize takes."""
    from tvm import relax

    from modelbuild.compiler.passes import affine_folding

    def stem(bb, x):
        y = bb.emit(relax.op.add(bb.emit(relax.op.multiply(x, constant(CHANNELS / 16))), constant(CHANNELS)))
        return bb.emit(relax.op.quantize(y, constant(0.25), relax.const(0, "int8"), axis=1, out_dtype="int8"))

    assert op_names(affine_folding.fold(build_module(stem))) == ["relax.add", "relax.quantize"]


def test_a_constant_minus_the_value_folds_with_its_sign():
    """k - x reverses the sign of what the chain multiplies x by: (3 - x) * 2 + 1 is (x - 3.5) * -2."""
    import tvm
    from tvm import relax

    from modelbuild.compiler.passes import affine_folding

    def reversed_chain(bb, x):
        y = bb.emit(relax.op.subtract(constant(3.0), x))
        return bb.emit(relax.op.add(bb.emit(relax.op.multiply(y, constant(2.0))), constant(1.0)))

    module = build_module(reversed_chain)
    assert op_names(affine_folding.fold(module)) == ["relax.add", "relax.multiply"]
    _, run = scheduled_kernel(module, "add", schedule=True)
    x = np.random.default_rng(4).uniform(-100, 100, SHAPE).astype("float32")
    np.testing.assert_allclose(run(tvm.runtime.tensor(x)).numpy(), (3.0 - x.astype(np.float64)) * 2 + 1, rtol=1e-6)


def test_constants_that_compose_beyond_float32_are_left_as_steps():
    """x * 1e30 * 1e30 + 1 would need a multiplier of 1e60, which float32 cannot hold."""
    from tvm import relax

    from modelbuild.compiler.passes import affine_folding

    def overflowing(bb, x):
        y = bb.emit(relax.op.multiply(bb.emit(relax.op.multiply(x, constant(1e30))), constant(1e30)))
        return bb.emit(relax.op.add(y, constant(1.0)))

    assert op_names(affine_folding.fold(build_module(overflowing))) == ["relax.multiply", "relax.multiply", "relax.add"]


def test_a_chain_of_scalings_and_shifts_folds_into_one_step():
    """Before -> Expected: (2x + 3) * 0.5 is x + 1.5."""
    import tvm
    from tvm.script import ir as I
    from tvm.script import relax as R

    from modelbuild.compiler.passes import affine_folding

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 8), "float32")) -> R.Tensor((1, 8), "float32"):
            with R.dataflow():
                a = R.multiply(x, R.const(2.0, "float32"))
                b = R.add(a, R.const(3.0, "float32"))
                c = R.multiply(b, R.const(0.5, "float32"))
                R.output(c)
            return c

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 8), "float32")) -> R.Tensor((1, 8), "float32"):
            with R.dataflow():
                c = R.add(x, R.const(1.5, "float32"))
                R.output(c)
            return c

    tvm.ir.assert_structural_equal(affine_folding.transform()(Before), Expected)
