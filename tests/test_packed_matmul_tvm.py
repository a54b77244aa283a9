"""int8 matmul with constant weights on the dot-product conv kernels: tensorised (vpdpbusd, sdot) and
bit-exact against numpy for every shape the packed form takes."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.int8_convs import (
    DOTPROD,
    PLAIN_CPU,
    VNNI_CPU,
    assembly_of,
    build,
    host_has_vnni,
    kernels_of,
    run_on_device,
)
from tests.helpers.processes import EMULATED_ARM64_KEY

SHAPES = [  # (data shape, output channels, data dtype)
    ((1, 40, 120), 50, "uint8"),  # a recogniser's head, narrower: outputs not a whole number of vectors
    ((7, 20), 32, "int8"),  # int8 data: shifted into vpdpbusd's unsigned operand
    ((3, 5, 18), 16, "uint8"),  # a batch of 3 (the image's rows); depth 18, not a multiple of 4
    ((1, 2, 1, 4, 64), 20, "int8"),  # several unit batch dimensions and one of 2
]
IDS = ["head", "int8-data", "batch", "unit-dims"]


def case(shape, channels, dtype):
    from tvm import relax

    rng = np.random.default_rng(channels)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    weight = rng.integers(-128, 128, (shape[-1], channels)).astype(np.int8)
    bb = relax.BlockBuilder()
    var = relax.Var("x", relax.TensorType(shape=shape, dtype=dtype))
    with bb.function("main", [var]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.matmul(var, relax.const(weight, "int8"), out_dtype="int32"))
        bb.emit_func_output(y)
    return x, bb.get(), x.astype(np.int64) @ weight.astype(np.int64)


def run(executable, x):
    import tvm
    from tvm import relax

    return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize("shape, channels, dtype", SHAPES, ids=IDS)
def test_an_int8_matmul_is_a_vnni_conv_bit_exact_against_numpy(shape, channels, dtype):
    from modelbuild.compiler.kernels import vnni_conv

    x, module, want = case(shape, channels, dtype)
    executable, phases = build(module, VNNI_CPU)
    kernels = kernels_of(phases)
    assert any(f'sblock("{vnni_conv.BLOCK}_update' in k and '"modelbuild.refused_steps": 0' in k for k in kernels)
    assert "vpdpbusd" in assembly_of(executable)
    if host_has_vnni():
        got = run(executable, x)
        assert got.dtype == np.int32 and np.array_equal(got, want)
    plain, plain_phases = build(module, PLAIN_CPU)  # no dot-product instruction: TVM's own loop
    assert not any(vnni_conv.BLOCK in k for k in kernels_of(plain_phases))
    assert np.array_equal(run(plain, x), want)


def test_two_batch_dimensions_above_one_keep_tvms_loop():
    from modelbuild.compiler.kernels import vnni_conv

    x, module, want = case((2, 3, 4, 16), 16, "uint8")
    executable, phases = build(module, VNNI_CPU)
    assert not any(vnni_conv.BLOCK in k for k in kernels_of(phases))
    if host_has_vnni():
        assert np.array_equal(run(executable, x), want)


def test_an_arm_target_with_dotprod_computes_the_matmul_with_sdot():
    from modelbuild.compiler.kernels import sdot_conv

    _, module, _ = case(*SHAPES[0])
    executable, phases = build(module, DOTPROD)
    assert any(f'sblock("{sdot_conv.BLOCK}_update' in k for k in kernels_of(phases))
    assert "sdot\tv" in assembly_of(executable)


def test_the_sdot_matmuls_run_bit_exact_on_the_emulated_arm_device(arm64_tracker, tmp_path):
    from modelbuild.stages import compile as compile_stage

    on = {"tracker": arm64_tracker, "key": EMULATED_ARM64_KEY, "timeout": 120}
    for index, (shape, channels, dtype) in enumerate(SHAPES):
        x, module, want = case(shape, channels, dtype)
        executable, _ = build(module, DOTPROD)
        library = tmp_path / f"matmul{index}.so"
        compile_stage.export(executable, library, "aarch64-linux-gnu-gcc")
        _, got = run_on_device(library, on, x)
        assert np.array_equal(got, want), IDS[index]
