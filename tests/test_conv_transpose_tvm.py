"""Transposed convs with stride = kernel, as a 1x1 conv and a depth-to-space: the same outputs, no zeros."""

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
    from modelbuild.compiler import conv_transpose

    module = transposed_conv_module(shape, wshape, strides)
    rewritten = conv_transpose.rewrite(module)
    assert "conv2d_transpose" not in rewritten.script() and "R.nn.conv2d(" in rewritten.script()
    assert "conv2d_transpose" in module.script()  # the caller's module is left as it was
    x = np.random.default_rng(2).standard_normal(shape).astype("float32")
    np.testing.assert_allclose(run(rewritten, x), run(module, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "attrs",
    [{"strides": 1}, {"strides": 2, "padding": 1}, {"strides": 2, "output_padding": 1}],
    ids=["overlapping", "padded", "output-padded"],
)
def test_overlapping_or_padded_transposed_convs_are_left_alone(attrs):
    from modelbuild.compiler import conv_transpose

    module = transposed_conv_module((1, 4, 5, 5), (4, 2, 2, 2), **attrs)
    assert "conv2d_transpose" in conv_transpose.rewrite(module).script()


def test_an_int8_transposed_conv_is_a_vnni_conv_and_one_gather_bit_exact():
    """An int8 model keeps NCHW, where the float form's reshape-transpose-reshape fused into a kernel computing
    a dozen divisions per element (8 ms for the DB detector's head), and the weights it reordered in the graph
    were no constant, so the 1x1 conv was TVM's generic one, not VNNI."""
    import tvm
    from tvm import tirx

    from tests.test_vnni_conv_tvm import VNNI_CPU, build, host_has_vnni

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
