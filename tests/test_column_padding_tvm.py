"""NCHW convs over rows widened to whole vectors, built through the whole lowering: the conv computes the wider
rows, the cut gives back the conv's own shape, and the outputs are the conv's exactly."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.relax_graphs import conv_module, padded_grouped_conv


def conv_widths(module) -> list[int]:
    """The output widths of main's conv2d calls, and of what main returns, after the rewrite."""
    from tvm import relax

    from modelbuild.compiler.passes import column_padding

    calls = []
    rewritten = column_padding.rewrite(module)
    relax.analysis.post_order_visit(
        rewritten["main"].body, lambda e: calls.append(e) if isinstance(e, relax.Call) else None
    )
    convs = [int(c.ty.shape.values[3]) for c in calls if getattr(c.op, "name", None) == "relax.nn.conv2d"]
    return [*convs, int(rewritten["main"].ret_ty.shape.values[3])]


@pytest.mark.parametrize(
    "shape, groups, kernel, strides, padding, dilation, widths",
    [
        ((1, 24, 9, 30), 4, 3, (1, 1), (1, 1, 1, 1), (1, 1), [32, 30]),  # thin groups: 6 channels each
        ((1, 20, 7, 27), 4, 3, (2, 2), (1, 1, 1, 1), (1, 1), [16, 14]),  # stride 2: two columns per added one
        ((1, 8, 9, 21), 1, 3, (1, 1), (2, 0, 1, 2), (2, 2), [24, 19]),  # dense, uneven padding, dilation 2
        ((1, 12, 5, 13), 12, 5, (1, 1), (2, 2, 2, 2), (1, 1), [16, 13]),  # depthwise 5x5
        ((1, 8, 5, 28), 8, 3, (1, 1), (1, 1, 1, 1), (1, 1), [28, 28]),  # depthwise on 4-lane vectors: unchanged
        ((1, 24, 6, 16), 4, 3, (1, 1), (1, 1, 1, 1), (1, 1), [16, 16]),  # whole vectors already: unchanged
    ],
    ids=["thin-groups", "stride-2", "dense-dilated", "depthwise", "depthwise-4-lanes", "unchanged"],
)
def test_a_conv_over_widened_rows_gives_the_convs_outputs_exactly(
    shape, groups, kernel, strides, padding, dilation, widths
):
    import tvm
    from tvm import relax

    from tests.helpers.int8_convs import PLAIN_CPU, build

    rng = np.random.default_rng(0)
    # small integers: every sum is exact in float32, so any column read wrong shows
    x = rng.integers(-4, 5, shape).astype("float32")
    w = rng.integers(-3, 4, (shape[1], shape[1] // groups, kernel, kernel)).astype("float32")
    attrs = {"strides": strides, "padding": padding, "dilation": dilation, "groups": groups}
    module = conv_module(shape, w, **attrs)
    assert conv_widths(module) == widths
    executable, _ = build(module, PLAIN_CPU)
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_array_equal(got, np.maximum(padded_grouped_conv(x, w, **attrs), 0))


def test_lowering_computes_an_nchw_conv_over_its_widened_rows():
    """The pass runs in the pipeline: the conv's kernel computes rows of 32 columns into a buffer of its own and
    writes the model's 30."""
    from tests.helpers.relax_graphs import scheduled_kernel

    w = np.ones((24, 6, 3, 3), "float32")
    module = conv_module((1, 24, 9, 30), w, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=4)
    script, _ = scheduled_kernel(module, "conv2d", schedule=True, layout="NCHW")
    assert "sblock_alloc_buffer((T.int64(1), T.int64(24), T.int64(9), T.int64(32)))" in script
