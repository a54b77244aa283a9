"""A float GEMV by constant weights, on weights packed so each 16 output columns read theirs in order: built
with the real TVM and checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest


def step(rows: int, k: int, n: int, seed: int = 0):
    """x [rows, k] @ W [k, n] + b, as an unrolled recurrent layer computes a step's gates: the fused kernel's
    script and the library's main, W and b constants."""
    import tvm
    from tvm import relax

    from tests.helpers.relax_graphs import scheduled_kernel

    rng = np.random.default_rng(seed)
    weight, bias = rng.standard_normal((k, n)).astype("float32"), rng.standard_normal(n).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=(rows, k), dtype="float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.add(relax.op.matmul(x, relax.const(weight)), relax.const(bias)))
        bb.emit_func_output(out)
    script, main = scheduled_kernel(bb.get(), "matmul", schedule=True)
    data = rng.standard_normal((rows, k)).astype("float32")
    return script, main(tvm.runtime.tensor(data)).numpy(), data @ weight + bias


def test_a_gemv_reads_its_weights_packed_and_computes_the_matmul():
    script, got, want = step(1, 512, 2048)
    assert 'T.Buffer((T.int64(128), T.int64(512), T.int64(16)), "float32")' in script
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows, n", [(2, 64), (1, 40)], ids=["two-rows", "columns-not-whole-runs"])
def test_other_matmuls_keep_their_weights_as_they_are(rows, n):
    script, got, want = step(rows, 32, n)
    assert 'T.int64(32), T.int64(16)), "float32")' not in script and "T.Buffer((T.int64(32), T.int64(" in script
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_gemv_by_a_gemms_transposed_weights_is_packed_too():
    """onnx's Gemm(transB = 1), how PyTorch's Linear exports, imports as matmul(x, permute_dims(w)); folded, the
    weights are a variable bound to a constant, which the packed kernel did not take (openWakeWord's detector)."""
    import tvm
    from tvm import relax

    from tests.helpers.relax_graphs import scheduled_kernel

    rng = np.random.default_rng(3)
    weight, data = rng.standard_normal((64, 512)).astype("float32"), rng.standard_normal((1, 512)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=(1, 512), dtype="float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            transposed = bb.emit(relax.op.permute_dims(relax.const(weight), [1, 0]))
            out = bb.emit_output(relax.op.matmul(x, transposed))
        bb.emit_func_output(out)
    script, main = scheduled_kernel(bb.get(), "matmul", schedule=True)
    assert 'T.Buffer((T.int64(4), T.int64(512), T.int64(16)), "float32")' in script
    np.testing.assert_allclose(main(tvm.runtime.tensor(data)).numpy(), data @ weight.T, rtol=1e-4, atol=1e-4)
