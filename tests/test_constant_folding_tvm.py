"""Data movement and dequantisation of constants in numpy: the same bits as TVM's FoldConstant, without
compiling it."""

from __future__ import annotations

import numpy as np

from tests.helpers.relax_graphs import build_module


def moved_constants(bb, x):
    """x plus a bias reshaped, a weight permuted, two int8 weights dequantized (per channel and per tensor),
    and a Clip bound tested for NaN then replaced, as ONNX's importer writes them; the last two read the values
    folded before them."""
    from tvm import relax

    rng = np.random.default_rng(31)
    per_channel = bb.emit(
        relax.op.dequantize(
            relax.const(rng.integers(-128, 128, (1, 8, 4, 4)).astype("int8")),
            relax.const(rng.uniform(1e-3, 1e-1, 8).astype("float32")),
            relax.const(rng.integers(-5, 5, 8).astype("int8")),
            axis=1,
        )
    )
    per_tensor = bb.emit(
        relax.op.dequantize(
            relax.const(rng.integers(0, 256, (1, 8, 4, 4)).astype("uint8")),
            relax.const(np.float32(0.0173)),
            relax.const(np.uint8(131)),
        )
    )
    x = bb.emit(relax.op.add(relax.op.multiply(x, per_channel), per_tensor))
    bias = bb.emit(relax.op.reshape(relax.const(rng.standard_normal(8).astype("float32")), (1, 8, 1, 1)))
    permuted = bb.emit(
        relax.op.permute_dims(relax.const(rng.standard_normal((4, 4, 8, 1)).astype("float32")), [3, 2, 0, 1])
    )
    bound = relax.const(np.array([np.nan, 6.0, -np.inf, 0.5], "float32"))
    nan = bb.emit(relax.op.isnan(bound))
    clipped = bb.emit(relax.op.where(nan, relax.const(np.float32(np.inf)), bound))
    top = bb.emit(relax.op.reshape(clipped, (1, 1, 1, 4)))
    return bb.emit(relax.op.minimum(relax.op.add(relax.op.add(x, bias), permuted), top))


def calls(module, op_names) -> list[str]:
    return [line for line in module.script().splitlines() if any(f"R.{name}(" in line for name in op_names)]


def run(module, x):
    import tvm
    from tvm import relax

    return relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def test_folded_data_movement_gives_the_bits_tvms_fold_computes():
    from modelbuild.compiler.passes import constant_folding

    module = build_module(moved_constants, (1, 8, 4, 4))
    folded = constant_folding.fold(module)
    folded_ops = ["reshape", "permute_dims", "isnan", "where", "dequantize"]
    assert len(calls(module, folded_ops)) == 7
    assert calls(folded, folded_ops) == []
    assert calls(folded, ["minimum"]) and calls(module, ["reshape"])  # the caller's module is left as it was
    x = np.random.default_rng(32).standard_normal((1, 8, 4, 4)).astype("float32")
    assert np.array_equal(run(folded, x), run(module, x))  # TVM folds the original at its compile


def test_a_constant_reshaped_to_a_symbolic_shape_is_left_to_tvm():
    import tvm
    from tvm import relax, tirx

    from modelbuild.compiler.passes import constant_folding

    bb = relax.BlockBuilder()
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType(shape=[n, 4], dtype="float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            ones = bb.emit(relax.op.reshape(relax.const(np.ones(8, "float32")), relax.ShapeExpr([n, 4])))
            out = bb.emit_output(relax.op.add(x, ones))
        bb.emit_func_output(out)
    module = bb.get()
    folded = constant_folding.fold(module)
    assert len(calls(folded, ["reshape"])) == 1
    tvm.ir.assert_structural_equal(folded, module)


def test_lowering_folds_the_models_constants_without_compiling_them(monkeypatch):
    """The ONNX hard-swish between two convs, channels-last: its weight transposes and Clip bounds are folded
    before legalisation, so FoldConstant compiles fewer kernels (each an LLVM build) than with them left."""
    import tvm

    from modelbuild.compiler import layer_names, lowering
    from modelbuild.compiler.passes import constant_folding
    from tests.helpers.onnx_models import onnx_hard_swish_between_convs

    module = layer_names.from_onnx(onnx_hard_swish_between_convs(), {"x": [1, 8, 10, 12]}, {"x": "float32"})
    build = tvm.get_global_func("tirx.build")
    compiled = []

    def counted(*args):
        compiled.append(1)
        return build(*args)

    def lowered():
        compiled.clear()
        target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
        tvm.register_global_func("tirx.build", counted, override=True)
        try:
            with target, tvm.transform.PassContext(opt_level=3):
                lowering.lower(module, target, fuse=True, layout="auto", schedule=True)
        finally:
            tvm.register_global_func("tirx.build", build, override=True)
        return len(compiled)

    with_fold = lowered()
    monkeypatch.setattr(constant_folding, "fold", lambda m: m)
    assert with_fold == 0 and lowered() >= 4  # two weight transposes, two NaN tests of the Clip's bounds, ...
