"""Float convs channels-last, integer convs NCHW, clips that do not break the layout, and a fallback."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.onnx_models import onnx_between_convs, onnx_hard_swish_between_convs
from tests.helpers.relax_graphs import build_module, kernel_shapes


def run(module, x: np.ndarray) -> np.ndarray:
    """main(x) of the module, built by stock TVM."""
    import tvm
    from tvm import relax

    executable = tvm.compile(module, target="llvm")
    return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def lowered_run(module, layout: str, x: np.ndarray) -> np.ndarray:
    """main(x) of the module lowered by modelbuild's pipeline with `layout`, default schedules."""
    import tvm
    from tvm import relax

    from modelbuild.compiler import lowering

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, target, fuse=True, layout=layout, schedule=True)
        executable = tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))
    return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def assert_channels_last_throughout(model, seed: int) -> None:
    """The imported model converts, its activations leave channels-last once (at the output), and it computes
    what the unconverted module does."""
    from modelbuild.compiler import layer_names
    from modelbuild.compiler.passes import channels_last

    module = layer_names.from_onnx(model, {"x": [1, 8, 10, 12]}, {"x": "float32"})
    converted, used = channels_last.convert(module, "auto")
    assert used == channels_last.CONVERTED
    activations = [
        line
        for line in converted.script().splitlines()
        if "R.permute_dims(" in line and ("(1, 16, 10, 12)" in line or "(1, 10, 12, 16)" in line)
    ]
    assert len(activations) == 1
    x = np.random.default_rng(seed).uniform(-8, 8, (1, 8, 10, 12)).astype("float32")
    outputs = [run(mod, x) for mod in (module, converted)]
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-5, atol=1e-4)


def float_and_integer_convs(bb, x):
    """A float conv 8 -> 32 channels, and an int8 conv 8 -> 24 channels of the same input cast to int8."""
    from tvm import relax

    rng = np.random.default_rng(5)
    w = relax.const(rng.standard_normal((32, 8, 3, 3)).astype("float32"))
    q = relax.const(rng.integers(-8, 8, (24, 8, 1, 1)).astype("int8"))
    floats = bb.emit(relax.op.nn.conv2d(x, w, padding=1))
    ints = bb.emit(relax.op.nn.conv2d(bb.emit(relax.op.astype(x, "int8")), q, out_dtype="int32"))
    return bb.emit(relax.Tuple([floats, ints]))


def test_auto_layout_turns_float_convs_channels_last_and_keeps_integer_convs_nchw():
    """Integer convs keep NCHW, the layout their VNNI kernels are written for; float convs go NHWC / HWIO,
    so their vectors run over output channels; layout = "NCHW" keeps the model's layout everywhere."""
    module = build_module(float_and_integer_convs, (1, 8, 12, 20))
    auto = kernel_shapes(module, "auto")
    float_conv = next(shapes for name, shapes in auto.items() if "conv2d" in name and [3, 3, 8, 32] in shapes)
    assert [1, 12, 20, 32] in float_conv  # NHWC output
    integer_conv = next(shapes for name, shapes in auto.items() if "conv2d" in name and [24, 8, 1, 1] in shapes)
    assert [1, 24, 12, 20] in integer_conv  # NCHW output, OIHW weights
    kept = kernel_shapes(module, "NCHW")
    assert any([32, 8, 3, 3] in shapes and [1, 32, 12, 20] in shapes for shapes in kept.values())
    every = kernel_shapes(module, "NHWC")  # integer convs too (it was rejected as an invalid layout before)
    assert any([1, 1, 8, 24] in shapes and [1, 12, 20, 24] in shapes for shapes in every.values())


def hard_swish_between_convs(bb, x):
    """conv -> x * clip(x + 3, 0, 6) / 6 -> conv, as a DB text detector's backbone has it."""
    from tvm import relax

    rng = np.random.default_rng(15)
    first = bb.emit(relax.op.nn.conv2d(x, relax.const(rng.standard_normal((16, 8, 3, 3)).astype("float32")), padding=1))
    gate = bb.emit(relax.op.clip(bb.emit(relax.op.add(first, relax.const(3.0, "float32"))), 0, 6))
    act = bb.emit(relax.op.divide(bb.emit(relax.op.multiply(first, gate)), relax.const(6.0, "float32")))
    return bb.emit(relax.op.nn.conv2d(act, relax.const(rng.standard_normal((16, 16, 1, 1)).astype("float32"))))


def test_a_clip_between_convs_keeps_them_channels_last_and_computes_the_same():
    from modelbuild.compiler.passes import channels_last

    module = build_module(hard_swish_between_convs, (1, 8, 10, 12))
    converted, used = channels_last.convert(module, "auto")
    assert used == channels_last.CONVERTED
    assert converted.script().count("R.permute_dims(x") == 1  # into channels-last once, at the input
    assert "R.clip(" not in converted.script()
    x = np.random.default_rng(16).uniform(-8, 8, (1, 8, 10, 12)).astype("float32")
    outputs = [run(mod, x) for mod in (module, converted)]
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-5, atol=1e-4)


def leaky_relu_and_pool_between_convs(alpha: float):
    """conv -> leaky ReLU -> 2x2 max pool -> conv, as AECMOS's feature extractor has it."""
    from tvm import relax

    def body(bb, x):
        rng = np.random.default_rng(35)
        first = bb.emit(
            relax.op.nn.conv2d(x, relax.const(rng.standard_normal((16, 8, 3, 3)).astype("float32")), padding=1)
        )
        pooled = bb.emit(relax.op.nn.max_pool2d(bb.emit(relax.op.nn.leakyrelu(first, alpha)), (2, 2), (2, 2)))
        return bb.emit(relax.op.nn.conv2d(pooled, relax.const(rng.standard_normal((16, 16, 1, 1)).astype("float32"))))

    return build_module(body, (1, 8, 10, 12))


@pytest.mark.parametrize("alpha", [0.1, 1.0, 2.5, -0.5])
def test_a_leaky_relu_between_convs_keeps_them_and_the_pool_channels_last_and_computes_the_same(alpha):
    """TVM 0.27 infers no layout for leakyrelu: the conv's output went back to NCHW, and the pool after it.
    A negative alpha (no maximum or minimum is leaky's value) is left as it is."""
    from modelbuild.compiler.passes import channels_last

    module = leaky_relu_and_pool_between_convs(alpha)
    converted, used = channels_last.convert(module, "auto")
    assert used == channels_last.CONVERTED
    script = converted.script()
    if alpha >= 0:
        assert "leakyrelu" not in script
        assert script.count("R.permute_dims(") == 4  # the input, two weights, the output
        assert 'layout="NHWC"' in script  # the pool
    else:
        assert "leakyrelu" in script
    x = np.random.default_rng(36).uniform(-8, 8, (1, 8, 10, 12)).astype("float32")
    outputs = [run(mod, x) for mod in (module, converted)]
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-5, atol=1e-4)


def test_an_onnx_clip_with_input_bounds_and_one_value_constants_keep_the_convs_channels_last():
    """TVM's importer makes that Clip two call_tir kernels and keeps 3 and 6 as [1] tensors; layout inference
    stopped at each (two transposes per activation, 46% of the layout net's kernel time)."""
    assert_channels_last_throughout(onnx_hard_swish_between_convs(), seed=26)


def onnx_tf_style_block():
    """conv -> Mul and Add by [C, 1, 1] constants (tf2onnx's batch normalisation) -> LeakyRelu -> Max with a
    one-value constant -> conv, as openWakeWord's speech embedding repeats it 19 times."""
    from onnx import helper

    rng = np.random.default_rng(45)
    nodes = [
        helper.make_node("Mul", ["a", "scale"], ["b"]),
        helper.make_node("Add", ["b", "shift"], ["c"]),
        helper.make_node("LeakyRelu", ["c"], ["d"], alpha=0.2),
        helper.make_node("Max", ["d", "floor"], ["e"]),
    ]
    return onnx_between_convs(
        "tf_block",
        nodes,
        {"scale": rng.uniform(0.5, 2, (16, 1, 1)), "shift": rng.standard_normal((16, 1, 1)), "floor": np.array([-0.4])},
    )


def test_a_tf2onnx_block_of_batch_norm_leaky_relu_and_max_stays_channels_last_and_computes_the_same():
    """Each of these stopped layout inference: the [C, 1, 1] constants (of lower rank), leakyrelu, the
    broadcast_to that TVM's importer puts before the stack of Max's inputs (and, unused once the stack is
    rewritten, until it is removed), and the binding of one variable to another that the stack's rewrite
    left. Fails without any one of them."""
    assert_channels_last_throughout(onnx_tf_style_block(), seed=46)


def reduced_stack(keepdims: bool):
    """conv -> max over its pixels -> stack of two -> max over the stacked axis, as magika ends."""
    from tvm import relax

    def body(bb, x):
        conv = bb.emit(
            relax.op.nn.conv2d(
                x, relax.const(np.random.default_rng(19).standard_normal((4, 4, 1, 1)).astype("float32"))
            )
        )
        pooled = bb.emit(relax.op.max(conv, axis=[2, 3]))
        negated = bb.emit(relax.op.negative(pooled))
        stacked = bb.emit(relax.op.stack([pooled, negated], axis=0))
        return bb.emit(relax.op.max(stacked, axis=[0], keepdims=keepdims))

    return build_module(body, (1, 4, 6, 6))


def test_a_reduction_over_a_stack_becomes_element_wise_so_the_model_converts_and_computes_the_same():
    import tvm
    from tvm import relax

    from modelbuild.compiler.passes import channels_last

    module = reduced_stack(keepdims=False)
    converted, used = channels_last.convert(module, "NHWC")  # asked for: too little work for "auto" to convert
    assert used == channels_last.CONVERTED and "R.maximum(" in converted.script()
    x = np.random.default_rng(20).standard_normal((1, 4, 6, 6)).astype("float32")
    outputs = [
        relax.VirtualMachine(tvm.compile(m, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        for m in (module, converted)
    ]
    np.testing.assert_array_equal(outputs[1], outputs[0])


def test_a_model_tvm_cannot_convert_keeps_its_layout_and_says_why():
    """TVM 0.27's layout inference fails on a reduction over a stacked axis; kept as a dimension, it is not
    rewritten, so the conversion fails and the build falls back."""
    from modelbuild.compiler.passes import channels_last

    module = reduced_stack(keepdims=True)
    converted, used = channels_last.convert(module, "NHWC")  # asked for: too little work for "auto" to convert
    assert converted is module
    assert used.startswith("model (TVM's layout conversion failed: ") and "SLayout" in used


def conv1d_encoder(second_channels: int, groups: int = 1):
    """conv1d 64 -> 128 channels over 4 steps -> ReLU -> conv1d 128 -> second_channels, stride 2, as silero's
    streaming encoder has them."""
    from tvm import relax

    def body(bb, x):
        rng = np.random.default_rng(55)
        first = bb.emit(
            relax.op.nn.conv1d(x, relax.const(rng.standard_normal((128, 64, 3)).astype("float32")), padding=1)
        )
        weights = rng.standard_normal((second_channels, 128 // groups, 3)).astype("float32")
        return bb.emit(
            relax.op.nn.conv1d(
                bb.emit(relax.op.nn.relu(first)), relax.const(weights), strides=2, padding=1, groups=groups
            )
        )

    return build_module(body, (1, 64, 4))


@pytest.mark.parametrize("second_channels, groups, second_nwc", [(64, 1, True), (3, 1, False), (128, 128, False)])
def test_a_conv1d_goes_channels_last_where_its_channels_fill_vectors(second_channels, groups, second_nwc):
    """Over a streaming model's few time steps a conv1d's vectors run over its channels NWC (3-4x faster on
    silero's shapes); 3 channels, too few for a vector even padded, and a grouped conv1d keep NCW (channels
    that padding rounds to whole vectors: test_channel_padding_tvm)."""
    module = conv1d_encoder(second_channels, groups)
    shapes = kernel_shapes(module, "auto")
    assert any([1, 4, 128] in s for name, s in shapes.items() if "conv1d" in name)  # the first: NWC
    second_output = [1, 2, second_channels] if second_nwc else [1, second_channels, 2]
    assert any(second_output in s for name, s in shapes.items() if "conv1d" in name)
    x = np.random.default_rng(56).standard_normal((1, 64, 4)).astype("float32")
    np.testing.assert_allclose(lowered_run(module, "auto", x), lowered_run(module, "NCHW", x), rtol=1e-5, atol=1e-4)


def test_a_squeeze_of_a_negative_axis_converts_and_computes_the_same():
    """ConvertLayout failed with std::bad_alloc on squeeze(x, axis=[-1]), as silero's encoder ends, so the
    whole model kept its layout."""
    from tvm import relax

    from modelbuild.compiler.passes import channels_last

    def body(bb, x):
        weights = np.random.default_rng(65).standard_normal((128, 64, 3)).astype("float32")
        conv = bb.emit(relax.op.nn.conv1d(x, relax.const(weights), padding=1))
        return bb.emit(relax.op.squeeze(bb.emit(relax.op.nn.relu(conv)), axis=[-1]))

    module = build_module(body, (1, 64, 1))
    converted, used = channels_last.convert(module, "auto")
    assert used == channels_last.CONVERTED
    x = np.random.default_rng(66).standard_normal((1, 64, 1)).astype("float32")
    outputs = [run(mod, x) for mod in (module, converted)]
    assert outputs[1].shape == (1, 128)
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-5, atol=1e-4)


def test_a_conv3d_goes_channels_last_and_computes_the_same():
    """A video classifier's 3x3x3 convs: NDHWC activations and DHWIO weights, vectors over output channels
    (130 GFLOP/s NCDHW over 112 columns, 400-500 NDHWC); the same outputs as the model's own layout."""
    from tvm import relax

    rng = np.random.default_rng(57)
    weights = [rng.standard_normal(shape).astype("float32") for shape in ((16, 3, 3, 3, 3), (16, 16, 3, 3, 3))]

    def body(bb, x):
        for w in weights:
            x = bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv3d(x, relax.const(w), padding=1))))
        return x

    module = build_module(body, (1, 3, 4, 6, 10))
    shapes = kernel_shapes(module, "auto")
    assert any([3, 3, 3, 16, 16] in s and [1, 4, 6, 10, 16] in s for name, s in shapes.items() if "conv3d" in name)
    x = np.random.default_rng(58).standard_normal((1, 3, 4, 6, 10)).astype("float32")
    np.testing.assert_allclose(lowered_run(module, "auto", x), lowered_run(module, "NCHW", x), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "channels, out_channels, kernel, groups, stride, converts",
    [
        (24, 24, 3, 24, 1, False),  # a depthwise conv: 9 multiply-adds an output, about 4.5 an edge element
        (24, 24, 3, 24, 2, True),  # strided, NCHW's kernel falls off
        (24, 24, 5, 24, 1, True),  # and so it does for 5x5 taps
        (11, 24, 1, 1, 1, False),  # pointwise: the same matmul in either layout, NCHW's over the flattened map
        (64, 64, 3, 1, 1, True),  # a dense 3x3 conv of 64 channels: 288
    ],
    ids=["depthwise", "depthwise-stride-2", "depthwise-5x5", "thin-pointwise", "dense-3x3"],
)
def test_auto_keeps_nchw_for_pointwise_and_a_few_depthwise_convs_that_would_not_pay_for_the_transposes(
    channels, out_channels, kernel, groups, stride, converts
):
    """A model of one conv transposes its input into channels-last and its output back: a 3x3 depthwise conv
    at stride 1 gains less from the layout than that costs, and a pointwise one nothing, so they keep NCHW,
    saying why; convs whose NCHW kernel falls off convert whatever their work."""
    from tvm import relax

    from modelbuild.compiler.passes import channels_last

    weight = np.random.default_rng(31).standard_normal((out_channels, channels // groups, kernel, kernel))
    module = build_module(
        lambda bb, x: relax.op.nn.conv2d(
            x, relax.const(weight.astype("float32")), strides=stride, padding=kernel // 2, groups=groups
        ),
        (1, channels, 40, 40),
    )
    _, used = channels_last.convert(module, "auto")
    assert used == (channels_last.CONVERTED if converts else channels_last.EDGES_OUTWEIGH)
    assert channels_last.convert(module, "NHWC")[1] == channels_last.CONVERTED  # asked for, it converts


def test_a_model_whose_sizes_are_not_all_known_converts_as_a_network_does():
    from tvm import relax, tirx

    from modelbuild.compiler.passes import channels_last

    side = tirx.Var("side", "int64")
    weight = np.random.default_rng(32).standard_normal((24, 1, 3, 3)).astype("float32")
    module = build_module(
        lambda bb, x: relax.op.nn.conv2d(x, relax.const(weight), padding=1, groups=24), (1, 24, side, side)
    )
    assert channels_last.convert(module, "auto")[1] == channels_last.CONVERTED
