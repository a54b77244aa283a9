"""The integer rewrite of quantized models: int8 x int8 -> int32 kernels that match onnxruntime's QDQ model."""

from __future__ import annotations

import numpy as np
import pytest

from tests.onnx_models import quantized_qdq, two_convs

pytestmark = pytest.mark.tvm

SHAPE = [1, 3, 16, 16]


def compile_qdq(path, *, integer: bool):
    import onnx
    import tvm
    from tvm import relax, tirx
    from tvm.relax.frontend import onnx as relax_onnx

    from modelbuild.stages import integer_ops, lowering

    module = relax_onnx.from_onnx(onnx.load(str(path)), shape_dict={"x": SHAPE}, keep_params_in_input=False)
    if integer:
        module = integer_ops.rewrite(module)
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, target, fuse=True, layout=None, schedule=True)
        executable = tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))
    convs = [f for gv, f in phases.fused.functions.items() if isinstance(f, tirx.PrimFunc) and "conv2d" in gv.name_hint]
    return relax.VirtualMachine(executable, tvm.cpu())["main"], convs


def test_every_quantized_conv_computes_on_int8_and_matches_onnxruntime_qdq(tmp_path):
    import onnxruntime as ort
    import tvm

    qdq = quantized_qdq(two_convs(tmp_path / "net.onnx", channels=8), tmp_path / "net.qdq.onnx", SHAPE)
    run, convs = compile_qdq(qdq, integer=True)
    assert len(convs) == 2
    for conv in convs:  # the kernels read 8-bit data and weights, and accumulate in int32
        dtypes = [str(p.dtype) for p in conv.params]
        assert dtypes[:2] == ["int8", "int8"], dtypes
        assert '"int32"' in conv.script()
    session = ort.InferenceSession(str(qdq), providers=["CPUExecutionProvider"])
    for seed in range(3):
        x = np.random.default_rng(100 + seed).standard_normal(SHAPE).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        got = run(tvm.runtime.tensor(x)).numpy()
        scale = np.abs(want).max() / 127  # one quantization step of the output
        assert np.abs(got - want).max() <= scale + 1e-6


def test_without_the_rewrite_the_same_model_computes_in_float(tmp_path):
    qdq = quantized_qdq(two_convs(tmp_path / "net.onnx", channels=8), tmp_path / "net.qdq.onnx", SHAPE)
    _, convs = compile_qdq(qdq, integer=False)
    assert all(str(p.dtype) == "float32" for conv in convs for p in conv.params)
