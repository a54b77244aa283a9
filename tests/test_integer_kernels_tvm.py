"""The legalisation of integer operators: quantize rounds as ONNX specifies, in vector code."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tvm


@pytest.mark.parametrize("schedule", [False, True], ids=["scalar", "vectorised"])
def test_quantize_rounds_halves_to_even_as_onnx_specifies(schedule):
    import tvm
    from tvm import relax

    from modelbuild.stages import lowering

    values = np.tile(np.array([0.5, 1.5, 2.5, -0.5, -1.5, 300.0], np.float32), 16)  # long enough to vectorise
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=values.shape, dtype="float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            q = bb.emit_output(relax.op.quantize(x, relax.const(1.0, "float32"), relax.const(0, "int8"),
                                                 axis=0, out_dtype="int8"))
        bb.emit_func_output(q)
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(bb.get(), target, fuse=True, layout=None, schedule=schedule)
        executable = tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))
    assert ("T.vectorized" in phases.fused.script()) == schedule
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(values)).numpy()
    assert got.tolist() == [0, 2, 2, 0, -2, 127] * 16  # half to even, then clipped to int8


def test_vectorised_quantize_is_vector_code_without_gathers():
    """tirx.nearbyint here compiled to one call per lane, which LLVM re-vectorised with gathers and
    scatters (4x slower); the assembly of an AVX-512 build shows which one the legalisation uses."""
    import tvm
    from tvm import relax

    from modelbuild.stages import lowering

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=(1024,), dtype="float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            q = bb.emit_output(relax.op.quantize(x, relax.const(0.1, "float32"), relax.const(0, "int8"),
                                                 axis=0, out_dtype="int8"))
        bb.emit_func_output(q)
    target = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(bb.get(), target, fuse=True, layout=None, schedule=True)
        executable = tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))
    assembly = "".join(m.inspect_source("asm") for m in executable.mod.imports)
    assert "vrndscaleps" in assembly  # rounding in vector registers
    assert "gather" not in assembly and "scatter" not in assembly


def test_quantize_with_a_constant_scale_per_channel_multiplies_by_reciprocals_made_at_compile_time():
    """Computed in the kernel, 1 / scale[c] was a division per channel and vector."""
    import tvm
    from tvm import relax

    from modelbuild.stages import lowering

    scales = np.array([0.1, 0.25, 0.3, 0.07], np.float32)
    values = np.random.default_rng(0).uniform(-20, 20, (1, 4, 2, 32)).astype(np.float32)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=values.shape, dtype="float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            q = bb.emit_output(relax.op.quantize(x, relax.const(scales, "float32"), relax.const(0, "int8"),
                                                 axis=1, out_dtype="int8"))
        bb.emit_func_output(q)
    target = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(bb.get(), target, fuse=True, layout=None, schedule=True)
        executable = tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))
    assembly = "".join(m.inspect_source("asm") for m in executable.mod.imports)
    assert "vdiv" not in assembly
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(values)).numpy()
    inverse = (np.float32(1) / scales).reshape(1, 4, 1, 1)  # what the kernel computed before, in float32
    assert np.array_equal(got, np.clip(np.rint(values * inverse), -128, 127).astype(np.int8))
