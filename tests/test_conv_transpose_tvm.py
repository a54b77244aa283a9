"""Transposed convs as stride-1 convs and a depth-to-space: a 1x1 conv where the stride is the kernel, a conv of
every output phase otherwise; the same outputs, no inserted zeros."""

from __future__ import annotations

import numpy as np
import pytest


def transposed_conv_module(shape, wshape, strides, *, dtype="float32", weight=None, **attrs):
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=shape, dtype=dtype))
    if weight is None:
        weight = np.random.default_rng(1).standard_normal(wshape).astype("float32")
    weight = relax.const(weight)
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv2d_transpose(x, weight, strides=strides, **attrs))
        bb.emit_func_output(y)
    return bb.get()


def run(module, x):
    import tvm
    from tvm import relax

    return relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize(
    "shape, wshape, strides",
    [((1, 8, 5, 6), (8, 3, 2, 2), 2), ((2, 4, 3, 7), (4, 5, 3, 2), (3, 2))],
    ids=["2x2s2", "3x2s32-batch2"],
)
def test_a_non_overlapping_transposed_conv_becomes_a_1x1_conv_with_the_same_outputs(shape, wshape, strides):
    from modelbuild.compiler.passes import conv_transpose

    module = transposed_conv_module(shape, wshape, strides)
    rewritten = conv_transpose.rewrite(module)
    assert "conv2d_transpose" not in rewritten.script() and "R.nn.conv2d(" in rewritten.script()
    assert "conv2d_transpose" in module.script()  # the caller's module is left as it was
    x = np.random.default_rng(2).standard_normal(shape).astype("float32")
    np.testing.assert_allclose(run(rewritten, x), run(module, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "shape, wshape, attrs",
    [
        ((1, 4, 5, 5), (4, 2, 2, 2), {"strides": 1}),
        ((1, 6, 7, 5), (6, 3, 3, 3), {"strides": 2, "padding": 1}),
        ((1, 6, 7, 5), (6, 3, 3, 3), {"strides": 2, "padding": 1, "output_padding": 1}),
        ((2, 5, 6, 6), (5, 4, 4, 4), {"strides": 2, "padding": 1}),
        ((1, 3, 4, 6), (3, 2, 5, 3), {"strides": (3, 2), "padding": (2, 0, 1, 1)}),
        ((1, 8, 9, 9), (8, 4, 3, 3), {"strides": 1, "padding": 1}),
        ((1, 4, 3, 3), (4, 2, 7, 7), {"strides": 2, "padding": 3, "output_padding": 1}),
    ],
    ids=["2x2s1", "3x3s2p1", "3x3s2p1-op1", "4x4s2p1-batch2", "5x3s32-asymmetric", "3x3s1p1", "7x7s2p3-op1"],
)
def test_an_overlapping_transposed_conv_becomes_a_conv_of_its_phases_with_the_same_outputs(shape, wshape, attrs):
    from modelbuild.compiler.passes import conv_transpose

    module = transposed_conv_module(shape, wshape, **attrs)
    rewritten = conv_transpose.rewrite(module)
    assert "conv2d_transpose" not in rewritten.script() and "R.nn.conv2d(" in rewritten.script()
    x = np.random.default_rng(3).standard_normal(shape).astype("float32")
    expected = run(module, x)
    out = run(rewritten, x)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_a_3x3_stride_2_kernel_splits_into_phases_of_4_2_2_and_1_taps():
    from modelbuild.compiler.passes.conv_transpose import phase_weights

    weight = np.arange(1, 10, dtype="float32").reshape(1, 1, 3, 3)
    phases = phase_weights(weight, (2, 2))
    assert phases.shape == (4, 1, 2, 2)
    assert [int(np.count_nonzero(phase)) for phase in phases] == [4, 2, 2, 1]
    assert sorted(phases.ravel()[phases.ravel() != 0].tolist()) == list(range(1, 10))  # each tap once


@pytest.mark.parametrize(
    "attrs",
    [{"strides": 2, "dilation": 2}, {"strides": 2, "groups": 2}],
    ids=["dilated", "grouped"],
)
def test_dilated_or_grouped_transposed_convs_are_left_alone(attrs):
    from modelbuild.compiler.passes import conv_transpose

    module = transposed_conv_module((1, 4, 5, 5), (4, 2, 3, 3), **attrs)
    assert "conv2d_transpose" in conv_transpose.rewrite(module).script()


def test_an_int8_transposed_conv_is_a_vnni_conv_and_one_gather_bit_exact():
    """An int8 model keeps NCHW, where the float form's reshape-transpose-reshape fused into a kernel computing
    a dozen divisions per element (8 ms for the DB detector's head), and the weights it reordered in the graph
    were no constant, so the 1x1 conv was TVM's generic one, not VNNI."""
    import tvm
    from tvm import tirx

    from tests.helpers.int8_convs import VNNI_CPU, build, host_has_vnni

    rng = np.random.default_rng(3)
    shape, weight = (1, 24, 8, 16), rng.integers(-128, 128, (24, 4, 2, 2)).astype(np.int8)
    module = transposed_conv_module(shape, weight.shape, 2, dtype="int8", weight=weight, out_dtype="int32")
    executable, phases = build(module, VNNI_CPU)
    kernels = {gv.name_hint: f.script() for gv, f in phases.fused.functions.items() if isinstance(f, tirx.PrimFunc)}
    assert any("vpdpbusd" in script for script in kernels.values()), sorted(kernels)
    gather = next(script for name, script in kernels.items() if "depth_to_space" in name)
    assert "transpose" not in gather and "reshape" not in gather
    if not host_has_vnni():
        pytest.skip("built for VNNI; this CPU cannot run it")
    x = rng.integers(-128, 128, shape).astype(np.int8)
    got = tvm.relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    # y[o, 2i + a, 2j + b] = sum_c x[c, i, j] w[c, o, a, b]
    want = np.einsum("nchw,coab->nohawb", x.astype(np.int64), weight.astype(np.int64)).reshape(1, 4, 16, 32)
    np.testing.assert_array_equal(got, want)


def test_a_non_overlapping_transposed_conv_becomes_a_1x1_conv_and_a_depth_to_space():
    """Before -> Expected, as TVM's passes are tested: weights w[c, o, a, b] reordered in the graph into the
    1x1 conv's (o, a, b) output channels, whose taps a reshape, transpose and reshape interleave."""
    import tvm
    from tvm.script import ir as I
    from tvm.script import relax as R

    from modelbuild.compiler.passes import conv_transpose

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 4, 5, 6), "float32"), w: R.Tensor((4, 3, 2, 2), "float32")) -> R.Tensor(
            (1, 3, 10, 12), "float32"
        ):
            with R.dataflow():
                y = R.nn.conv2d_transpose(x, w, strides=[2, 2])
                R.output(y)
            return y

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 4, 5, 6), "float32"), w: R.Tensor((4, 3, 2, 2), "float32")) -> R.Tensor(
            (1, 3, 10, 12), "float32"
        ):
            with R.dataflow():
                taps = R.permute_dims(w, axes=[1, 2, 3, 0])
                taps_1x1 = R.reshape(taps, R.shape([12, 4, 1, 1]))
                per_tap = R.nn.conv2d(x, taps_1x1)
                blocks = R.reshape(per_tap, R.shape([1, 3, 2, 2, 5, 6]))
                interleaved = R.permute_dims(blocks, axes=[0, 1, 4, 2, 5, 3])
                y = R.reshape(interleaved, R.shape([1, 3, 10, 12]))
                R.output(y)
            return y

    tvm.ir.assert_structural_equal(conv_transpose.transform()(Before), Expected)
