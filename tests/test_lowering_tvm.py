"""Fusion and memory figures read off real TVM IR, on hand-built Relax graphs whose answers are known."""

from __future__ import annotations

import pytest

from modelbuild.compiler.analysis import fusion_summary, memory_summary
from tests.helpers.relax_graphs import build_module, scheduled_kernel

S = 1 * 8 * 16 * 16 * 4


def figures(module, *, fuse=True):
    import tvm

    from modelbuild.compiler import lowering

    target = tvm.target.Target({"kind": "llvm"})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, target, fuse=fuse, layout=None)
        tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))  # it builds
    steps, returned = lowering.steps(phases.lowered)
    fusion = fusion_summary(
        lowering.kernel_calls(phases.legalized), lowering.kernel_calls(phases.fused, phases.grouped)
    )
    return fusion, memory_summary(steps, returned, lowering.planned_storage_bytes(phases.planned))


def elementwise_chain(n):
    from tvm import relax

    ops = [relax.op.exp, relax.op.nn.relu, relax.op.sigmoid, relax.op.tanh, relax.op.negative]

    def body(bb, x):
        value = x
        for i in range(n):
            value = bb.emit(ops[i % len(ops)](value))
        return value

    return build_module(body)


@pytest.mark.parametrize("n", [2, 4])
def test_elementwise_chain_fuses_into_one_kernel_and_traffic_drops_n_fold(n):
    fusion, memory = figures(elementwise_chain(n))
    assert (fusion["operators"], fusion["kernels"]) == (n, 1)
    assert fusion["traffic_bytes_before"] == 2 * n * S and fusion["traffic_bytes_after"] == 2 * S
    assert fusion["traffic_ratio"] == n
    assert memory["naive_bytes"] == 0  # nothing lives between kernels any more


def test_conv2d_bias_relu_is_one_kernel():
    import numpy as np
    from tvm import relax

    def body(bb, x):
        w = relax.const(np.ones((8, 8, 3, 3), "float32"))
        b = relax.const(np.ones((1, 8, 1, 1), "float32"))
        conv = bb.emit(relax.op.nn.conv2d(x, w, padding=1))
        return bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(conv, b))))

    fusion, _ = figures(build_module(body))
    assert (fusion["operators"], fusion["kernels"]) == (3, 1)
    assert fusion["groups"][0]["ops"] == ["conv2d", "add", "relu"]


def test_diamond_unfused_shares_storage_down_to_the_hand_computed_bound():
    from tvm import relax

    def body(bb, x):
        a = bb.emit(relax.op.exp(x))
        b = bb.emit(relax.op.nn.relu(a))
        c = bb.emit(relax.op.sigmoid(a))
        d = bb.emit(relax.op.add(b, c))
        return bb.emit(relax.op.tanh(d))

    fusion, memory = figures(build_module(body), fuse=False)
    assert fusion["kernels"] == fusion["operators"] == 5 and fusion["traffic_ratio"] == 1
    assert memory["intermediates"] == 4 and memory["naive_bytes"] == 4 * S
    assert memory["lower_bound_bytes"] == 3 * S  # a, b, c live together; d can take a's storage
    assert memory["planned_bytes"] == 3 * S


BIG = (1, 8, 128, 128)  # kernels of 262144 outputs: enough work for the default schedule to go parallel


def conv_module():
    import numpy as np
    from tvm import relax

    def body(bb, x):
        w = relax.const(np.random.default_rng(0).standard_normal((16, 8, 3, 3)).astype("float32"))
        return bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv2d(x, w, padding=1))))

    return build_module(body, BIG)


def matmul_module():
    import numpy as np
    from tvm import relax

    def body(bb, x):
        flat = bb.emit(relax.op.reshape(x, (1024, 128)))
        w = relax.const(np.random.default_rng(1).standard_normal((128, 256)).astype("float32"))
        return bb.emit(relax.op.matmul(flat, w))

    return build_module(body, BIG)


@pytest.mark.parametrize(
    "make, name, layout",
    [(conv_module, "conv2d", "NCHW"), (conv_module, "conv2d", "auto"), (matmul_module, "matmul", "auto")],
    ids=["conv2d-nchw", "conv2d-channels-last", "matmul"],
)
def test_the_untuned_default_has_parallel_and_vectorised_loops_and_computes_the_same(make, name, layout):
    import numpy as np
    import tvm

    script, scheduled = scheduled_kernel(make(), name, schedule=True, layout=layout)
    assert "T.parallel(" in script and "T.vectorized(" in script
    stock_script, stock = scheduled_kernel(make(), name, schedule=False)
    assert "T.parallel(" not in stock_script and "T.vectorized(" not in stock_script
    x = tvm.runtime.tensor(np.random.default_rng(2).standard_normal(BIG).astype("float32"))
    np.testing.assert_allclose(scheduled(x).numpy(), stock(x).numpy(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("width", [13, 26])
def test_a_conv_whose_width_no_vector_divides_is_tiled_with_a_tail_and_computes_the_same(width):
    """The shape cliff: output rows and columns no vector width divides. Channels-last, the vectors run over
    output channels and the rows are register-tiled by 6 (no tile of 4 to 6 rows divides them) with a tail,
    whose bounds test the vectors do not see."""
    import numpy as np
    import tvm
    from tvm import relax

    shape = (1, 16, width, width)

    def body(bb, x):
        w = relax.const(np.random.default_rng(6).standard_normal((32, 16, 3, 3)).astype("float32"))
        return bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv2d(x, w, padding=1))))

    script, scheduled = scheduled_kernel(build_module(body, shape), "conv2d", schedule=True, layout="NHWC")
    assert "T.vectorized(T.int64(16))" in script and "T.unroll(T.int64(6))" in script
    _, stock = scheduled_kernel(build_module(body, shape), "conv2d", schedule=False, layout="NCHW")
    x = tvm.runtime.tensor(np.random.default_rng(7).standard_normal(shape).astype("float32"))
    np.testing.assert_allclose(scheduled(x).numpy(), stock(x).numpy(), rtol=1e-5, atol=1e-4)


def test_a_conv1d_kept_nchw_is_vectorised_along_its_length():
    """[n, c, l, 1] with a [k, 1] kernel, as a model whose layout TVM cannot convert keeps it: the unit
    width is no vector axis, its length is (magika's conv: 1.2 -> 19 GFLOP/s)."""
    import numpy as np
    import tvm
    from tvm import relax

    shape = (1, 16, 64, 1)

    def body(bb, x):
        w = relax.const(np.random.default_rng(13).standard_normal((32, 16, 5, 1)).astype("float32"))
        return bb.emit(relax.op.nn.conv2d(x, w))

    script, scheduled = scheduled_kernel(build_module(body, shape), "conv2d", schedule=True, layout="NCHW")
    assert "T.vectorized(T.int64(" in script
    _, stock = scheduled_kernel(build_module(body, shape), "conv2d", schedule=False, layout="NCHW")
    x = tvm.runtime.tensor(np.random.default_rng(14).standard_normal(shape).astype("float32"))
    np.testing.assert_allclose(scheduled(x).numpy(), stock(x).numpy(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "shape, weights, strides, lanes",
    [
        ((1, 8, 20, 24), (1, 8, 5, 5), 1, 8),  # a 5x5 conv's 8 input channels, in one vector at each tap
        ((1, 1, 1, 300), (1, 1, 1, 64), 2, 16),  # a conv1d's 64 taps over one channel (its unit axes passed over)
    ],
    ids=["8-channels-to-1", "conv1d-1-channel-64-taps"],
)
def test_a_conv_to_one_output_channel_sums_its_reduction_in_vector_lanes(shape, weights, strides, lanes):
    """One output channel leaves an NHWC conv nothing to vectorise across channels, and it ran one lane at a
    time: basic-pitch's 5x5 conv from 8 channels at 172x264 at 4.3 GFLOP/s (5.6 ms), its 256-tap conv1d on
    the waveform at 3.4 (3.3 ms); the model 27.8 -> 16.5 ms with both summed in lanes."""
    import numpy as np
    import tvm
    from tvm import relax

    def body(bb, x):
        w = relax.const(np.random.default_rng(31).standard_normal(weights).astype("float32"))
        return bb.emit(relax.op.nn.conv2d(x, w, strides=strides, padding=(weights[2] // 2, weights[3] // 2)))

    script, scheduled = scheduled_kernel(build_module(body, shape), "conv2d", schedule=True, layout="NHWC")
    assert '_rf_update"' in script and f"T.vectorized(T.int64({lanes}))" in script
    _, stock = scheduled_kernel(build_module(body, shape), "conv2d", schedule=False, layout="NCHW")
    x = tvm.runtime.tensor(np.random.default_rng(32).standard_normal(shape).astype("float32"))
    np.testing.assert_allclose(scheduled(x).numpy(), stock(x).numpy(), rtol=1e-5, atol=1e-4)


def test_a_depthwise_conv_reads_its_padding_in_place_and_computes_the_same():
    """Nine taps per output: a padded copy of the input cost more than the bounds tests it saves."""
    import numpy as np
    import tvm
    from tvm import relax

    shape = (1, 32, 28, 28)

    def body(bb, x):
        w = relax.const(np.random.default_rng(17).standard_normal((32, 1, 3, 3)).astype("float32"))
        return bb.emit(relax.op.nn.conv2d(x, w, strides=2, padding=1, groups=32))

    script, scheduled = scheduled_kernel(build_module(body, shape), "conv2d", schedule=True, layout="NHWC")
    assert 'T.sblock("pad_temp")' not in script and "T.vectorized(T.int64(16))" in script
    _, stock = scheduled_kernel(build_module(body, shape), "conv2d", schedule=False, layout="NCHW")
    x = tvm.runtime.tensor(np.random.default_rng(18).standard_normal(shape).astype("float32"))
    np.testing.assert_allclose(scheduled(x).numpy(), stock(x).numpy(), rtol=1e-5, atol=1e-5)


def test_a_global_pool_sums_each_channel_in_vector_lanes_and_computes_the_mean():
    """One sum per channel leaves no output axis to vectorise; the reduction axis is summed in 16 lanes."""
    script = scheduled_global_mean((1, 8, 6, 96))
    assert '_rf_update"' in script and "T.vectorized(T.int64(16))" in script  # partial sums, a vector add a step
    # each channel's 16 partial sums side by side (one vector), not 16 channels apart (a gather and a scatter)
    assert "_rf = T.sblock_alloc_buffer((T.int64(1), T.int64(8), T.int64(1), T.int64(1), T.int64(16)))" in script


def test_a_global_pool_over_rows_no_vector_width_divides_sums_rows_and_columns_as_one_axis():
    """A pool at 40x40 (a DB detector's squeeze-and-excitation in an int8 build, NCHW): 40 columns make no
    whole vectors, and the pool was summed one float at a time; its 1600 contiguous floats make 100."""
    script = scheduled_global_mean((1, 4, 40, 40))
    assert '_rf_update"' in script and "range(T.int64(100))" in script


def test_a_global_pool_over_sizes_no_vector_width_divides_sums_each_row_as_one_vector():
    """A pool at 29x29 (ResNeXt's head in an int8 build, NCHW): neither 29 nor 841 splits into whole vectors,
    and the pool was summed one float at a time (512 channels: 217 -> 50 us). Each channel's rows are added
    as vectors of 29 lanes, which are summed once at the end."""
    script = scheduled_global_mean((1, 4, 29, 29))
    assert '_rf_update"' in script and "T.vectorized(T.int64(29))" in script


def test_a_global_pool_over_rows_shorter_than_half_a_vector_sums_each_row_as_one_vector():
    """A squeeze-and-excitation pool at 7x7 in an int8 build (NCHW): 7 columns, 49 floats a channel, and the
    pool summed one float at a time, each add waiting on the last (512 channels: 6.2 -> 2.2 us)."""
    script = scheduled_global_mean((1, 4, 7, 7))
    assert '_rf_update"' in script and "T.vectorized(T.int64(7))" in script


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_a_reduction_of_a_whole_tensor_to_one_value_takes_it_a_vector_a_step(reduce):
    """The min and max a dynamically quantized model takes of every activation (DynamicQuantizeLinear) had
    no schedule at all, one float a step: 70 us over [128, 1024]. Now 16 partial results, one vector each step."""
    import numpy as np
    import tvm
    from tvm import relax

    module = build_module(lambda bb, x: bb.emit(getattr(relax.op, reduce)(x)), (1, 128, 1024))
    script, reduced = scheduled_kernel(module, reduce, schedule=True)
    assert '_rf_update"' in script and "T.vectorized(T.int64(16))" in script
    x = np.random.default_rng(4).standard_normal((1, 128, 1024)).astype("float32")
    assert reduced(tvm.runtime.tensor(x)).numpy() == getattr(np, reduce)(x)


def test_a_batched_matmul_tiles_its_rows_not_its_heads():
    """Attention's scores @ values, [1, 6, 36, 72] x [1, 6, 72, 64]: each head reads its own values, so a
    register tile across the 6 heads loaded 6 vectors for 4 multiply-adds (Whisper's encoder: 91 GFLOP/s,
    now ~450). The tile runs over each head's rows, sharing the values' vectors; equal to numpy."""
    import numpy as np
    import tvm
    from tvm import relax

    rng = np.random.default_rng(5)
    values = rng.standard_normal((1, 6, 72, 64)).astype("float32")
    module = build_module(lambda bb, x: bb.emit(relax.op.matmul(x, relax.const(values))), (1, 6, 36, 72))
    script, run = scheduled_kernel(module, "matmul", schedule=True)
    assert "i2_1 in T.unroll(T.int64(6))" in script and "i1_1 in T.unroll" not in script
    x = rng.standard_normal((1, 6, 36, 72)).astype("float32")
    np.testing.assert_allclose(run(tvm.runtime.tensor(x)).numpy(), x @ values, rtol=1e-5, atol=1e-4)


def test_a_depthwise_conv_still_tiles_its_rows():
    """Its input varies with the rows, but its weights do not: the tile reuses each weight vector."""
    import numpy as np
    from tvm import relax

    weights = relax.const(np.random.default_rng(6).standard_normal((32, 1, 3, 3)).astype("float32"))
    module = build_module(lambda bb, x: bb.emit(relax.op.nn.conv2d(x, weights, padding=1, groups=32)), (1, 32, 24, 24))
    script, _ = scheduled_kernel(module, "conv2d", schedule=True, layout="NHWC")
    assert "yy_1 in T.unroll(T.int64(6))" in script


def scheduled_global_mean(shape) -> str:
    """The script of a mean over the rows and columns of an NCHW tensor, once its output is checked against
    numpy."""
    import numpy as np
    import tvm
    from tvm import relax

    module = build_module(lambda bb, x: bb.emit(relax.op.mean(x, axis=[2, 3], keepdims=True)), shape)
    script, pooled = scheduled_kernel(module, "mean", schedule=True)
    x = np.random.default_rng(3).standard_normal(shape).astype("float32")
    np.testing.assert_allclose(
        pooled(tvm.runtime.tensor(x)).numpy(), x.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6
    )
    return script


def test_a_large_global_pool_computes_its_partial_sums_in_the_parallel_loop():
    """The partial sums are the pool's work: they run under the parallel loop over channels, each channel's
    in one vector. Before, they ran on one core and only the final adds of 16 lanes were parallel."""
    from tvm import relax

    module = build_module(lambda bb, x: bb.emit(relax.op.mean(x, axis=[2, 3], keepdims=True)), (1, 64, 128, 128))
    script, _ = scheduled_kernel(module, "mean", schedule=True)
    assert script.count("T.parallel(") == 1 and script.index("T.parallel(") < script.index('_rf_update"')


@pytest.mark.parametrize(
    "shape, parallel", [((1, 32, 112, 112), True), ((1, 1152, 7, 7), True), ((1, 64, 16, 16), False)]
)
def test_a_pool_summed_in_lanes_runs_on_every_core_from_32k_elements(shape, parallel):
    """Summed a vector a step, a pool costs far more a step than a conv's multiply-add, whose threshold (1 M)
    it had: EfficientNet's int8 squeeze-and-excite pools ran on one core, 32 x 112 x 112 in 20 us a call
    (12 on two), 1152 x 7 x 7 in 7.3 (5.7). 64 x 16 x 16 stays on one."""
    script = scheduled_global_mean(shape)
    assert ("T.parallel(" in script) is parallel


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_an_nchw_depthwise_conv_pads_its_rows_with_no_condition_in_a_vector_and_computes_the_same(dtype):
    """A depthwise conv kept NCHW (an int8 one on a target without VNNI, summed in float): the padding's
    condition varied across each vector's columns, and TVM ran the padding, or the conv it was inlined into,
    one lane at a time (3x3 at 24 x 12 x 96: float 31 -> 12 us, int8 23 -> 12; 5x5 at 200 x 4 x 96: float
    844 -> 65 us). Zeros over the padded buffer, then the rows copied in, both vectorised."""
    import re

    import numpy as np
    import tvm
    from tvm import relax

    shape = (1, 24, 12, 96)
    weight = np.random.default_rng(31).integers(-128, 128, (24, 1, 3, 3))

    def body(bb, x):
        w = relax.const(weight.astype(dtype))
        conv = relax.op.nn.conv2d(
            x, w, strides=(2, 1), padding=1, groups=24, out_dtype="int32" if dtype == "int8" else "float32"
        )
        return bb.emit(conv)

    script, scheduled = scheduled_kernel(build_module(body, shape, dtype), "conv2d", schedule=True, layout="NCHW")
    assert 'T.sblock("pad_temp_pad_const")' in script and "T.if_then_else(" not in script
    assert re.search(r"T\.vectorized\(T\.int64\(98\)\):\n\s+with T\.sblock\(\"pad_temp_pad_const\"\)", script)
    assert re.search(r"T\.vectorized\(T\.int64\(16\)\):\n\s+with T\.sblock\(\"pad_temp\"\)", script)  # the rows
    x = np.random.default_rng(32).integers(-128, 128, shape)
    padded = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    want = sum(
        padded[:, :, i : i + 12 : 2, j : j + 96] * weight[None, :, 0, i, j, None, None]
        for i in range(3)
        for j in range(3)
    )
    np.testing.assert_array_equal(scheduled(tvm.runtime.tensor(x.astype(dtype))).numpy(), want)


def test_a_pool_over_rows_no_vector_width_divides_is_vectorised_along_the_whole_row():
    """An NCHW 5x5 max pool at 10x10 (a YOLO's SPPF in an int8 build): 10 columns split by no vector width,
    and the pool ran one element at a time. Its padding stays a block of its own (inlined, each lane's
    bounds select compiled to masked gathers, twice the scalar loop's time), written as the pad value over
    the whole buffer and then a copy of the input, neither with a condition."""
    import numpy as np
    import tvm
    from tvm import relax

    shape = (1, 4, 10, 10)
    module = build_module(lambda bb, x: bb.emit(relax.op.nn.max_pool2d(x, pool_size=5, strides=1, padding=2)), shape)
    script, pooled = scheduled_kernel(module, "pool", schedule=True)
    assert "T.vectorized(T.int64(10))" in script and "T.if_then_else(" not in script
    assert 'T.sblock("pad_temp_pad_const")' in script
    x = np.random.default_rng(4).standard_normal(shape).astype("float32")
    padded = np.pad(x, [(0, 0), (0, 0), (2, 2), (2, 2)], constant_values=-np.inf)
    want = np.max([padded[:, :, i : i + 10, j : j + 10] for i in range(5) for j in range(5)], axis=0)
    np.testing.assert_array_equal(pooled(tvm.runtime.tensor(x)).numpy(), want)


def test_a_reduction_over_a_contiguous_axis_into_short_rows_still_sums_in_lanes():
    """A mean over 512 features into 10 rows has rows no vector width divides too, but reads its reduction
    axis contiguously: partial sums in lanes, not the rows in a vector that gathers across features."""
    import numpy as np
    import tvm
    from tvm import relax

    shape = (1, 10, 512)
    module = build_module(lambda bb, x: bb.emit(relax.op.mean(x, axis=[2])), shape)
    script, reduced = scheduled_kernel(module, "mean", schedule=True)
    assert '_rf_update"' in script and "T.vectorized(T.int64(10))" not in script
    x = np.random.default_rng(5).standard_normal(shape).astype("float32")
    np.testing.assert_allclose(reduced(tvm.runtime.tensor(x)).numpy(), x.mean(axis=2), rtol=1e-5, atol=1e-6)


def test_padding_rows_the_vector_width_does_not_divide_are_vectorised_whole():
    """A 5x5 conv pads 96-column rows to 100: split by 4, the bounds select compiled to masked gathers."""
    import numpy as np
    import tvm
    from tvm import relax

    shape = (1, 8, 2, 96)
    module = build_module(lambda bb, x: bb.emit(relax.op.nn.pad(x, [0, 0, 0, 0, 2, 2, 2, 2])), shape)
    script, padded = scheduled_kernel(module, "pad", schedule=True)
    assert "T.vectorized(T.int64(100))" in script
    x = np.random.default_rng(4).standard_normal(shape).astype("float32")
    np.testing.assert_array_equal(padded(tvm.runtime.tensor(x)).numpy(), np.pad(x, [(0, 0), (0, 0), (2, 2), (2, 2)]))


@pytest.mark.parametrize(
    "widths, partitioned",
    [((64, 32, 16), True), ((40, 24), True), ((42, 22), False)],
    ids=["whole-vectors", "whole-half-vectors", "no-vectors"],
)
def test_a_concatenation_along_the_vectors_axis_is_computed_input_by_input(widths, partitioned):
    """Channels-last, a concatenation of n inputs is n nested if_then_else on the channel index, evaluated by
    every lane of a vector (DenseNet's, 25 inputs at 14x14: 2.8 ms); cut at the inputs' bounds where those are
    whole vectors of at least 4 lanes, each piece is a copy."""
    import numpy as np
    from tvm import relax

    script, arrays, got = scheduled_concatenation([(1, 5, 6, w) for w in widths], 3, relax.op.nn.relu)
    starts = np.cumsum((0, *widths))
    pieces = [f"T.vectorized(T.int64({a}), T.int64({b}))" for a, b in zip(starts[1:-1], starts[2:])]
    assert all(piece in script for piece in pieces) == partitioned and '"modelbuild.refused_steps": 0' in script
    np.testing.assert_array_equal(got, np.maximum(np.concatenate(arrays, axis=3), 0))


def test_a_long_piece_of_a_concatenation_is_cut_into_vectors_not_vectorised_whole():
    """YOLOv8-seg's head concatenates 6400, 1600 and 400 anchors along its last axis: each piece vectorised
    whole was a float32x6400 vector, and LLVM did not finish compiling the kernel in 15 minutes."""
    script = scheduled_sigmoid_of_concatenated(640, 160, 48)
    assert script.count("T.vectorized(T.int64(16))") == 3 and '"modelbuild.refused_steps": 0' in script
    assert "range(T.int64(40), T.int64(50))" in script  # the loop over vectors, cut where x1 starts


def test_a_concatenation_of_pieces_no_full_vector_divides_is_cut_into_vectors_that_divide_them_all():
    """YOLOv8's head concatenates 1600, 400 and 100 anchors: 100 is no whole number of 16-lane vectors, and
    the kernel (with the reshapes and the split around it, int8 build) ran each lane's nested selects and
    index arithmetic, 559 us; cut into 4-lane vectors, its library 0.85-0.87x (fp32's 0.93-0.95x)."""
    script = scheduled_sigmoid_of_concatenated(1600, 400, 100)
    assert script.count("T.vectorized(T.int64(4))") == 3 and '"modelbuild.refused_steps": 0' in script
    assert "range(T.int64(400), T.int64(500))" in script  # the loop over vectors, cut where x1 starts


def test_a_reshape_reading_a_concatenation_through_its_flat_index_is_cut_into_the_pieces():
    """YOLOv10's box head: three maps' anchors (1600, 400, 100) concatenated, then reshaped to [1, 4, 16, 2100]:
    the reshape reads through its flat index (`v % 2100`, `v // 2100`), which hid the pieces' bounds, and
    every element ran its nested selects and index arithmetic (285 us; once simplified over the iterators'
    ranges and cut, 79 us)."""
    import numpy as np
    from tvm import relax

    script, arrays, got = scheduled_concatenation(
        [(1, 64, w) for w in (1600, 400, 100)], 2, lambda v: relax.op.reshape(v, (1, 4, 16, 2100))
    )
    assert "range(T.int64(400), T.int64(500))" in script and "% T.int64(2100)" not in script
    np.testing.assert_array_equal(got, np.concatenate(arrays, axis=2).reshape(1, 4, 16, 2100))


def test_a_concatenation_along_an_outer_axis_is_computed_input_by_input():
    """YOLOv10's class scores: three maps' anchors concatenated to [1, 2100, 80], then a sigmoid. Vectorised
    along the 80 classes, each vector evaluated the if_then_else over the anchor at every use of its input,
    which the sigmoid's exponential has a dozen of (118 us); the anchors' loop cut at the inputs' bounds,
    each piece reads one input (26 us)."""
    import numpy as np
    from tvm import relax

    script, arrays, got = scheduled_concatenation([(1, w, 80) for w in (1600, 400, 100)], 1, relax.op.sigmoid)
    assert "T.parallel(T.int64(1600))" in script and "T.parallel(T.int64(1600), T.int64(2000))" in script
    assert "range(T.int64(2000), T.int64(2100))" in script and '"modelbuild.refused_steps": 0' in script
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-np.concatenate(arrays, axis=1))), rtol=1e-5)


def scheduled_sigmoid_of_concatenated(*widths: int) -> str:
    """The script of sigmoid(concat) of [1, 3, width] inputs along the last axis (a detector's anchors), once
    its output is checked against numpy."""
    import numpy as np
    from tvm import relax

    script, arrays, got = scheduled_concatenation([(1, 3, w) for w in widths], 2, relax.op.sigmoid)
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-np.concatenate(arrays, axis=2))), rtol=1e-5)
    return script


def scheduled_concatenation(shapes: list, axis: int, after) -> tuple[str, list, object]:
    """(the script of after(concat) of float32 inputs of `shapes` along `axis`, the inputs drawn at random,
    the library's output on them)."""
    import numpy as np
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    inputs = [relax.Var(f"x{i}", relax.TensorType(shape=s, dtype="float32")) for i, s in enumerate(shapes)]
    with bb.function("main", inputs):
        with bb.dataflow():
            out = bb.emit_output(after(relax.op.concat(inputs, axis=axis)))
        bb.emit_func_output(out)
    script, main = scheduled_kernel(bb.get(), "concatenate", schedule=True)
    arrays = [np.random.default_rng(i).standard_normal(s).astype("float32") for i, s in enumerate(shapes)]
    return script, arrays, main(*[tvm.runtime.tensor(a) for a in arrays]).numpy()


def test_a_refused_schedule_step_is_counted_and_any_other_error_fails_the_compile():
    import tvm
    from tvm.s_tir import ScheduleError

    from modelbuild.compiler import default_schedule

    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": elementwise_func()}))
    refused: list[str] = []

    def refuse(s):
        raise ScheduleError("not this kernel")

    def break_(s):
        raise AttributeError("a TVM API that moved")

    assert default_schedule._attempt(sch, refuse, refused) is sch and refused == ["ScheduleError"]
    with pytest.raises(AttributeError):
        default_schedule._attempt(sch, break_, refused)


def test_the_compile_figures_count_refused_steps_per_kernel():
    import tvm

    from modelbuild.compiler import default_schedule, lowering

    scheduled = default_schedule.schedule_function(elementwise_func(), default_schedule.Machine(cores=2))
    assert int(scheduled.attrs[default_schedule.REFUSED]) == 0
    module = tvm.IRModule({"ok": scheduled, "stubborn": scheduled.with_attr(default_schedule.REFUSED, 2)})
    assert lowering.refused_steps(module) == {"refused_steps": 2, "kernels": {"stubborn": 2}}


def elementwise_func():
    """b = a + 1 over [64, 64], as TVM's tensor expressions write a kernel."""
    from tvm import te

    a = te.placeholder((64, 64), "float32", name="a")
    b = te.compute((64, 64), lambda i, j: a[i, j] + 1.0, name="b")
    return te.create_prim_func([a, b])


@pytest.mark.parametrize("mcpu, tile", [("cascadelake", (6, 4)), ("haswell", (6, 1)), ("cortex-a72", (6, 1))])
def test_the_register_tile_is_wide_only_where_the_target_has_avx512_registers(mcpu, tile):
    import tvm

    from modelbuild.compiler import default_schedule

    triple = {"cortex-a72": {"mtriple": "aarch64-linux-gnu"}}.get(mcpu, {})
    machine = default_schedule.machine(tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 3, **triple}))
    assert (machine.cores, machine.rows, machine.vectors) == (3, *tile)


def test_a_wide_tile_unrolls_six_rows_by_four_vectors():
    import numpy as np
    import tvm
    from tvm import relax

    from modelbuild.compiler import default_schedule
    from modelbuild.compiler.passes import channels_last

    shape = (1, 8, 12, 12)
    w = np.random.default_rng(21).standard_normal((64, 8, 1, 1)).astype("float32")
    module = build_module(lambda bb, x: bb.emit(relax.op.nn.conv2d(x, relax.const(w))), shape)
    converted, _ = channels_last.convert(module, "NHWC")
    func = next(
        f for gv, f in tvm.relax.transform.LegalizeOps()(converted).functions.items() if "conv2d" in gv.name_hint
    )
    script = default_schedule.schedule_function(func, default_schedule.WIDE_REGISTERS).script()
    assert "T.unroll(T.int64(6))" in script and "T.unroll(T.int64(4))" in script
    assert "T.vectorized(T.int64(16))" in script


def test_rows_a_smaller_tile_divides_take_it_rather_than_a_tail():
    """10x10 outputs: 6-row tiles would need a bounds test inside the reduction (magika's 508 rows: 74 GFLOP/s
    with it, 120 in 4-row tiles without); 5-row tiles divide them."""
    import numpy as np
    import tvm
    from tvm import relax

    from modelbuild.compiler import default_schedule
    from modelbuild.compiler.passes import channels_last

    shape = (1, 8, 10, 10)
    w = np.random.default_rng(22).standard_normal((64, 8, 3, 3)).astype("float32")
    module = build_module(lambda bb, x: bb.emit(relax.op.nn.conv2d(x, relax.const(w), padding=1)), shape)
    converted, _ = channels_last.convert(module, "auto")
    func = next(
        f for gv, f in tvm.relax.transform.LegalizeOps()(converted).functions.items() if "conv2d" in gv.name_hint
    )
    script = default_schedule.schedule_function(func, default_schedule.WIDE_REGISTERS).script()
    assert "T.unroll(T.int64(5))" in script and "T.where" not in script
    outputs = []
    for prim in (default_schedule.schedule_function(func, default_schedule.WIDE_REGISTERS), func):
        library = tvm.compile(tvm.IRModule({"main": prim.with_attr("global_symbol", "main")}), target="llvm")
        args = [
            tvm.runtime.tensor(np.random.default_rng(23 + i).standard_normal(arg).astype("float32"))
            for i, arg in enumerate([(1, 10, 10, 8), (3, 3, 8, 64), (1, 10, 10, 64)])
        ]  # NHWC, HWIO, NHWC
        library["main"](*args)
        outputs.append(args[-1].numpy())
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-5, atol=1e-4)


def conv_bias_relu(channels, out_channels, size, kernel=3):
    import numpy as np
    from tvm import relax

    rng = np.random.default_rng(24)
    w = relax.const(rng.standard_normal((out_channels, channels, kernel, kernel)).astype("float32"))
    b = relax.const(rng.standard_normal((1, out_channels, 1, 1)).astype("float32"))

    def body(bb, x):
        conv = bb.emit(relax.op.nn.conv2d(x, w, padding=kernel // 2))
        return bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(conv, b))))

    return build_module(body, (1, channels, size, size))


def passes_of(blocks: int, kernel: int, channels: int) -> str:
    """The loops of a tile's reduction in `blocks` passes of `channels`, sweeping the output's two tiles of six
    rows and its twelve columns."""
    extents = ", ".join(f"T\\.int64\\({n}\\)" for n in (blocks, 1, 2, 12, kernel, kernel, channels))
    return rf"for rc_0, nn, yy_0, xx, ry, rx, rc_1 in T\.grid\({extents}\)"


# a 1x1 conv channels-last is a matmul of every pixel (pointwise_matmul.py): its 144 rows in 24 tiles of 6
MATMUL_PASSES = r"for k_0, i0_0, k_1 in T\.grid\(T\.int64\(2\), T\.int64\(24\), T\.int64\(512\)\)"


@pytest.mark.parametrize(
    "channels, kernel, passes",
    [(256, 3, passes_of(4, 3, 64)), (1024, 1, MATMUL_PASSES)],
    ids=["3x3-147KB-in-passes-of-37KB", "1x1-64KB-in-passes-of-32KB"],
)
def test_a_tile_reading_more_weights_than_fit_in_cache_sums_its_channels_in_passes_over_the_rows(
    channels, kernel, passes
):
    """-> 256 channels at 12x12: more output channels than pixels, so one block of weights serves every row;
    over a whole reduction a 16-lane tile reads 147 KB of them (3x3 from 256 channels) or 64 KB (1x1 from
    1024), strided a row of output channels apart: more than the L1 cache holds. In passes of the most channels
    whose weights fit (64 channels, 37 KB; 512, 32 KB), each block stays in cache while it sweeps the rows; the
    epilogue (bias, relu) waits for the last pass."""
    import re

    import numpy as np
    import tvm

    module = conv_bias_relu(channels, 256, 12, kernel)
    # in either layout a 1x1 conv is a matmul (pointwise_matmul.py), the same sums
    stock_kernel = "conv2d" if kernel > 1 else "matmul"
    script, scheduled = scheduled_kernel(module, stock_kernel, schedule=True, layout="NHWC")
    assert re.search(passes, script), script
    assert "T.parallel(" in script
    _, stock = scheduled_kernel(conv_bias_relu(channels, 256, 12, kernel), stock_kernel, schedule=False, layout="NCHW")
    x = tvm.runtime.tensor(np.random.default_rng(25).standard_normal((1, channels, 12, 12)).astype("float32"))
    np.testing.assert_allclose(scheduled(x).numpy(), stock(x).numpy(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    "channels, out_channels, size", [(16, 64, 6), (256, 16, 12)], ids=["weights-fit", "more-pixels-than-channels"]
)
def test_a_reduction_is_one_pass_where_its_weights_fit_or_the_activations_stay_put(channels, out_channels, size):
    script, _ = scheduled_kernel(conv_bias_relu(channels, out_channels, size), "conv2d", schedule=True, layout="auto")
    assert "T.vectorized(T.int64(16))" in script and "rc_1" not in script


def test_a_one_pixel_conv_fused_with_the_map_it_scales_scales_it_on_every_core():
    """A squeeze-and-excite block: its second conv (on the pooled 1x1 map) is fused with the multiply that gates
    the feature map. The conv is too small to share among the cores; under its loops, the map's scaling ran on
    one core, once per block of output channels (the DB detector's at 160x160: 439 us). It runs on its own
    loops, in parallel."""
    import numpy as np
    import tvm
    from tvm import relax

    shape = (1, 16, 64, 64)
    rng = np.random.default_rng(31)

    weights = [
        rng.standard_normal(s).astype("float32")
        for s in ((96, 16, 1, 1), (24, 96, 1, 1), (96, 24, 1, 1), (16, 96, 1, 1))
    ]

    def body(bb, x):
        w0, w1, w2, w3 = map(relax.const, weights)
        mapped = bb.emit(relax.op.nn.conv2d(x, w0))  # channels-last from here to the last conv
        squeezed = bb.emit(relax.op.mean(mapped, axis=[2, 3], keepdims=True))
        hidden = bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv2d(squeezed, w1))))
        gate = bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv2d(hidden, w2))))
        return bb.emit(relax.op.nn.conv2d(bb.emit(relax.op.multiply(mapped, gate)), w3))

    # the gate's conv is a matmul of its own channels-last (pointwise_matmul.py); the scaling, whichever
    # kernel holds it, runs on every core
    script, scheduled = scheduled_kernel(build_module(body, shape), "multiply", schedule=True, layout="NHWC")
    assert "T.parallel(" in script
    _, stock = scheduled_kernel(build_module(body, shape), "multiply", schedule=False, layout="NCHW")
    x = tvm.runtime.tensor(rng.standard_normal(shape).astype("float32"))
    np.testing.assert_allclose(scheduled(x).numpy(), stock(x).numpy(), rtol=1e-4, atol=1e-3)


def test_a_sigmoid_gate_is_computed_once_per_channel_not_once_per_pixel_it_scales():
    """EfficientNet's squeeze-and-excite: sigmoid(conv(pooled)) scales every pixel of the map. Inlined into the
    multiply, the sigmoid's exponential and division ran for every element of the map; kept apart, once per
    channel where the conv's epilogue is. A cheap gate (a ReLU) is still inlined."""
    import numpy as np
    import tvm
    from tvm import relax

    shape = (1, 16, 32, 32)
    rng = np.random.default_rng(5)
    weights = [rng.standard_normal(s).astype("float32") for s in ((96, 16, 1, 1), (8, 96, 1, 1), (96, 8, 1, 1))]

    def se(activation):
        def body(bb, x):
            w0, w1, w2 = map(relax.const, weights)
            mapped = bb.emit(relax.op.nn.conv2d(x, w0))
            squeezed = bb.emit(relax.op.mean(mapped, axis=[2, 3], keepdims=True))
            hidden = bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv2d(squeezed, w1))))
            return bb.emit(relax.op.multiply(mapped, bb.emit(activation(bb.emit(relax.op.nn.conv2d(hidden, w2))))))

        return body

    script, scheduled = scheduled_kernel(
        build_module(se(relax.op.sigmoid), shape), "multiply", schedule=True, layout="auto"
    )
    assert 'T.sblock("sigmoid")' in script and "T.float32(1.0) /" not in block_text(script, "T_multiply")
    _, stock = scheduled_kernel(build_module(se(relax.op.sigmoid), shape), "multiply", schedule=False, layout="NCHW")
    x = tvm.runtime.tensor(rng.standard_normal(shape).astype("float32"))
    np.testing.assert_allclose(scheduled(x).numpy(), stock(x).numpy(), rtol=1e-5, atol=1e-5)
    relu_script, _ = scheduled_kernel(
        build_module(se(relax.op.nn.relu), shape), "multiply", schedule=True, layout="auto"
    )
    assert 'T.sblock("relu' not in relu_script


def test_bindings_named_alike_are_told_apart_by_the_memory_figures():
    """A Softmax on axis 1 at opset 11 imports as reshape, softmax, reshape, each binding named after the
    node: a reshape of a binding with its own name. Keyed by name, the alias walk looped forever (the
    PP-OCR v4 recogniser's compile hung); keyed by variable, nothing aliases itself."""
    import tvm
    from onnx import TensorProto, helper

    from modelbuild.compiler import layer_names, lowering

    graph = helper.make_graph(
        [
            helper.make_node("Softmax", ["x"], ["y"], name="Softmax_0", axis=1),
            helper.make_node("Relu", ["y"], ["z"], name="Relu_0"),
        ],
        "softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3, 5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    module = layer_names.from_onnx(model, {"x": [2, 3, 5]}, {"x": "float32"})
    target = tvm.target.Target({"kind": "llvm"})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, target, fuse=False, layout=None)
    names = [b.var.name for block in phases.lowered["main"].body.blocks for b in block.bindings]
    assert len(names) > len(set(names))  # the case: names repeat
    steps, returned = lowering.steps(phases.lowered)
    assert not any(new == old for step in steps for new, old in step.alias.items())
    memory = memory_summary(steps, returned, lowering.planned_storage_bytes(phases.planned))
    assert memory["intermediates"] >= 1


def test_a_reshape_of_a_whole_tensor_is_called_in_the_fused_module_but_launches_no_kernel():
    import numpy as np
    import tvm
    from tvm import relax

    from modelbuild.compiler import lowering

    def body(bb, x):
        weight = relax.const(np.ones((8, 8, 3, 3), "float32"))
        conv = bb.emit(relax.op.nn.conv2d(x, weight, padding=1))
        rows = bb.emit(relax.op.reshape(conv, (1, 8, 8, 32)))
        return bb.emit(relax.op.nn.conv2d(rows, weight, padding=1))

    target = tvm.target.Target({"kind": "llvm"})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(build_module(body), target, fuse=True, layout=None, schedule=True)
    called = [call.kernel for call in lowering.kernel_calls(phases.fused)]
    launched = [call.kernel for call in lowering.launched_kernel_calls(phases.fused)]
    assert len(called) == 3 and any("reshape" in k for k in called)
    assert launched == [k for k in called if "reshape" not in k]


def test_a_tensor_divided_and_quantized_alike_for_two_convs_is_quantized_once_where_it_is_made():
    """Smoothing gives every conv that reads a tensor the same divisor, so the QDQ graph quantizes the tensor
    once per conv, with equal constants: computed once, the quantize fuses into the kernel that makes it."""
    import numpy as np
    import tvm
    from tvm import relax

    from modelbuild.compiler import lowering

    rng = np.random.default_rng(0)
    divisor = rng.uniform(0.5, 2, (1, 8, 1, 1)).astype("float32")

    def body(bb, x):
        made = bb.emit(
            relax.op.nn.relu(
                bb.emit(relax.op.nn.conv2d(x, relax.const(rng.standard_normal((8, 8, 3, 3)), "float32"), padding=1))
            )
        )
        outputs = []
        for _ in range(2):  # each conv its own copy of the same constants, as the importer gives them
            divided = bb.emit(relax.op.multiply(made, relax.const(divisor.copy())))
            quantized = bb.emit(
                relax.op.quantize(divided, relax.const(0.05, "float32"), relax.const(0, "int8"), axis=1)
            )
            data = bb.emit(relax.op.dequantize(quantized, relax.const(0.05, "float32"), relax.const(0, "int8"), axis=1))
            outputs.append(bb.emit(relax.op.nn.conv2d(data, relax.const(rng.standard_normal((4, 8, 1, 1)), "float32"))))
        return bb.emit(relax.Tuple(outputs))

    target = tvm.target.Target({"kind": "llvm"})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(build_module(body), target, fuse=True, layout=None)
    kernels = [call.kernel for call in lowering.launched_kernel_calls(phases.fused)]
    quantizing = [k for k in kernels if "quantize" in k.replace("dequantize", "")]
    assert len(quantizing) == 1 and "conv2d" in quantizing[0], kernels


@pytest.mark.parametrize("rows, tile", [(128, 6), (8, 4)], ids=["long-takes-a-tail", "short-takes-4"])
def test_without_avx512_a_long_loop_takes_six_rows_and_a_tail_a_short_one_a_tile_that_divides_it(rows, tile):
    """[rows, 64] x [64, 64]: 128 rows in 6-row tiles and a tail of 2 (a BERT-style encoder's matmuls
    0.82-0.93x against 4-row tiles); a batch of 8 rows in two 4-row tiles (6 + 2 cost MTCNN's dense layers
    4-5%)."""
    import numpy as np
    import tvm
    from tvm import relax

    weight = np.random.default_rng(26).standard_normal((64, 64)).astype("float32")
    module = build_module(lambda bb, x: bb.emit(relax.op.matmul(x, relax.const(weight))), (rows, 64))
    script, run = scheduled_kernel(module, "matmul", schedule=True)
    assert f"T.unroll(T.int64({tile}))" in script
    x = np.random.default_rng(27).standard_normal((rows, 64)).astype("float32")
    np.testing.assert_allclose(run(tvm.runtime.tensor(x)).numpy(), x @ weight, rtol=1e-4, atol=1e-4)


def test_a_tensor_whose_size_is_known_only_at_run_time_counts_no_bytes():
    """A NonMaxSuppression's kept boxes, [n, 3]: the build's figures count what they can, and the compile
    stage had failed on int() of the symbolic n."""
    from tvm import relax, tirx

    from modelbuild.compiler.lowering import tensor_bytes

    kept = tirx.Var("n", "int64")
    assert tensor_bytes(relax.TensorType(shape=[kept, 3], dtype="int64")) == 0
    assert tensor_bytes(relax.TensorType(shape=[4, 3], dtype="int64")) == 96


def test_a_non_max_suppression_keeps_tvms_own_loops_and_builds_with_the_default_schedule():
    """TVM writes NonMaxSuppression by hand, its loops rewriting their inputs in place; inlining the
    element-wise blocks around them had left a buffer undefined and tvm.compile failed. The boxes kept equal
    onnxruntime's."""
    import numpy as np
    import onnxruntime as ort
    import tvm
    from onnx import TensorProto, helper, numpy_helper
    from tvm import relax

    from modelbuild.compiler import layer_names, lowering

    constants = [
        numpy_helper.from_array(np.array([10], np.int64), "most"),
        numpy_helper.from_array(np.array([0.5], np.float32), "overlap"),
        numpy_helper.from_array(np.array([0.2], np.float32), "least"),
    ]
    graph = helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["boxes", "scores", "most", "overlap", "least"], ["kept"])],
        "nms",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 100, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 100]),
        ],
        [helper.make_tensor_value_info("kept", TensorProto.INT64, ["n", 3])],
        initializer=constants,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    module = layer_names.from_onnx(
        model, {"boxes": [1, 100, 4], "scores": [1, 1, 100]}, {"boxes": "float32", "scores": "float32"}
    )
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, target, fuse=True, layout="auto", schedule=True)
        executable = tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))
    rng = np.random.default_rng(7)
    corners = rng.uniform(0, 50, (1, 100, 2)).astype("float32")
    boxes = np.concatenate([corners, corners + rng.uniform(5, 20, (1, 100, 2)).astype("float32")], axis=-1)
    scores = rng.uniform(0, 1, (1, 1, 100)).astype("float32")
    ours = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(boxes), tvm.runtime.tensor(scores))
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"boxes": boxes, "scores": scores}
    )[0]
    np.testing.assert_array_equal(ours.numpy(), theirs)


def block_text(script: str, name: str) -> str:
    """The script of one block, from its header to the next block's."""
    start = script.index(f'T.sblock("{name}")')
    following = script.find("T.sblock(", start + 1)
    return script[start : following if following != -1 else len(script)]


@pytest.mark.parametrize(
    "rows, padded",
    [(197, 198), (192, None), (49, None)],
    ids=["197-tokens-padded-to-198", "192-whole-tiles", "49-frames-keep-their-tail"],
)
def test_a_matmul_whose_rows_take_a_short_tail_is_padded_to_whole_tiles(rows, padded):
    """ViT's 197 tokens in 6-row tiles left a tail, whose bounds test sat in the reduction: 180 GFLOP/s where
    192 rows ran at 210. The rows are padded to 198 (a copy of the input with a zero row, the extra output row
    dropped by the epilogue), and no test is left in the reduction. A Conformer's 49 frames would take 5 rows
    more (10%; its library was 1.02x so): they keep the tail."""
    import numpy as np
    import tvm
    from tvm import relax

    weight = np.random.default_rng(28).standard_normal((64, 64)).astype("float32")
    module = build_module(lambda bb, x: bb.emit(relax.op.matmul(x, relax.const(weight))), (1, rows, 64))
    script, run = scheduled_kernel(module, "matmul", schedule=True)
    assert "T.unroll(T.int64(6))" in script
    assert ("T.where" in block_text(script, "matmul_update")) == (rows == 49)
    assert ("(T.int64(1), T.int64(198), T.int64(64))" in script) == (padded == 198)
    x = np.random.default_rng(29).standard_normal((1, rows, 64)).astype("float32")
    np.testing.assert_allclose(run(tvm.runtime.tensor(x)).numpy(), x @ weight, rtol=1e-4, atol=1e-4)


def test_the_copy_padding_a_matmuls_rows_runs_under_its_parallel_loop():
    """Q K^T over ViT's 197 tokens pads its queries to 198 rows (_rows_padded): the copy ran whole on one core
    before the parallel loop over the heads, and runs under it now, a head each (ViT's scores 0.93x the time)."""
    import numpy as np
    import tvm
    from tvm import relax

    def scores(bb, x):
        keys = bb.emit(relax.op.permute_dims(bb.emit(relax.op.multiply(x, relax.const(0.5, "float32"))), [0, 1, 3, 2]))
        return bb.emit(relax.op.matmul(x, keys))

    module = build_module(scores, (1, 4, 197, 64))
    script, run = scheduled_kernel(module, "matmul", schedule=True)
    assert "T.int64(198)" in script  # the padded rows
    assert script.index("T.parallel(") < script.index('T.sblock("x_pad")')
    x = np.random.default_rng(30).standard_normal((1, 4, 197, 64)).astype("float32")
    want = x @ (0.5 * x).transpose(0, 1, 3, 2)
    np.testing.assert_allclose(run(tvm.runtime.tensor(x)).numpy(), want, rtol=1e-4, atol=1e-4)


def test_a_matmul_whose_weights_go_outermost_copies_its_padded_rows_once():
    """With more columns than rows ([196, 256] x [256, 256], a pointwise conv at 14 x 14) the parallel loop runs
    over blocks of columns: under it, the copy padding the rows would copy every row once a block. It runs
    before the loop, in vectors."""
    import numpy as np
    import tvm
    from tvm import relax

    weight = np.random.default_rng(31).standard_normal((256, 256)).astype("float32")
    module = build_module(lambda bb, x: bb.emit(relax.op.matmul(x, relax.const(weight))), (196, 256))
    script, run = scheduled_kernel(module, "matmul", schedule=True)
    assert "T.int64(198)" in script  # the padded rows
    copy = script.index('T.sblock("x_pad")')
    assert copy < script.index("T.parallel(") and "T.vectorized" in script[script.rfind("for", 0, copy) - 200 : copy]
    x = np.random.default_rng(32).standard_normal((196, 256)).astype("float32")
    np.testing.assert_allclose(run(tvm.runtime.tensor(x)).numpy(), x @ weight, rtol=1e-4, atol=1e-4)


def test_a_conv_padded_to_one_vector_of_channels_keeps_its_epilogue_in_a_vector_of_its_width():
    """MTCNN's first conv computes 16 channels for its 10 (channel_padding). Its one column tile holds all 10,
    and the epilogue under it is a vector of 10 lanes; moved after the row's tiles (tried for attention's
    padded scores) it was a scalar loop and the model took 2.2x its time."""
    import re

    import numpy as np
    import tvm
    from tvm import relax

    def body(bb, x):
        w = relax.const(np.random.default_rng(33).standard_normal((10, 3, 3, 3)).astype("float32"))
        return bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv2d(x, w))))

    shape = (1, 3, 48, 64)
    script, scheduled = scheduled_kernel(build_module(body, shape), "conv2d", schedule=True, layout="NHWC")
    assert "T.int64(16)" in script  # the padded channels
    assert re.search(r"T\.vectorized\(T\.int64\(10\)\):\n\s+with T\.sblock\(\"(compute|T_relu)", script)
    _, stock = scheduled_kernel(build_module(body, shape), "conv2d", schedule=False, layout="NCHW")
    x = tvm.runtime.tensor(np.random.default_rng(34).standard_normal(shape).astype("float32"))
    np.testing.assert_allclose(scheduled(x).numpy(), stock(x).numpy(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("width", [2100, 2101])
def test_a_long_row_no_vector_divides_runs_in_full_vectors_and_one_short_tail(width):
    """YOLO's class scores at 320 pixels are [80, 2100]: split by its widest divisor the row ran in vectors of
    4 lanes, and a sigmoid over it took 3.3x the time of one over [80, 2112]."""
    import numpy as np
    import tvm
    from tvm import relax

    module = build_module(lambda bb, x: bb.emit(relax.op.sigmoid(x)), (1, 80, width))
    script, main = scheduled_kernel(module, "sigmoid", schedule=True)
    body = width - width % 16
    assert "T.vectorized(T.int64(16))" in script and f"T.vectorized(T.int64({body}), T.int64({width}))" in script
    x = np.random.default_rng(5).standard_normal((1, 80, width)).astype("float32")
    np.testing.assert_allclose(main(tvm.runtime.tensor(x)).numpy(), 1 / (1 + np.exp(-x)), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("function, parallel", [("sigmoid", True), ("relu", False)])
def test_a_costly_element_wise_function_runs_on_every_core_from_fewer_elements_than_a_copy(function, parallel):
    """32 Ki elements are too few for a copy to pay for a parallel region and enough for a sigmoid (11 -> 8 us
    on 2 cores)."""
    from tvm import relax

    module = build_module(
        lambda bb, x: bb.emit(getattr(relax.op.nn if function == "relu" else relax.op, function)(x)), (1, 32, 32, 32)
    )
    script, _ = scheduled_kernel(module, function, schedule=True)
    assert ("T.parallel(" in script) is parallel


def test_a_row_read_through_a_reshapes_flat_index_is_read_in_whole_vectors():
    """A reshape [64, 2, 1520] -> [64, 20, 152] reads (row * 152 + column) % 1520: 16 lanes beside a tail of 8
    could not be proven inside one input row, so every load was a gather (layout's int8 reshape: 75 -> 1330
    us), and vectors of 8 were kept for such rows (_divides_row). Simplified over the iterators' ranges, the
    read is row // 10, row % 10 * 152 + column: whole 16-lane vectors and a tail, contiguous."""
    import numpy as np
    import tvm
    from tvm import relax

    module = build_module(
        lambda bb, x: bb.emit(relax.op.add(bb.emit(relax.op.reshape(x, (1, 64, 20, 152))), relax.const(1.0))),
        (1, 64, 2, 1520),
    )
    script, main = scheduled_kernel(module, "reshape", schedule=True)
    assert "% T.int64(1520)" not in script and "T.vectorized(T.int64(144), T.int64(152))" in script
    x = np.random.default_rng(6).standard_normal((1, 64, 2, 1520)).astype("float32")
    np.testing.assert_array_equal(main(tvm.runtime.tensor(x)).numpy(), x.reshape(1, 64, 20, 152) + 1)


def test_a_model_of_thin_grouped_convs_alone_keeps_nchw_and_one_with_a_dense_conv_converts():
    """Groups of 3 channels compute faster in NCHW, and alone such a conv does not pay for the transposes into
    and out of channels-last. Beside a dense conv, the model converts whole; beside a depthwise conv, which
    would convert, the model's convs do too little work for the transposes at its edges."""
    import numpy as np
    from tvm import relax

    from modelbuild.compiler.passes import channels_last

    rng = np.random.default_rng(8)
    thin = relax.const(rng.standard_normal((18, 3, 1, 1)).astype("float32"))
    thin_3x3 = relax.const(rng.standard_normal((18, 3, 3, 3)).astype("float32"))
    depthwise = relax.const(rng.standard_normal((18, 1, 3, 3)).astype("float32"))
    dense = relax.const(rng.standard_normal((32, 18, 3, 3)).astype("float32"))

    def alone(bb, x):
        return relax.op.nn.conv2d(bb.emit(relax.op.nn.conv2d(x, thin, groups=6)), thin_3x3, padding=1, groups=6)

    def beside(weight, **attrs):
        return lambda bb, x: relax.op.nn.conv2d(bb.emit(alone(bb, x)), weight, padding=1, **attrs)

    shape, convert = (1, 18, 20, 20), channels_last.convert
    assert convert(build_module(alone, shape), "auto")[1] == channels_last.KEPT
    assert convert(build_module(beside(dense), shape), "auto")[1] == channels_last.CONVERTED
    assert convert(build_module(beside(depthwise, groups=18), shape), "auto")[1] == channels_last.EDGES_OUTWEIGH
    assert convert(build_module(alone, shape), "NHWC")[1] == channels_last.CONVERTED


def test_a_costly_function_read_twice_by_the_next_is_computed_once_not_copied_into_it():
    """A sigmoid, two ReLUs, an add and an exp (a speed fuzzer's draw): the polynomial exp reads its argument
    three times, so inlining what comes before it (the sigmoid, ReLUs and add, inlined into one another) would
    write that three times, each copy with its own exp, and the copies multiply down a chain. The add stays a
    block of its own, the kernel small, and the values the stock schedule's."""
    import numpy as np
    import tvm
    from tvm import relax

    shape = (1, 96, 10, 10)

    def chain(bb, x):
        gated = bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.relu(bb.emit(relax.op.sigmoid(x))))))
        return relax.op.exp(bb.emit(relax.op.add(gated, relax.const(np.full((1, 96, 1, 1), 0.5, "float32")))))

    script, scheduled = scheduled_kernel(build_module(chain, shape), "exp", schedule=True)
    assert 'T.sblock("T_add")' in script and len(script) < 40_000
    _, stock = scheduled_kernel(build_module(chain, shape), "exp", schedule=False)
    x = tvm.runtime.tensor(np.random.default_rng(3).standard_normal(shape).astype("float32"))
    np.testing.assert_allclose(scheduled(x).numpy(), stock(x).numpy(), rtol=1e-6)
