"""Convs on maps smaller than their kernel lose the taps that only multiply padding: the same outputs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.int8_convs import build, conv_module, reference


def conv_weights(module) -> list:
    """The shapes of the conv2d weights after the rewrite."""
    from modelbuild.compiler.passes import padding_taps

    rewritten = padding_taps.rewrite(module)
    return [
        [int(d) for d in call.args[1].ty.shape.values]
        for call in _calls(rewritten["main"].body)
        if getattr(call.op, "name", None) == "relax.nn.conv2d"
    ]


def _calls(expr):
    from tvm import relax

    found = []
    relax.analysis.post_order_visit(expr, lambda e: found.append(e) if isinstance(e, relax.Call) else None)
    return found


@pytest.mark.parametrize(
    "shape, kernel, strides, padding, groups, kept",
    [
        ((1, 16, 2, 40), 5, (1, 1), 2, 16, [16, 1, 3, 5]),  # the text classifier's depthwise 5x5 at 2 rows
        ((1, 8, 1, 1), 3, (1, 1), 1, 1, [8, 8, 1, 1]),  # a 3x3 conv on a 1x1 map: its centre tap
        ((1, 8, 6, 12), 3, (1, 1), 1, 1, [8, 8, 3, 3]),  # a map larger than the kernel: unchanged
    ],
    ids=["depthwise-2-rows", "3x3-on-1x1", "unchanged"],
)
def test_an_int8_conv_keeps_its_exact_outputs_with_the_padding_taps_dropped(
    shape, kernel, strides, padding, groups, kept
):
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, shape).astype("int8")
    w = rng.integers(-128, 128, (shape[1], shape[1] // groups, kernel, kernel)).astype("int8")
    pads = (padding,) * 4
    module = conv_module(shape, w, "int8", strides=strides, padding=pads, dilation=(1, 1), groups=groups)
    assert conv_weights(module) == [kept]
    executable, _ = build(module, {"kind": "llvm", "num-cores": 2})
    import tvm
    from tvm import relax

    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_array_equal(got, reference(x, w, strides=strides, padding=pads, dilation=(1, 1)))


def test_a_float_conv_computes_the_same_outputs_with_the_padding_taps_dropped(monkeypatch):
    """Float sums lose only terms that were zero: the outputs of the conv as imported, to rounding."""
    import tvm
    from tvm import relax

    from modelbuild.compiler.passes import padding_taps

    rng = np.random.default_rng(1)
    shape, w = (1, 16, 2, 40), rng.standard_normal((16, 1, 5, 5)).astype("float32")
    x = rng.standard_normal(shape).astype("float32")
    bb = relax.BlockBuilder()
    data = relax.Var("x", relax.TensorType(shape=shape, dtype="float32"))
    with bb.function("main", [data]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.conv2d(data, relax.const(w), padding=(2, 2, 2, 2), groups=16))
        bb.emit_func_output(out)
    module = bb.get()
    assert conv_weights(module) == [[16, 1, 3, 5]]
    outputs = []
    for rewrite in (padding_taps.rewrite, lambda m: m):
        monkeypatch.setattr(padding_taps, "rewrite", rewrite)
        executable, _ = build(module, {"kind": "llvm", "num-cores": 2})
        outputs.append(relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy())
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)


def test_a_3x3_conv_over_one_pixel_keeps_its_centre_tap_alone():
    """Before -> Expected: over a 1 x 1 map every tap but the centre reads padding, so the conv is a 1x1 conv
    of the centre weights with no padding."""
    import tvm
    from tvm import relax

    from modelbuild.compiler.passes import padding_taps

    weights = np.arange(2 * 3 * 3 * 3, dtype="float32").reshape(2, 3, 3, 3)

    def module(weight, padding):
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType(shape=(1, 3, 1, 1), dtype="float32"))
        with bb.function("main", [x]):
            with bb.dataflow():
                y = bb.emit_output(relax.op.nn.conv2d(x, relax.const(weight), padding=padding))
            bb.emit_func_output(y)
        return bb.get()

    before, expected = module(weights, [1, 1, 1, 1]), module(weights[:, :, 1:2, 1:2].copy(), [0, 0, 0, 0])
    tvm.ir.assert_structural_equal(padding_taps.transform()(before), expected)
