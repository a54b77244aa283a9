"""Stride-2 NCHW convs over their input's column phases, built through the whole lowering: the conv becomes one
of stride 1 along its rows over twice the channels, and the outputs are the conv's exactly."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.relax_graphs import conv_module, padded_grouped_conv


def rewritten_convs(module) -> list[tuple[list[int], list[int]]]:
    """(strides, weight shape) of main's conv2d calls after the rewrite."""
    from tvm import relax

    from modelbuild.compiler.passes import column_phases

    calls = []
    relax.analysis.post_order_visit(
        column_phases.rewrite(module)["main"].body, lambda e: calls.append(e) if isinstance(e, relax.Call) else None
    )
    return [
        ([int(s) for s in c.attrs.strides], [int(d) for d in c.args[1].ty.shape.values])
        for c in calls
        if getattr(c.op, "name", None) == "relax.nn.conv2d"
    ]


@pytest.mark.parametrize(
    "shape, groups, kernel, padding, dilation, convs",
    [
        ((1, 20, 12, 28), 4, 3, (1, 1, 1, 1), (1, 1), [([2, 1], [20, 10, 3, 2])]),  # 4 groups of 5
        ((1, 12, 9, 25), 2, 5, (2, 2, 2, 2), (1, 1), [([2, 1], [12, 12, 5, 3])]),  # 5x5 over an odd row
        ((1, 8, 9, 30), 1, 3, (1, 0, 1, 2), (2, 1), [([2, 1], [8, 16, 3, 2])]),  # dense, dilated rows only
        ((1, 8, 9, 9), 1, 2, (0, 0, 0, 0), (1, 1), [([2, 2], [8, 8, 2, 2])]),  # the last column unread: kept
    ],
    ids=["thin-groups", "5x5-odd-row", "dense-dilated-rows", "kept"],
)
def test_a_stride_2_conv_over_its_column_phases_gives_the_convs_outputs_exactly(
    shape, groups, kernel, padding, dilation, convs
):
    import tvm
    from tvm import relax

    from tests.helpers.int8_convs import PLAIN_CPU, build

    rng = np.random.default_rng(0)
    # small integers: every sum is exact in float32, so any tap or column read wrong shows
    x = rng.integers(-4, 5, shape).astype("float32")
    w = rng.integers(-3, 4, (shape[1], shape[1] // groups, kernel, kernel)).astype("float32")
    attrs = {"strides": (2, 2), "padding": padding, "dilation": dilation, "groups": groups}
    module = conv_module(shape, w, **attrs)
    assert rewritten_convs(module) == convs
    executable, _ = build(module, PLAIN_CPU)
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_array_equal(got, np.maximum(padded_grouped_conv(x, w, **attrs), 0))


def test_lowering_computes_a_stride_2_nchw_conv_over_its_column_phases():
    """The pass runs in the pipeline: the conv's kernel reads the phases, twice the channels and half the
    columns (14, and the 3x3 kernel's extra tap), and its weights of two taps a row."""
    from tests.helpers.relax_graphs import kernel_shapes

    w = np.ones((20, 5, 3, 3), "float32")
    module = conv_module((1, 20, 12, 28), w, strides=(2, 2), padding=(1, 1, 1, 1), dilation=(1, 1), groups=4)
    shapes = kernel_shapes(module, "NCHW")
    conv = next(args for name, args in shapes.items() if "conv2d" in name)
    assert [1, 40, 12, 15] in conv and [20, 10, 3, 2] in conv
