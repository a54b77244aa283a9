"""Heads whose output channels no vector width divides: computed in whole vectors, the padding sliced off."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.relax_graphs import build_module, kernel_shapes, scheduled_kernel


def matmul_head(columns: int):
    from tvm import relax

    rng = np.random.default_rng(8)
    weight = rng.standard_normal((32, columns)).astype("float32")
    bias = rng.standard_normal(columns).astype("float32")

    def body(bb, x):
        return bb.emit(relax.op.add(bb.emit(relax.op.matmul(x, relax.const(weight))), relax.const(bias)))

    return build_module(body, (40, 32)), lambda x: x @ weight + bias


def conv_head(channels: int, inputs: int = 8):
    from tvm import relax

    weight = np.random.default_rng(9).standard_normal((channels, inputs, 3, 3)).astype("float32")

    def body(bb, x):
        return bb.emit(relax.op.sigmoid(bb.emit(relax.op.nn.conv2d(x, relax.const(weight), padding=1))))

    return build_module(body, (1, inputs, 6, 10)), weight


def test_a_matmul_head_of_37_columns_computes_48_and_returns_37_equal_to_numpy():
    import tvm

    module, reference = matmul_head(37)
    assert any([32, 48] in shapes and [40, 37] in shapes for shapes in kernel_shapes(module, "auto").values())
    script, run = scheduled_kernel(module, "matmul", schedule=True, layout="auto")
    assert "T.vectorized(T.int64(16))" in script
    x = np.random.default_rng(10).standard_normal((40, 32)).astype("float32")
    out = run(tvm.runtime.tensor(x)).numpy()
    assert out.shape == (40, 37)
    np.testing.assert_allclose(out, reference(x), rtol=1e-5, atol=1e-4)


def test_a_channels_last_conv_of_37_channels_is_padded_and_matches_the_stock_nchw_conv():
    import tvm

    module, _ = conv_head(37)
    assert any([3, 3, 8, 48] in shapes for shapes in kernel_shapes(module, "auto").values())
    _, run = scheduled_kernel(module, "conv2d", schedule=True, layout="auto")
    _, stock = scheduled_kernel(conv_head(37)[0], "conv2d", schedule=False, layout="NCHW")
    x = tvm.runtime.tensor(np.random.default_rng(11).standard_normal((1, 8, 6, 10)).astype("float32"))
    out = run(x).numpy()
    assert out.shape == (1, 37, 6, 10)
    np.testing.assert_allclose(out, stock(x).numpy(), rtol=1e-5, atol=1e-5)


def test_a_conv_from_33_channels_to_one_reads_40_summed_in_lanes_and_matches_the_stock_nchw_conv():
    import tvm

    module, _ = conv_head(1, inputs=33)
    assert any([3, 3, 40, 1] in shapes for shapes in kernel_shapes(module, "NHWC").values())
    script, run = scheduled_kernel(module, "conv2d", schedule=True, layout="NHWC")
    assert '_rf_update"' in script and "T.vectorized(T.int64(8))" in script
    _, stock = scheduled_kernel(conv_head(1, inputs=33)[0], "conv2d", schedule=False, layout="NCHW")
    x = tvm.runtime.tensor(np.random.default_rng(12).standard_normal((1, 33, 6, 10)).astype("float32"))
    out = run(x).numpy()
    assert out.shape == (1, 1, 6, 10)
    np.testing.assert_allclose(out, stock(x).numpy(), rtol=1e-5, atol=1e-5)


def test_heads_the_vector_width_divides_or_of_two_columns_are_left_as_they_are():
    for columns in (48, 8):
        module, _ = matmul_head(columns)
        assert any([32, columns] in shapes for shapes in kernel_shapes(module, "auto").values())
    module, _ = matmul_head(2)  # not padded to a vector: its 2 columns' weights read column by column
    assert any([2, 32] in shapes for shapes in kernel_shapes(module, "auto").values())


def test_a_conv_head_of_9_channels_computes_16_and_matches_the_stock_nchw_conv():
    """A super-resolution net's last conv: 9 channels, rearranged by DepthToSpace after it."""
    import tvm

    module, _ = conv_head(9, inputs=32)
    assert any([3, 3, 32, 16] in shapes for shapes in kernel_shapes(module, "auto").values())
    _, run = scheduled_kernel(module, "conv2d", schedule=True, layout="auto")
    _, stock = scheduled_kernel(conv_head(9, inputs=32)[0], "conv2d", schedule=False, layout="NCHW")
    x = tvm.runtime.tensor(np.random.default_rng(14).standard_normal((1, 32, 6, 10)).astype("float32"))
    out = run(x).numpy()
    assert out.shape == (1, 9, 6, 10)
    np.testing.assert_allclose(out, stock(x).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("channels, inputs, weights", [(2, 32, [2, 3, 3, 32]), (3, 33, [3, 3, 3, 40])])
def test_a_conv_head_of_two_or_three_channels_reads_its_weights_output_channels_first(channels, inputs, weights):
    """Summed in lanes of input channels, each output channel's weights contiguous (OHWI), its inputs padded
    to whole half vectors first where they need it; equal to the stock NCHW conv."""
    import tvm

    module, _ = conv_head(channels, inputs=inputs)
    assert any(weights in shapes for shapes in kernel_shapes(module, "NHWC").values())
    script, run = scheduled_kernel(module, "conv2d", schedule=True, layout="NHWC")
    assert '_rf_update"' in script
    _, stock = scheduled_kernel(conv_head(channels, inputs=inputs)[0], "conv2d", schedule=False, layout="NCHW")
    x = tvm.runtime.tensor(np.random.default_rng(16).standard_normal((1, inputs, 6, 10)).astype("float32"))
    out = run(x).numpy()
    assert out.shape == (1, channels, 6, 10)
    np.testing.assert_allclose(out, stock(x).numpy(), rtol=1e-5, atol=1e-5)


def attention_scores(tokens: int, rows: int):
    """The first `rows` tokens' queries by every token's key, both computed from x [1, 3, tokens, 64] (a vision
    transformer's 197 tokens, scaled down): x[:, :, :rows] / 4 @ (x / 2)^T."""
    from tvm import relax

    def body(bb, x):
        queries = bb.emit(relax.op.strided_slice(bb.emit(relax.op.multiply(x, relax.const(0.25))), [2], [0], [rows]))
        keys = bb.emit(relax.op.permute_dims(bb.emit(relax.op.multiply(x, relax.const(0.5))), [0, 1, 3, 2]))
        return bb.emit(relax.op.matmul(queries, keys))

    return build_module(body, (1, 3, tokens, 64))


def test_a_matmul_by_computed_keys_of_37_columns_is_padded_at_run_time_and_equals_numpy():
    import tvm

    module = attention_scores(tokens=37, rows=37)
    assert any([1, 3, 64, 48] in shapes for shapes in kernel_shapes(module, "auto").values())
    script, run = scheduled_kernel(module, "matmul", schedule=True, layout="auto")
    assert "T.vectorized(T.int64(16))" in script and '_rf_update"' not in script
    x = np.random.default_rng(15).standard_normal((1, 3, 37, 64)).astype("float32")
    out = run(tvm.runtime.tensor(x)).numpy()
    assert out.shape == (1, 3, 37, 37)
    np.testing.assert_allclose(out, (x / 4) @ np.swapaxes(x / 2, -1, -2), rtol=1e-5, atol=1e-4)


def test_a_matmul_by_a_computed_operand_with_fewer_rows_than_a_vector_is_padded_too_and_equals_numpy():
    """Even a few rows read the unpadded operand's columns far apart, every row again: the copy costs less."""
    import tvm

    module = attention_scores(tokens=37, rows=4)
    assert any([1, 3, 64, 48] in shapes for shapes in kernel_shapes(module, "auto").values())
    _, run = scheduled_kernel(module, "matmul", schedule=True, layout="auto")
    x = np.random.default_rng(16).standard_normal((1, 3, 37, 64)).astype("float32")
    out = run(tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(out, (x[:, :, :4] / 4) @ np.swapaxes(x / 2, -1, -2), rtol=1e-5, atol=1e-4)


def conv1d_head(channels: int, inputs: int, taps: int, stride: int, steps: int):
    from tvm import relax

    weight = np.random.default_rng(13).standard_normal((channels, inputs, taps)).astype("float32")

    def body(bb, x):
        return bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv1d(x, relax.const(weight), strides=stride))))

    return build_module(body, (1, inputs, (steps - 1) * stride + taps))


@pytest.mark.parametrize(
    "channels, inputs, taps, stride, steps, computed",
    [
        (161, 16, 1, 1, 90, 176),  # DNSMOS's spectrogram bins: 18x slower NWC in vectors they do not fill
        (258, 1, 256, 128, 4, 272),  # silero's STFT: a 256-tap conv of the waveform
    ],
)
def test_a_conv1d_goes_channels_last_in_whole_vectors_and_matches_the_stock_ncw_conv(
    channels, inputs, taps, stride, steps, computed
):
    """Padded to whole vectors, a conv1d's channels are worth computing NWC (161 over 900 steps 0.7x NCW's
    time, silero's STFT 0.5x)."""
    import tvm

    module = conv1d_head(channels, inputs, taps, stride, steps)
    assert any([taps, inputs, computed] in shapes for shapes in kernel_shapes(module, "auto").values())  # WIO
    _, run = scheduled_kernel(module, "conv1d", schedule=True, layout="auto")
    _, stock = scheduled_kernel(
        conv1d_head(channels, inputs, taps, stride, steps), "conv1d", schedule=False, layout="NCHW"
    )
    x = tvm.runtime.tensor(
        np.random.default_rng(14).standard_normal((1, inputs, (steps - 1) * stride + taps)).astype("float32")
    )
    out = run(x).numpy()
    assert out.shape == (1, channels, steps)
    np.testing.assert_allclose(out, stock(x).numpy(), rtol=1e-4, atol=1e-3)


def test_a_conv1d_whose_taps_alone_fill_a_weight_pass_is_scheduled_for_avx512():
    """256 taps of 129 channels to 256, NWC: a 6 x 4 tile of AVX-512 vectors reads 64 KB of weights per input
    channel, more than a pass holds (WEIGHT_PASS_BYTES), and the default schedule crashed looking for a block
    of no channels (StopIteration, the whole compile with it). Lowered only: this CPU may lack AVX-512."""
    import tvm

    from modelbuild.compiler import lowering

    module = conv1d_head(256, 129, 256, 128, 8)
    target = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, target, fuse=True, layout="auto", schedule=True)
    conv = next(f for gv, f in phases.fused.functions.items() if "conv1d" in gv.name_hint)
    assert "T.vectorized(" in conv.script()  # scheduled, not left as TVM's loops


def test_a_matmul_by_an_operand_computed_far_back_is_lowered():
    """A recogniser's matmul by an activation 400 operators deep: looking for constants behind it had walked
    the whole chain and exceeded Python's recursion limit."""
    from tvm import relax

    def body(bb, x):
        y = x
        for _ in range(400):
            y = bb.emit(relax.op.add(y, relax.const(1.0)))
        return bb.emit(
            relax.op.matmul(
                bb.emit(relax.op.strided_slice(x, [2], [0], [4])), bb.emit(relax.op.permute_dims(y, [0, 1, 3, 2]))
            )
        )

    shapes = kernel_shapes(build_module(body, (1, 3, 37, 64)), "auto")
    assert any([1, 3, 4, 37] in kernel for kernel in shapes.values())


def grouped_conv(groups: int, per_group_in: int, per_group_out: int):
    from tvm import relax

    weight = np.random.default_rng(17).standard_normal((groups * per_group_out, per_group_in, 3, 3)).astype("float32")

    def body(bb, x):
        conv = bb.emit(relax.op.nn.conv2d(x, relax.const(weight), padding=1, groups=groups))
        return bb.emit(relax.op.nn.relu(conv))

    return build_module(body, (1, groups * per_group_in, 7, 9))


def test_a_grouped_conv_of_24_channels_a_group_computes_32_a_group_and_matches_the_stock_nchw_conv():
    """4 groups of 16 -> 24: a 16-lane vector would span two groups, a gather of their inputs."""
    import tvm

    module = grouped_conv(4, 16, 24)
    assert any([3, 3, 16, 128] in shapes for shapes in kernel_shapes(module, "auto").values())
    _, run = scheduled_kernel(module, "conv2d", schedule=True, layout="auto")
    _, stock = scheduled_kernel(grouped_conv(4, 16, 24), "conv2d", schedule=False, layout="NCHW")
    x = tvm.runtime.tensor(np.random.default_rng(18).standard_normal((1, 64, 7, 9)).astype("float32"))
    out = run(x).numpy()
    assert out.shape == (1, 96, 7, 9)
    np.testing.assert_allclose(out, stock(x).numpy(), rtol=1e-5, atol=1e-4)


def test_a_grouped_conv_whose_groups_are_whole_vectors_keeps_its_weights():
    module = grouped_conv(2, 8, 32)
    assert any([3, 3, 8, 64] in shapes for shapes in kernel_shapes(module, "auto").values())


def test_a_matmul_by_13_constant_columns_computes_16_and_slices_off_the_padding():
    """Before -> Expected: the weights padded with zero columns (a pad of a constant, which constant folding
    then folds), the matmul on 16 columns, a slice back to 13."""
    import tvm
    from tvm import relax

    from modelbuild.compiler.passes import channel_padding

    weights = relax.const(np.arange(8 * 13, dtype="float32").reshape(8, 13))

    def module(body):
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType(shape=(4, 8), dtype="float32"))
        with bb.function("main", [x]):
            with bb.dataflow():
                y = bb.emit_output(body(bb, x))
            bb.emit_func_output(y)
        return bb.get()

    def padded(bb, x):
        wide = bb.emit(relax.op.matmul(x, bb.emit(relax.op.nn.pad(weights, [0, 0, 0, 3]))))
        return relax.op.strided_slice(wide, axes=[1], begin=[0], end=[13])

    before = module(lambda bb, x: relax.op.matmul(x, weights))
    tvm.ir.assert_structural_equal(channel_padding.transform()(before), module(padded))
