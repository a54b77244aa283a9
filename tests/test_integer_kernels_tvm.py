"""The legalisation of integer operators: quantize rounds as ONNX specifies, in vector code."""

from __future__ import annotations

import numpy as np
import pytest

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
            q = bb.emit_output(
                relax.op.quantize(x, relax.const(scale, "float32"), relax.const(0, "int8"), axis=axis, out_dtype="int8")
            )
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


@pytest.mark.parametrize(
    "shape, wshape, groups, strides, dtype",
    [
        ((1, 64, 15, 15), (64, 8, 3, 3), 8, (2, 2), "int8"),  # ResNeXt's 3x3: groups of 8 channels, stride 2
        ((1, 32, 9, 13), (32, 4, 3, 3), 8, (2, 2), "uint8"),  # groups of 4 outputs: merged 4 at a time
        ((1, 24, 7, 7), (36, 6, 3, 3), 4, (1, 2), "int8"),  # 9 outputs a group: no merge makes whole vectors
    ],
)
def test_a_strided_grouped_int8_conv_is_summed_channels_last_and_exact(shape, wshape, groups, strides, dtype):
    import tvm
    from tvm import relax

    from tests.helpers.int8_convs import build, conv_module, reference

    rng = np.random.default_rng(0)
    low, high = (0, 256) if dtype == "uint8" else (-128, 128)
    x = rng.integers(low, high, shape).astype(dtype)
    weight = rng.integers(-128, 128, wshape).astype(np.int8)
    padding = (1, 1, 1, 1)
    module = conv_module(shape, weight, dtype, strides=strides, padding=padding, dilation=(1, 1), groups=groups)
    executable, phases = build(module, {"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    (script,) = [f.script() for gv, f in phases.fused.functions.items() if "conv2d_int8" in gv.name_hint]
    assert "group_conv2d_nhwc" in script and "exact_sum" in script  # summed channels-last, written NCHW
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    per_in, per_out = shape[1] // groups, wshape[0] // groups
    want = np.concatenate(
        [
            reference(
                x[:, g * per_in : (g + 1) * per_in],
                weight[g * per_out : (g + 1) * per_out],
                strides=strides,
                padding=padding,
                dilation=(1, 1),
            )
            for g in range(groups)
        ],
        1,
    )
    assert np.array_equal(got, want)


def test_a_grouped_int8_conv_at_stride_one_keeps_its_rows_in_vectors():
    from tests.helpers.int8_convs import build, conv_module

    weight = np.ones((64, 8, 3, 3), np.int8)
    module = conv_module(
        (1, 64, 16, 16), weight, "int8", strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=8
    )
    _, phases = build(module, {"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    (script,) = [f.script() for gv, f in phases.fused.functions.items() if "conv2d_int8" in gv.name_hint]
    assert "group_conv2d_nchw" in script and "group_conv2d_nhwc" not in script
