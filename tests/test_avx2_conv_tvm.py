"""int8 conv2d and matmul on AVX2 without VNNI (vpmaddwd on int16 pairs): every geometry the packed form
handles, tensorised and bit-exact against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tests import test_packed_matmul_tvm as matmuls
from tests.helpers.int8_convs import AVX2_CPU, GEOMETRIES, GEOMETRY_IDS, build, case, host_has_avx2, output_width


def avx2_kernels(phases) -> list[str]:
    from modelbuild.compiler.kernels import avx2_conv

    scripts = [f.script() for f in phases.fused.functions.values() if hasattr(f, "params")]
    return [s for s in scripts if any(f'sblock("{block}_update' in s for block in avx2_conv.BLOCKS)]


def run(executable, x):
    import tvm
    from tvm import relax

    return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def assembly(executable) -> str:
    return "".join(m.inspect_source("asm") for m in executable.mod.imports)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=GEOMETRY_IDS)
def test_an_int8_conv_on_avx2_is_vpmaddwd_and_bit_exact(geometry):
    from modelbuild.compiler.kernels import avx2_conv

    x, _, module, want = case(geometry)
    executable, phases = build(module, AVX2_CPU)
    (kernel,) = avx2_kernels(phases)
    # 8 lanes round 29 up to 32 (column lanes), 10, 11 and 12 up to 16, too many wasted (channel lanes)
    form = avx2_conv.AVX2.column_block if output_width(geometry) in (16, 29, 32) else avx2_conv.AVX2.block
    assert f'sblock("{form}_update' in kernel and '"modelbuild.refused_steps": 0' in kernel
    assert "vpmaddwd" in assembly(executable)  # the hot loop is the instruction, not a fallback
    _, _, strides, padding, _, _ = geometry
    padded = any(padding) or output_width(geometry) == 29 or geometry[0][1] % 2  # padded rows, then packed
    # padded rows of stride 1 packed by shuffles (packed_conv.tensorize_packing); stride 2 as TVM vectorises
    assert (f'sblock("{avx2_conv.AVX2.pack_block}_o"' in kernel) == (padded and strides[1] == 1)
    if not host_has_avx2():
        pytest.skip("this CPU has no AVX2: the library is compiled and inspected, not run")
    got = run(executable, x)
    assert got.dtype == np.int32 and np.array_equal(got, want)


def test_a_conv_to_one_channel_with_an_epilogue_builds_and_computes_the_same():
    """YOLOX's objectness conv: 96 -> 1 channel at 13x13, then sigmoid. Its epilogue has no loop of its own
    below the conv's columns (13, not a whole number of 8-lane vectors), and splitting that loop off crashed
    TVM (a segfault in loop_partition) and with it the int8 build; the conv's schedule refuses it instead."""
    from tvm import relax

    rng = np.random.default_rng(41)
    x = rng.integers(-128, 128, (1, 96, 13, 13)).astype(np.int8)
    weight = rng.integers(-128, 128, (1, 96, 1, 1)).astype(np.int8)
    bb = relax.BlockBuilder()
    data = relax.Var("x", relax.TensorType(shape=x.shape, dtype="int8"))
    with bb.function("main", [data]):
        with bb.dataflow():
            conv = bb.emit(relax.op.nn.conv2d(data, relax.const(weight), out_dtype="int32"))
            scaled = bb.emit(relax.op.multiply(relax.op.astype(conv, "float32"), relax.const(1e-4, "float32")))
            y = bb.emit_output(relax.op.sigmoid(scaled))
        bb.emit_func_output(y)
    executable, _ = build(bb.get(), AVX2_CPU)
    if not host_has_avx2():
        pytest.skip("this CPU has no AVX2: the library is compiled, not run")
    sums = np.einsum("nchw,oc->nohw", x.astype(np.int64), weight[:, :, 0, 0].astype(np.int64))
    np.testing.assert_allclose(run(executable, x), 1 / (1 + np.exp(-sums * 1e-4)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape, channels, dtype", matmuls.SHAPES, ids=matmuls.IDS)
def test_an_int8_matmul_on_avx2_is_vpmaddwd_and_bit_exact(shape, channels, dtype):
    x, module, want = matmuls.case(shape, channels, dtype)
    executable, phases = build(module, AVX2_CPU)
    (kernel,) = avx2_kernels(phases)
    assert '"modelbuild.refused_steps": 0' in kernel and "vpmaddwd" in assembly(executable)
    if not host_has_avx2():
        pytest.skip("this CPU has no AVX2: the library is compiled and inspected, not run")
    got = run(executable, x)
    assert got.dtype == np.int32 and np.array_equal(got, want)
