"""The integer rewrite of quantized models: int8 x int8 -> int32 kernels that match onnxruntime's QDQ model."""

from __future__ import annotations

import numpy as np
import pytest

from modelbuild.stages.reference import session_options
from tests.helpers.onnx_models import (
    conv_then_dense,
    conv_then_upsample,
    dynamically_quantized,
    quantized_qdq,
    two_conv1ds,
    two_convs,
)
from tests.helpers.relax_graphs import op_names

SHAPE = [1, 3, 16, 16]


def compile_qdq(path, *, integer: bool, shape=SHAPE, op: str = "conv2d"):
    import onnx
    import tvm
    from tvm import relax, tirx

    from modelbuild.compiler import integer_ops, lowering
    from modelbuild.stages import onnx_import

    module = onnx_import.to_relax(onnx.load(str(path)), {"x": {"shape": shape, "dtype": "float32"}})
    if integer:
        module = integer_ops.rewrite(module)
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, target, fuse=True, layout=None, schedule=True)
        executable = tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))
    kernels = [f for gv, f in phases.fused.functions.items() if isinstance(f, tirx.PrimFunc) and op in gv.name_hint]
    return relax.VirtualMachine(executable, tvm.cpu())["main"], kernels


def output_step(qdq) -> float:
    """The scale of the QuantizeLinear that makes the model's output y: one quantization step of it."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(qdq))
    output = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.output[0].startswith("y"))
    return float(next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == output.input[1]))


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
    session = ort.InferenceSession(str(qdq), session_options(qdq), providers=["CPUExecutionProvider"])
    for seed in range(3):
        x = np.random.default_rng(100 + seed).standard_normal(SHAPE).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        got = run(tvm.runtime.tensor(x)).numpy()
        scale = np.abs(want).max() / 127  # one quantization step of the output
        assert np.abs(got - want).max() <= scale + 1e-6


def test_affine_uint8_activations_stay_8_bit_in_the_kernels_and_match_onnxruntime_qdq(tmp_path):
    """onnxruntime's default activations: uint8 with a zero point. The kernels read the raw uint8 data (padded
    with the zero point) and subtract z * sum(w), rather than widening the data to int32."""
    import onnx
    import onnxruntime as ort
    import tvm

    qdq = quantized_qdq(
        two_convs(tmp_path / "net.onnx", channels=8),
        tmp_path / "net.qdq.onnx",
        SHAPE,
        activations="QUInt8",
        symmetric=False,
    )
    zeros = [
        int(onnx.numpy_helper.to_array(t))
        for t in onnx.load(str(qdq)).graph.initializer
        if t.name.endswith("zero_point") and t.data_type == onnx.TensorProto.UINT8
    ]
    assert zeros[0] not in (0, 128), zeros  # the input really is affine (after the relu, z = 0)
    run, convs = compile_qdq(qdq, integer=True)
    assert len(convs) == 2
    for conv in convs:
        assert [str(p.dtype) for p in conv.params][:2] == ["uint8", "int8"]
    session = ort.InferenceSession(str(qdq), session_options(qdq), providers=["CPUExecutionProvider"])
    step = output_step(qdq)
    for seed in range(3):
        x = np.random.default_rng(200 + seed).standard_normal(SHAPE).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        got = run(tvm.runtime.tensor(x)).numpy()
        # one quantization step of the output: integer sums and onnxruntime's float conv may round a tie apart
        # (the step was estimated from the sample's range, which undershot it once onnxruntime ran unfused)
        assert np.abs(got - want).max() <= 1.001 * step


def test_a_conv_with_same_padding_computes_on_int8_and_matches_onnxruntime_qdq(tmp_path):
    """TVM imports SAME padding as a pad kernel before the conv, which hid the dequantize from the integer
    rewrite: the v6 recogniser's 2x2 stem convs stayed float in its int8 build."""
    import onnxruntime as ort
    import tvm

    qdq = quantized_qdq(two_convs(tmp_path / "net.onnx", channels=8, same_upper=True), tmp_path / "net.qdq.onnx", SHAPE)
    run, convs = compile_qdq(qdq, integer=True)
    assert len(convs) == 2 and all([str(p.dtype) for p in conv.params][:2] == ["int8", "int8"] for conv in convs)
    session = ort.InferenceSession(str(qdq), session_options(qdq), providers=["CPUExecutionProvider"])
    for seed in range(3):
        x = np.random.default_rng(400 + seed).standard_normal(SHAPE).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        assert np.abs(run(tvm.runtime.tensor(x)).numpy() - want).max() <= np.abs(want).max() / 127 + 1e-6


def test_a_quantized_conv1d_computes_on_int8_as_a_conv2d_of_one_row_and_matches_onnxruntime_qdq(tmp_path):
    """onnxruntime quantizes a speech model's 1-D convs as any conv, and TVM ran them in float: the generated
    x-vector TDNN's int8 build took as long as its float one (1.00x)."""
    import onnxruntime as ort
    import tvm

    shape = [1, 8, 40]
    qdq = quantized_qdq(two_conv1ds(tmp_path / "net.onnx"), tmp_path / "net.qdq.onnx", shape)
    run, convs = compile_qdq(qdq, integer=True, shape=shape)
    assert len(convs) == 2 and all([str(p.dtype) for p in conv.params][:2] == ["int8", "int8"] for conv in convs)
    session = ort.InferenceSession(str(qdq), session_options(qdq), providers=["CPUExecutionProvider"])
    for seed in range(3):
        x = np.random.default_rng(500 + seed).standard_normal(shape).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        got = run(tvm.runtime.tensor(x)).numpy()
        assert got.shape == want.shape == (1, 16, 20)
        assert np.abs(got - want).max() <= np.abs(want).max() / 127 + 1e-6


def test_a_gemm_with_its_weight_transposed_computes_on_int8_and_matches_onnxruntime_qdq(tmp_path):
    """PyTorch's Linear exports as Gemm(transB = 1), which imports as matmul(x, permute_dims(dequantize(w))):
    the recogniser's [40, 120] x [120, 18710] head stayed float in its int8 build (1.7 ms of 9.8)."""
    import onnxruntime as ort
    import tvm

    shape = [1, 3, 8, 8]
    qdq = quantized_qdq(conv_then_dense(tmp_path / "net.onnx", gemm=True), tmp_path / "net.qdq.onnx", shape)
    run, matmuls = compile_qdq(qdq, integer=True, shape=shape, op="matmul")
    assert len(matmuls) == 1 and [str(p.dtype) for p in matmuls[0].params][:2] == ["int8", "int8"]
    session = ort.InferenceSession(str(qdq), session_options(qdq), providers=["CPUExecutionProvider"])
    for seed in range(3):
        x = np.random.default_rng(300 + seed).standard_normal(shape).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        got = run(tvm.runtime.tensor(x)).numpy()
        assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max() + 1e-6  # y is float: only rounding apart


def test_a_dynamically_quantized_matmul_reads_its_uint8_data_and_matches_onnxruntime(tmp_path):
    """onnxruntime's dynamic quantization (Hugging Face's model_quantized.onnx) quantizes each activation at
    run time, its zero point computed by the model: the matmul reads that uint8 data as it is and subtracts
    z * sum(w), where it computed in float (a dynamically quantized BERT encoder: 1.7x onnxruntime's time)."""
    import onnxruntime as ort
    import tvm

    shape = [1, 3, 8, 8]
    model = dynamically_quantized(conv_then_dense(tmp_path / "net.onnx"), tmp_path / "net.dynamic.onnx")
    run, matmuls = compile_qdq(model, integer=True, shape=shape, op="matmul")
    matrices = [str(p.dtype) for p in matmuls[0].params[:-1] if len(p.shape) == 2]  # data and weights
    assert len(matmuls) == 1 and matrices == ["uint8", "int8"]
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    for seed in range(3):
        x = np.random.default_rng(700 + seed).standard_normal(shape).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        got = run(tvm.runtime.tensor(x)).numpy()
        assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()  # the same int32 sums, the same rescale


@pytest.mark.parametrize("kernel, stride, pad, rewritten", [(2, 2, 0, True), (4, 2, 1, False)])
def test_a_transposed_conv_computes_on_int8_and_matches_onnxruntime_qdq(tmp_path, kernel, stride, pad, rewritten):
    """onnxruntime quantizes a ConvTranspose's weight per channel along axis 1 (its output channels). The DB
    detectors' 2x2 stride-2 upsampling head stayed float in their int8 builds; it now computes as an int8 1x1
    conv and a depth-to-space (conv_transpose.py), and any other transposed conv as TVM's, on int8 too."""
    import onnxruntime as ort
    import tvm

    shape = [1, 3, 8, 8]
    model = conv_then_upsample(tmp_path / "net.onnx", kernel=kernel, stride=stride, pad=pad)
    qdq = quantized_qdq(model, tmp_path / "net.qdq.onnx", shape)
    run, convs = compile_qdq(qdq, integer=True, shape=shape)
    assert len(convs) == 2 and all([str(p.dtype) for p in conv.params][:2] == ["int8", "int8"] for conv in convs)
    # TVM's own transposed conv flips its kernel in a block of that name
    assert any('"kernel_transform"' in conv.script() for conv in convs) != rewritten
    session = ort.InferenceSession(str(qdq), session_options(qdq), providers=["CPUExecutionProvider"])
    step = output_step(qdq)
    for seed in range(3):
        x = np.random.default_rng(500 + seed).standard_normal(shape).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        assert np.abs(run(tvm.runtime.tensor(x)).numpy() - want).max() <= 1.001 * step


def test_without_the_rewrite_the_same_model_computes_in_float(tmp_path):
    qdq = quantized_qdq(two_convs(tmp_path / "net.onnx", channels=8), tmp_path / "net.qdq.onnx", SHAPE)
    _, convs = compile_qdq(qdq, integer=False)
    assert all(str(p.dtype) == "float32" for conv in convs for p in conv.params)


def rescaled_quantize(multiplier: np.ndarray, divisor: float = 6.0):
    """x / divisor * multiplier, quantized per tensor along axis 1 (hard-swish's / 6 and smoothing's
    per-channel multiply before the next quantize, as in the classifier)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=[1, 4, 2, 16], dtype="float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            divided = bb.emit(relax.op.divide(x, relax.const(divisor, "float32")))
            rescaled = bb.emit(relax.op.multiply(divided, relax.const(multiplier.astype(np.float32), "float32")))
            out = bb.emit_output(
                relax.op.quantize(
                    rescaled, relax.const(0.05, "float32"), relax.const(0, "int8"), axis=1, out_dtype="int8"
                )
            )
        bb.emit_func_output(out)
    return bb.get()


def run_module(module, x):
    import tvm
    from tvm import relax

    executable = tvm.compile(module, target=tvm.target.Target({"kind": "llvm"}))
    return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def test_constant_rescales_before_a_quantize_fold_into_its_scale():
    from tvm import relax

    from modelbuild.compiler.integer_ops import constant_value, fold_into_quantize

    multiplier = np.array([0.5, 2.0, 1.25, 3.0]).reshape(1, 4, 1, 1)
    module = rescaled_quantize(multiplier)
    folded = relax.transform.DeadCodeElimination()(fold_into_quantize(module))
    assert op_names(folded) == ["relax.quantize"]
    quantize = folded["main"].body.blocks[0].bindings[-1].value
    np.testing.assert_allclose(constant_value(quantize.args[1]), 0.05 * 6.0 / multiplier.ravel(), rtol=1e-6)
    x = np.random.default_rng(0).uniform(-30, 30, (1, 4, 2, 16)).astype(np.float32)
    want, got = run_module(module, x).astype(int), run_module(folded, x).astype(int)
    assert np.abs(got - want).max() <= 1 and np.mean(got != want) < 0.02  # an ulp moves only exact halves


@pytest.mark.parametrize(
    "multiplier",
    [
        np.array([1.0, -2.0, 1.0, 1.0]).reshape(1, 4, 1, 1),  # a sign flip
        np.array([1.0, 2.0]).reshape(1, 1, 2, 1),
    ],  # varies along rows
    ids=["negative", "other axis"],
)
def test_rescales_that_do_not_fold_stay(multiplier):
    from modelbuild.compiler.integer_ops import fold_into_quantize

    folded = fold_into_quantize(rescaled_quantize(multiplier))
    assert op_names(folded) == ["relax.divide", "relax.multiply", "relax.quantize"]


def squeeze_excite_tail(extra_use: bool = False):
    """Hard-swish's / 6 whose output is pooled (then rescaled and quantized) and gated (then quantized), as
    before the classifier's squeeze-and-excite blocks; with `extra_use`, also added to itself."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=[1, 4, 2, 16], dtype="float32"))
    gate = relax.Var("gate", relax.TensorType(shape=[1, 4, 1, 1], dtype="float32"))

    def quantize(value, scale):
        return relax.op.quantize(value, relax.const(scale, "float32"), relax.const(0, "int8"), axis=1, out_dtype="int8")

    with bb.function("main", [x, gate]):
        with bb.dataflow():
            swished = bb.emit(relax.op.divide(x, relax.const(6.0, "float32")))
            pooled = bb.emit(relax.op.mean(swished, axis=[2, 3], keepdims=True))
            squeezed = bb.emit(quantize(bb.emit(relax.op.multiply(pooled, relax.const(2.0, "float32"))), 0.02))
            gated = bb.emit(quantize(bb.emit(relax.op.multiply(swished, gate)), 0.05))
            outputs = [squeezed, gated]
            if extra_use:
                outputs.append(bb.emit(relax.op.add(swished, swished)))
            out = bb.emit_output(relax.Tuple(outputs))
        bb.emit_func_output(out)
    return bb.get()


def test_divisions_only_pooled_and_gated_move_into_the_quantize_scales():
    import tvm
    from tvm import relax

    from modelbuild.compiler.integer_ops import defer_divisions, fold_into_quantize

    module = squeeze_excite_tail()
    rewritten = relax.transform.DeadCodeElimination()(fold_into_quantize(defer_divisions(module)))
    assert "relax.divide" not in op_names(rewritten)
    rng = np.random.default_rng(1)
    x = rng.uniform(-20, 20, (1, 4, 2, 16)).astype(np.float32)
    gate = rng.uniform(0, 1, (1, 4, 1, 1)).astype(np.float32)
    results = []
    for m in (module, rewritten):
        run = relax.VirtualMachine(tvm.compile(m, target=tvm.target.Target({"kind": "llvm"})), tvm.cpu())["main"]
        results.append([t.numpy().astype(int) for t in run(tvm.runtime.tensor(x), tvm.runtime.tensor(gate))])
    for want, got in zip(*results):
        assert np.abs(got - want).max() <= 1 and np.mean(got != want) < 0.05


def test_a_division_with_another_use_stays():
    from modelbuild.compiler.integer_ops import defer_divisions

    assert op_names(defer_divisions(squeeze_excite_tail(extra_use=True))).count("relax.divide") == 1


def test_int16_activations_run_as_two_8_bit_convs_and_match_onnxruntime_qdq(tmp_path):
    """A16W8: int16 data split into its high (int8) and low (uint8) bytes, each an 8-bit conv on the same int8
    weights, so no kernel needs an int16 form."""
    import onnxruntime as ort
    import tvm

    qdq = quantized_qdq(
        two_convs(tmp_path / "net.onnx", channels=8), tmp_path / "net.qdq.onnx", SHAPE, activations="QInt16"
    )
    run, convs = compile_qdq(qdq, integer=True)
    assert sorted(tuple(str(p.dtype) for p in conv.params[:2]) for conv in convs) == [
        ("int8", "int8"),
        ("int8", "int8"),
        ("uint8", "int8"),
        ("uint8", "int8"),
    ]
    step = output_step(qdq)
    session = ort.InferenceSession(str(qdq), session_options(qdq), providers=["CPUExecutionProvider"])
    for seed in range(3):
        x = np.random.default_rng(100 + seed).standard_normal(SHAPE).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        got = run(tvm.runtime.tensor(x)).numpy()
        assert np.abs(got - want).max() <= 1.001 * step  # one int16 step of the output (as float32 values near 50)
