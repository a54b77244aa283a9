"""int8 conv2d with Arm's sdot: every geometry the packed form handles (the VNNI tests' geometries),
tensorised when the target has dotprod, and bit-exact against numpy on the emulated Arm device (qemu's
`-cpu max` has dotprod), through the same RPC path as a board."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.int8_convs import (
    DOTPROD,
    GEOMETRIES,
    GEOMETRY_IDS,
    assembly_of,
    build,
    case,
    kernels_of,
    output_width,
    run_on_device,
)
from tests.helpers.processes import EMULATED_ARM64_KEY

NO_DOTPROD = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72", "mattr": ["+neon"], "num-cores": 4}


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=GEOMETRY_IDS)
def test_an_arm_target_with_dotprod_computes_the_conv_with_sdot(geometry):
    from modelbuild.compiler.kernels import sdot_conv

    *_, module, _ = case(geometry)
    executable, phases = build(module, DOTPROD)
    # 4 lanes: column lanes from 4 columns up wherever rounding to whole vectors wastes at most 15%
    form = sdot_conv.BLOCK if output_width(geometry) in (1, 3, 10) else sdot_conv.COLUMN_BLOCK
    assert any(f'sblock("{form}_update' in k for k in kernels_of(phases))
    assert "sdot\tv" in assembly_of(executable)  # the hot loop is the instruction, not a fallback


def test_an_arm_target_without_dotprod_keeps_the_generic_integer_conv():
    from modelbuild.compiler.kernels import sdot_conv

    *_, module, _ = case(GEOMETRIES[0])
    executable, phases = build(module, NO_DOTPROD)
    assert not any(block in k for k in kernels_of(phases) for block in sdot_conv.BLOCKS)
    assert "sdot" not in assembly_of(executable)


def test_the_sdot_libraries_run_bit_exact_on_the_emulated_arm_device(arm64_tracker, tmp_path):
    from modelbuild.stages import compile as compile_stage

    on = {"tracker": arm64_tracker, "key": EMULATED_ARM64_KEY, "timeout": 120}
    for index, geometry in enumerate(GEOMETRIES):
        x, _, module, want = case(geometry)
        executable, _ = build(module, DOTPROD)
        library = tmp_path / f"conv{index}.so"
        compile_stage.export(executable, library, "aarch64-linux-gnu-gcc")
        described, got = run_on_device(library, on, x)
        assert described["machine"] == "aarch64"
        assert got.dtype == np.int32 and np.array_equal(got, want), GEOMETRY_IDS(geometry)
