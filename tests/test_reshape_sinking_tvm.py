"""Element-wise steps after a matmul's reshape run on the matmul's rows, the reshape after them: the same
numbers, and FuseOps fuses the steps into the matmul."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.relax_graphs import kernel_shapes, op_names

PIXELS, CHANNELS = (1, 6, 5, 16), 16  # a [30, 16] matmul reshaped to an NHWC map
ROWS = [30, CHANNELS]


def module(body, extra: list[list[int]] = ()):
    """main(rows, *extra) returning body(bb, reshaped rows, *extra)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    rows = relax.Var("rows", relax.TensorType(ROWS, "float32"))
    xs = [relax.Var(f"x{i}", relax.TensorType(shape, "float32")) for i, shape in enumerate(extra)]
    with bb.function("main", [rows, *xs]):
        with bb.dataflow():
            out = bb.emit_output(body(bb, bb.emit(relax.op.reshape(rows, PIXELS)), *xs))
        bb.emit_func_output(out)
    return bb.get()


def sunk_and_checked(mod, extra: list[list[int]] = ()):
    import tvm
    from tvm import relax

    from modelbuild.compiler.passes import reshape_sinking

    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in [ROWS, *extra]]
    sunk = reshape_sinking.sink(mod)

    def run(m):
        executable = tvm.compile(m, target=tvm.target.Target("llvm"))
        return relax.VirtualMachine(executable, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in arrays]).numpy()

    np.testing.assert_array_equal(run(sunk), run(mod))
    return sunk


def test_a_bias_and_an_activation_run_before_the_reshape():
    from tvm import relax

    bias = relax.const(np.arange(CHANNELS, dtype=np.float32).reshape(1, 1, 1, CHANNELS))
    mod = module(lambda bb, x: relax.op.nn.relu(bb.emit(relax.op.add(x, bias))))
    sunk = sunk_and_checked(mod)
    assert op_names(sunk) == ["relax.add", "relax.nn.relu", "relax.reshape"]  # the bias reshaped as an array


def test_a_residual_of_the_maps_shape_is_read_through_a_reshape_of_its_own():
    from tvm import relax

    mod = module(lambda bb, x, skip: relax.op.add(skip, x), [list(PIXELS)])
    ops = op_names(sunk_and_checked(mod, [list(PIXELS)]))
    assert ops == ["relax.reshape", "relax.add", "relax.reshape"]


@pytest.mark.parametrize(
    "case",
    ["varies-along-rows", "reshape-read-twice"],
)
def test_a_step_that_would_read_other_elements_or_a_reshape_read_elsewhere_stays(case):
    from tvm import relax

    if case == "varies-along-rows":
        per_row = relax.const(np.ones((1, 6, 1, 1), dtype=np.float32))
        mod = module(lambda bb, x: relax.op.multiply(x, per_row))
    else:
        mod = module(lambda bb, x: relax.op.add(bb.emit(relax.op.sigmoid(x)), x))
    assert op_names(sunk_and_checked(mod)) == op_names(mod)


def test_a_channels_last_pointwise_conv_is_one_kernel_with_its_bias_and_activation():
    """The conv becomes a matmul (pointwise_matmul.py); its bias and ReLU fuse into that matmul's kernel, where
    behind the reshape they were a kernel of their own."""
    from tvm import relax

    from tests.helpers.relax_graphs import build_module

    rng = np.random.default_rng(1)
    dense = relax.const(rng.standard_normal((32, 32, 3, 3)).astype("float32"))
    pointwise = relax.const(rng.standard_normal((48, 32, 1, 1)).astype("float32"))
    bias = relax.const(rng.standard_normal((1, 48, 1, 1)).astype("float32"))

    def body(bb, x):
        features = bb.emit(relax.op.nn.conv2d(x, dense, padding=1))  # converts the model to channels-last
        return relax.op.nn.relu(bb.emit(relax.op.add(bb.emit(relax.op.nn.conv2d(features, pointwise)), bias)))

    kernels = kernel_shapes(build_module(body, (1, 32, 20, 20)), "auto")
    fused = [name for name in kernels if "matmul" in name]
    assert len(fused) == 1 and "add" in fused[0] and "relu" in fused[0], list(kernels)
