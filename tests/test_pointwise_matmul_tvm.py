"""Float 1x1 convs computed as matmuls: in NCHW over the flattened map (a batch of them a group, a strided slice
first at a stride), channels-last over every pixel of the batch; every other conv left alone."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.relax_graphs import build_module, op_names


def conv_module(shape, out_channels: int, kernel: int = 1, **attrs):
    from tvm import relax

    weight = np.random.default_rng(41).standard_normal(
        (out_channels, shape[1] // attrs.get("groups", 1), kernel, kernel)
    )
    return build_module(lambda bb, x: relax.op.nn.conv2d(x, relax.const(weight.astype("float32")), **attrs), shape)


def run(module, x: np.ndarray) -> np.ndarray:
    import tvm
    from tvm import relax

    return relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize(
    "shape, out_channels, attrs",
    [
        ((1, 32, 66, 66), 32, {}),
        ((2, 11, 9, 7), 24, {}),
        ((1, 44, 107, 107), 44, {"groups": 4, "strides": 2}),
        ((1, 24, 13, 10), 36, {"strides": (2, 3)}),
    ],
    ids=["one", "batch-2", "grouped-strided", "strided-odd"],
)
def test_a_pointwise_conv_in_nchw_is_the_weights_times_the_flattened_map(shape, out_channels, attrs):
    from modelbuild.compiler.passes import pointwise_matmul

    module = conv_module(shape, out_channels, **attrs)
    rewritten = pointwise_matmul.rewrite(module)
    sliced = ["relax.strided_slice"] if "strides" in attrs else []
    assert op_names(rewritten) == [*sliced, "relax.reshape", "relax.matmul", "relax.reshape"]  # weights as arrays
    x = np.random.default_rng(42).standard_normal(shape).astype("float32")
    np.testing.assert_allclose(run(rewritten, x), run(module, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "kernel, attrs",
    [(3, {"padding": 1}), (1, {"padding": 1})],
    ids=["3x3", "padded"],
)
def test_other_convs_stay_convs(kernel, attrs):
    from modelbuild.compiler.passes import pointwise_matmul

    module = conv_module((1, 8, 12, 12), 16, kernel, **attrs)
    assert op_names(pointwise_matmul.rewrite(module)) == ["relax.nn.conv2d"]


def channels_last_module(shape, out_channels: int, groups: int = 1, **attrs):
    from tvm import relax

    weight = np.random.default_rng(44).standard_normal((1, 1, shape[3] // groups, out_channels)).astype("float32")
    return build_module(
        lambda bb, x: relax.op.nn.conv2d(
            x, relax.const(weight), data_layout="NHWC", kernel_layout="HWIO", groups=groups, **attrs
        ),
        shape,
    )


@pytest.mark.parametrize(
    "shape, out_channels, attrs",
    [((1, 57, 57, 64), 40, {}), ((2, 33, 35, 11), 24, {}), ((1, 67, 65, 32), 48, {"strides": 2})],
    ids=["one", "batch-2", "strided"],
)
def test_a_channels_last_pointwise_conv_is_every_pixel_of_the_batch_times_the_weights(shape, out_channels, attrs):
    from modelbuild.compiler.passes import pointwise_matmul

    module = channels_last_module(shape, out_channels, **attrs)
    rewritten = pointwise_matmul.rewrite(module)
    sliced = ["relax.strided_slice"] if "strides" in attrs else []
    assert op_names(rewritten) == [*sliced, "relax.reshape", "relax.matmul", "relax.reshape"]  # weights as arrays
    batch, height, width, channels = shape
    stride = attrs.get("strides", 1)
    assert matmul_rows(rewritten) == [batch * -(-height // stride) * -(-width // stride), channels]
    x = np.random.default_rng(45).standard_normal(shape).astype("float32")
    np.testing.assert_allclose(run(rewritten, x), run(module, x), rtol=1e-4, atol=1e-4)


def matmul_rows(module) -> list[int]:
    """The shape of the first operand of main's matmul."""
    bindings = [b for block in module["main"].body.blocks for b in block.bindings]
    call = next(b.value for b in bindings if getattr(getattr(b.value, "op", None), "name", "") == "relax.matmul")
    return [int(d) for d in call.args[0].ty.shape]


def test_a_grouped_channels_last_pointwise_conv_stays_a_conv():
    from modelbuild.compiler.passes import pointwise_matmul

    module = channels_last_module((1, 64, 64, 32), 32, groups=4)
    assert op_names(pointwise_matmul.rewrite(module)) == ["relax.nn.conv2d"]


def test_in_a_converted_model_the_pointwise_conv_is_a_matmul_and_the_dense_one_a_conv():
    from tvm import relax

    from modelbuild.compiler.passes import channels_last, pointwise_matmul

    rng = np.random.default_rng(43)
    dense, pointwise = (relax.const(rng.standard_normal(s).astype("float32")) for s in ((64, 64, 3, 3), (32, 64, 1, 1)))
    module = build_module(
        lambda bb, x: relax.op.nn.conv2d(bb.emit(relax.op.nn.conv2d(x, dense, padding=1)), pointwise), (1, 64, 32, 32)
    )
    converted, used = channels_last.convert(module, "auto")  # the dense 3x3 conv converts the model
    assert used == channels_last.CONVERTED
    ops = op_names(pointwise_matmul.rewrite(converted))
    assert ops.count("relax.nn.conv2d") == 1 and ops.count("relax.matmul") == 1
