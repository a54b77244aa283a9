"""A grouped conv with groups narrower than a vector, built through the whole lowering: merged, and the same
outputs as numpy's grouped conv."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.relax_graphs import grouped_conv


def grouped_module(shape, w, groups, dtype="float32"):
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=shape, dtype=dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = relax.op.nn.conv2d(
                x, relax.const(w), padding=(1, 1, 1, 1), groups=groups, out_dtype="int32" if dtype == "int8" else ""
            )
            out = bb.emit_output(conv if dtype == "int8" else relax.op.nn.relu(conv))
        bb.emit_func_output(out)
    return bb.get()


def conv_groups(module) -> list[tuple[int, list[int]]]:
    from tvm import relax

    from modelbuild.compiler.passes import group_blocks

    calls = []
    relax.analysis.post_order_visit(
        group_blocks.rewrite(module)["main"].body, lambda e: calls.append(e) if isinstance(e, relax.Call) else None
    )
    return [
        (int(c.attrs.groups), [int(d) for d in c.args[1].ty.shape.values])
        for c in calls
        if getattr(c.op, "name", None) == "relax.nn.conv2d"
    ]


@pytest.mark.parametrize("groups, per_group, merged_groups", [(32, 4, 8), (16, 8, 8)], ids=["4-wide", "8-wide"])
def test_a_narrow_grouped_conv_is_merged_and_computes_the_same_outputs(groups, per_group, merged_groups):
    import tvm

    from tests.helpers.relax_graphs import scheduled_kernel

    rng = np.random.default_rng(groups)
    channels = groups * per_group
    shape = (1, channels, 12, 13)
    x = rng.standard_normal(shape).astype("float32")
    w = rng.standard_normal((channels, per_group, 3, 3)).astype("float32")
    module = grouped_module(shape, w, groups)
    assert conv_groups(module) == [(merged_groups, [channels, channels // merged_groups, 3, 3])]
    script, main = scheduled_kernel(module, "conv2d", schedule=True, layout="auto")
    # the kernel's weights, channels-last (HWIO): each output channel reads its merged group's input channels
    assert f"T.Buffer((T.int64(3), T.int64(3), T.int64({channels // merged_groups}), T.int64({channels}))" in script
    assert "T.vectorized" in script
    got = main(tvm.runtime.tensor(x)).numpy()
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.maximum(grouped_conv(padded, w.astype(np.float64), groups), 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_grouped_conv_kept_in_the_models_layout_keeps_its_groups():
    """NCHW vectors run over output columns: no gather to save, and merged groups would only add zeros."""
    from tests.helpers.relax_graphs import scheduled_kernel

    rng = np.random.default_rng(3)
    w = rng.standard_normal((128, 4, 3, 3)).astype("float32")
    script, _ = scheduled_kernel(grouped_module((1, 128, 12, 13), w, 32), "conv2d", schedule=True, layout="NCHW")
    assert "T.Buffer((T.int64(128), T.int64(4), T.int64(3), T.int64(3))" in script


def test_depthwise_int8_and_vector_wide_groups_are_left_as_they_are():
    rng = np.random.default_rng(0)
    depthwise = grouped_module((1, 32, 8, 8), rng.standard_normal((32, 1, 3, 3)).astype("float32"), 32)
    assert conv_groups(depthwise) == [(32, [32, 1, 3, 3])]
    wide = grouped_module((1, 64, 8, 8), rng.standard_normal((64, 16, 3, 3)).astype("float32"), 4)
    assert conv_groups(wide) == [(4, [64, 16, 3, 3])]
    int8 = grouped_module((1, 64, 8, 8), rng.integers(-128, 128, (64, 8, 3, 3)).astype("int8"), 8, dtype="int8")
    assert conv_groups(int8) == [(8, [64, 8, 3, 3])]


def test_four_groups_of_8_channels_become_two_block_diagonal_groups_of_16():
    """Before -> Expected: groups merged two at a time, each merged group's weights zero between the two."""
    import tvm
    from tvm import relax

    from modelbuild.compiler.passes import group_blocks

    weight = np.arange(32 * 4 * 3 * 3, dtype="float32").reshape(32, 4, 3, 3) / 100

    def module(weights, groups: int):
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType(shape=(1, 16, 6, 6), dtype="float32"))
        with bb.function("main", [x]):
            with bb.dataflow():
                conv = relax.op.nn.conv2d(x, relax.const(weights), padding=[1, 1, 1, 1], groups=groups)
                y = bb.emit_output(conv)
            bb.emit_func_output(y)
        return bb.get()

    expected = module(group_blocks.block_diagonal(weight, 4, 2), 2)
    tvm.ir.assert_structural_equal(group_blocks.transform()(module(weight, 4)), expected)
