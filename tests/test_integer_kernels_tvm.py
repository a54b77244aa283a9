"""The legalisation of integer operators: quantize rounds as ONNX specifies, in vector code."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tvm


AVX512 = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}


def built_quantize(shape, scale, axis: int, target_table, *, schedule: bool = True):
    """A module that only quantizes a float tensor of `shape`, lowered and built: (executable, phases)."""
    import tvm
    from tvm import relax

    from modelbuild.compiler import lowering

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=shape, dtype="float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            q = bb.emit_output(relax.op.quantize(x, relax.const(scale, "float32"), relax.const(0, "int8"),
                                                 axis=axis, out_dtype="int8"))
        bb.emit_func_output(q)
    target = tvm.target.Target(target_table)
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(bb.get(), target, fuse=True, layout=None, schedule=schedule)
        executable = tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))
    return executable, phases


def assembly(executable) -> str:
    return "".join(m.inspect_source("asm") for m in executable.mod.imports)


@pytest.mark.parametrize("schedule", [False, True], ids=["scalar", "vectorised"])
def test_quantize_rounds_halves_to_even_as_onnx_specifies(schedule):
    import tvm
    from tvm import relax

    values = np.tile(np.array([0.5, 1.5, 2.5, -0.5, -1.5, 300.0], np.float32), 16)  # long enough to vectorise
    executable, phases = built_quantize(values.shape, 1.0, 0, {"kind": "llvm", "num-cores": 2}, schedule=schedule)
    assert ("T.vectorized" in phases.fused.script()) == schedule
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(values)).numpy()
    assert got.tolist() == [0, 2, 2, 0, -2, 127] * 16  # half to even, then clipped to int8


def test_vectorised_quantize_is_vector_code_without_gathers():
    """tirx.nearbyint here compiled to one call per lane, which LLVM re-vectorised with gathers and
    scatters (4x slower); the assembly of an AVX-512 build shows which one the legalisation uses."""
    executable, _ = built_quantize((1024,), 0.1, 0, AVX512)
    code = assembly(executable)
    assert "vrndscaleps" in code  # rounding in vector registers
    assert "gather" not in code and "scatter" not in code


def test_quantize_with_a_constant_scale_per_channel_multiplies_by_reciprocals_made_at_compile_time():
    """Computed in the kernel, 1 / scale[c] was a division per channel and vector."""
    import tvm
    from tvm import relax

    scales = np.array([0.1, 0.25, 0.3, 0.07], np.float32)
    values = np.random.default_rng(0).uniform(-20, 20, (1, 4, 2, 32)).astype(np.float32)
    executable, _ = built_quantize(values.shape, scales, 1, AVX512)
    assert "vdiv" not in assembly(executable)
    # the values from a build any x86-64 host runs (the AVX-512 one died of an illegal instruction on Zen 3)
    executable, _ = built_quantize(values.shape, scales, 1, {"kind": "llvm", "num-cores": 2})
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(values)).numpy()
    inverse = (np.float32(1) / scales).reshape(1, 4, 1, 1)  # what the kernel computed before, in float32
    assert np.array_equal(got, np.clip(np.rint(values * inverse), -128, 127).astype(np.int8))
