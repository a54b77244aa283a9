"""A float16 model on a CPU: computed in float32 inside, float16 at its edges, as it declares them."""

from __future__ import annotations

import numpy as np

from tests.helpers.relax_graphs import build_module

SHAPE = (1, 8, 12, 12)


def conv_model(dtype: str, *, two_outputs: bool = False):
    """conv (weights as constants of `dtype`) + bias + relu, then a softmax over channels; with `two_outputs`,
    the relu's output too, as a tuple."""
    from tvm import relax

    rng = np.random.default_rng(40)
    weight = (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(dtype)
    bias = rng.standard_normal((1, 16, 1, 1)).astype(dtype)

    def body(bb, x):
        conv = bb.emit(relax.op.nn.conv2d(x, relax.const(weight), padding=1))
        relu = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(conv, relax.const(bias)))))
        scores = bb.emit(relax.op.nn.softmax(relu, axis=1))
        return bb.emit(relax.Tuple([scores, relu])) if two_outputs else scores

    return build_module(body, SHAPE, dtype), weight.astype("float32"), bias.astype("float32")


def numpy_model(x, weight, bias):
    """The model in float64 from the same float16 values: what float32 inside comes close to."""
    x = x.astype("float64")
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, 16, 12, 12))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", padded[:, :, i : i + 12, j : j + 12], weight[:, :, i, j])
    relu = np.maximum(out + bias, 0)
    e = np.exp(relu - relu.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True), relu


def compiled(module):
    """The module through modelbuild's lowering for this CPU: (its kernels' parameter dtypes, its main)."""
    import tvm
    from tvm import relax, tirx

    from modelbuild.compiler import lowering

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, target, fuse=True, layout="auto", schedule=True)
        executable = tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))
    dtypes = {
        gv.name_hint: {str(p.dtype) for p in f.params}
        for gv, f in phases.fused.functions.items()
        if isinstance(f, tirx.PrimFunc)
    }
    return dtypes, relax.VirtualMachine(executable, tvm.cpu())["main"]


def test_a_float16_model_computes_in_float32_and_takes_and_returns_float16():
    """x86 has no float16 arithmetic: computed in float16, the bundled classifier ran 6.95 ms a call, in
    float32 1.09 (onnxruntime 1.26)."""
    import tvm

    module, weight, bias = conv_model("float16")
    dtypes, run = compiled(module)
    half = {name for name, kinds in dtypes.items() if "float16" in kinds}
    # only the casts at the edges see float16: the input's, fused into the first kernel or alone, and the output's
    assert half and all(len(kinds) == 2 for name, kinds in dtypes.items() if name in half), dtypes
    assert len(half) <= 2 and any("conv2d" in name for name in dtypes if name not in half)
    x = np.random.default_rng(41).standard_normal(SHAPE).astype("float16")
    out = run(tvm.runtime.tensor(x)).numpy()
    assert out.dtype == np.float16 and out.shape == (1, 16, 12, 12)
    np.testing.assert_allclose(out.astype("float64"), numpy_model(x, weight, bias)[0], rtol=2e-3, atol=1e-3)


def test_each_float16_output_of_a_tuple_is_returned_as_float16():
    import tvm

    module, weight, bias = conv_model("float16", two_outputs=True)
    _, run = compiled(module)
    x = np.random.default_rng(42).standard_normal(SHAPE).astype("float16")
    scores, relu = run(tvm.runtime.tensor(x))
    assert scores.numpy().dtype == np.float16 and relu.numpy().dtype == np.float16
    expected_scores, expected_relu = numpy_model(x, weight, bias)
    np.testing.assert_allclose(relu.numpy().astype("float64"), expected_relu, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(scores.numpy().astype("float64"), expected_scores, rtol=2e-3, atol=1e-3)


def test_a_float32_model_is_left_as_it_is():
    from modelbuild.compiler.passes import float16_compute

    module, _, _ = conv_model("float32")
    assert float16_compute.widen(module) is module


def test_a_float16_function_computes_in_float32_and_returns_float16():
    """Before -> Expected: inputs widened once, every operator in float32, the result narrowed back."""
    import tvm
    from tvm.script import ir as I
    from tvm.script import relax as R

    from modelbuild.compiler.passes import float16_compute

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 8), "float16"), y: R.Tensor((1, 8), "float16")) -> R.Tensor((1, 8), "float16"):
            with R.dataflow():
                a = R.add(x, y)
                b = R.nn.relu(a)
                R.output(b)
            return b

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 8), "float16"), y: R.Tensor((1, 8), "float16")) -> R.Tensor((1, 8), "float16"):
            with R.dataflow():
                x32 = R.astype(x, "float32")
                y32 = R.astype(y, "float32")
                a = R.add(x32, y32)
                b = R.nn.relu(a)
                R.output(b)
            narrowed = R.astype(b, "float16")
            return narrowed

    tvm.ir.assert_structural_equal(float16_compute.transform()(Before), Expected)
