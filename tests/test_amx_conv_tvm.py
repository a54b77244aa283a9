"""int8 conv2d on AMX tiles: which convs take them, what the library must do before a tile instruction, and
bit-exact results against numpy on a CPU that has them."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.helpers.int8_convs import AMX_CPU, build, conv_module, reference

GEOMETRIES = [  # (data shape, weight shape, strides, padding, data dtype)
    ((1, 128, 6, 32), (32, 128, 1, 1), (1, 1), (0, 0, 0, 0), "uint8"),  # two blocks of 64 input channels
    ((1, 128, 9, 16), (16, 128, 3, 3), (1, 1), (1, 1, 1, 1), "int8"),  # two blocks, padded 3x3
    # stride 2, uneven padding, 20 -> 32 columns, 40 outputs -> 48
    ((2, 64, 12, 40), (40, 64, 3, 3), (2, 2), (1, 0, 1, 1), "int8"),
    ((1, 64, 32, 32), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1), "int8"),  # multiply-adds enough for both cores
    ((1, 96, 9, 16), (24, 96, 3, 3), (1, 1), (1, 1, 1, 1), "int8"),  # three steps of 32 channels, 24 outputs -> 32
    ((1, 32, 10, 40), (20, 32, 3, 3), (2, 2), (1, 0, 1, 1), "uint8"),  # one step of 32 a tap, stride 2
]
THREADED = GEOMETRIES[3]  # the one whose multiply-adds fill both cores
IDS = lambda g: f"{g[0][1]}x{g[1][0]}k{g[1][2]}s{g[2][0]}w{g[0][3]}{g[4]}"  # noqa: E731


def case(geometry):
    shape, wshape, strides, padding, dtype = geometry
    rng = np.random.default_rng(wshape[0] + shape[3])
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    weight = rng.integers(-128, 128, wshape).astype(np.int8)
    module = conv_module(shape, weight, dtype, strides=strides, padding=padding, dilation=(1, 1))
    return x, module, reference(x, weight, strides=strides, padding=padding, dilation=(1, 1))


def kernel_scripts(phases) -> list[str]:
    return [f.script() for f in phases.planned.functions.values() if hasattr(f, "params")]


def host_has_amx() -> bool:
    from modelbuild.recipe.targets import host_features

    return "amxint8" in host_features()


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=IDS)
def test_a_conv_of_whole_32_or_64_channel_steps_runs_on_amx_tiles(geometry):
    """tdpbsud on the packed data, the tile permission asked of Linux and the tile configuration loaded
    before the first tile instruction, and again in every iteration of a parallel loop (each thread has its
    own configuration)."""
    _, module, _ = case(geometry)
    _, phases = build(module, AMX_CPU)
    [kernel] = [k for k in kernel_scripts(phases) if "tdpbsud" in k]
    assert '"modelbuild.refused_steps": 0' in kernel
    assert re.search(r'T.call_extern\("int64", "syscall", T.int64\(158\), T.int64\(4131\), T.int64\(18\)\)', kernel)
    first_tile = kernel.index("llvm.x86.tileloadd64")
    assert kernel.index("llvm.x86.ldtilecfg") < first_tile
    if geometry is THREADED:
        parallel = kernel[kernel.index("T.parallel") :]
        assert parallel.index("llvm.x86.ldtilecfg") < parallel.index("llvm.x86.tdpbsud")


def test_the_sums_stay_in_a_tile_register_across_every_tap_and_block():
    """A tile of sums zeroed in its register, accumulated over all its tdpbsud (2 blocks x 3 x 3 taps) and
    stored once. Loaded and stored around each tap, 3x3 convs ran 0.62x-0.86x of VNNI's time, then 0.43x-0.69x
    loaded once; loading the zeros TVM's init had just written, rather than zeroing the tile, cost the convs
    1.03x-1.17x their time."""
    _, module, _ = case(GEOMETRIES[1])
    _, phases = build(module, AMX_CPU)
    [kernel] = [k for k in kernel_scripts(phases) if "tdpbsud" in k]
    tile = kernel[kernel.index("llvm.x86.tilezero") :]
    assert tile.count("T.int8(0)") == 3  # the sums zeroed, accumulated into, stored
    assert re.search(r"for r, h(_1)?, w in T.grid\(T.int64\(2\), T.int64\(3\), T.int64\(3\)\):", kernel)


def test_a_conv_of_an_odd_multiple_of_32_channels_takes_steps_of_32():
    """96 channels as three steps of 32 (tiles 2 and 3: 16 rows of 32 bytes of weights, tile 7: 8 rows of
    data), not two of 64 half padded: 96 -> 24 3x3 at 80x80 ran 0.78x of VNNI's time so, 0.90x-1.04x padded."""
    _, module, _ = case(GEOMETRIES[4])
    _, phases = build(module, AMX_CPU)
    [kernel] = [k for k in kernel_scripts(phases) if "tdpbsud" in k]
    assert re.search(r"for r, h(_1)?, w in T.grid\(T.int64\(3\), T.int64\(3\), T.int64\(3\)\):", kernel)
    assert 'T.call_llvm_intrin("void", "llvm.x86.tdpbsud", T.int8(0), T.int8(2), T.int8(7))' in kernel
    assert "T.int8(4)" not in kernel and "T.int8(6)" not in kernel


@pytest.mark.parametrize(
    "geometry, blocks",
    [(GEOMETRIES[4], 2), (GEOMETRIES[3], 2), (GEOMETRIES[2], 1), (GEOMETRIES[1], 1)],
    ids=["24-as-32", "64", "40-as-48", "16"],
)
def test_two_blocks_of_output_channels_share_each_tile_of_data(geometry, blocks):
    """Where a conv's blocks of 16 output channels pair up, a tile of the schedule is 32 channels: per step
    and tap, each block's weights are loaded and one tile of data, which both blocks' tdpbsud multiply (96 ->
    24 3x3 at 160x160, padded to 32 channels, 0.89x; at 80x80 0.87x). 48 channels are three blocks, alone."""
    _, module, _ = case(geometry)
    _, phases = build(module, AMX_CPU)
    [kernel] = [k for k in kernel_scripts(phases) if "tdpbsud" in k]
    step = kernel[kernel.index("for r, h") : kernel.index("llvm.x86.tilestored64")]
    assert step.count("llvm.x86.tdpbsud") == blocks
    assert step.count("llvm.x86.tileloadd64") == blocks + 1  # each block's weights, one tile of data
    sums = {int(t) for t in re.findall(r'"llvm.x86.tdpbsud", T.int8\((\d)\)', step)}
    assert sums == set(range(blocks))


def test_a_1x1_conv_whose_data_outweighs_its_weights_loops_over_rows_outermost():
    """As for VNNI (packed_conv.schedule_column_lanes): 256 -> 64 at 76x100 ran 0.53x VNNI's time so, 1.11x
    with its blocks of output channels outermost."""
    _, module, _ = case(GEOMETRIES[0])
    _, phases = build(module, AMX_CPU)
    [kernel] = [k for k in kernel_scripts(phases) if "tdpbsud" in k]
    assert "for b, h, o_0, col_0 in T.grid(T.int64(1), T.int64(6), T.int64(1), T.int64(2)):" in kernel


@pytest.mark.parametrize(
    "geometry, order",
    [
        (GEOMETRIES[3], "b_h_o_0_fused"),  # 64 -> 64 3x3: 36 KB of weights, rows outermost
        (((1, 128, 8, 32), (64, 128, 3, 3), (1, 1), (1, 1, 1, 1), "int8"), "b_o_0_h_fused"),  # 72 KB
    ],
    ids=["weights-in-l1", "weights-past-l1"],
)
def test_a_conv_whose_weights_fit_in_l1_loops_over_rows_outermost(geometry, order):
    """The rows a tile reads serve every block of output channels from L1: 3x3 convs with weights under
    48 KB ran 0.61x-0.88x of their time with blocks outermost; with larger weights there was no gain."""
    _, module, _ = case(geometry)
    _, phases = build(module, AMX_CPU)
    [kernel] = [k for k in kernel_scripts(phases) if "tdpbsud" in k]
    assert f"for {order} in T.parallel(" in kernel


@pytest.mark.parametrize(
    "shape, wshape",
    [
        ((1, 48, 8, 32), (32, 48, 3, 3)),  # 48 channels: a step of 64 a quarter padding
        ((1, 64, 8, 32), (32, 64, 1, 1)),  # one step per tile of sums (0.95x-1.09x)
        ((1, 128, 8, 7), (32, 128, 3, 3)),  # 16 columns computed for 7 (1.17x)
    ],
    ids=["padded-step", "one-step", "narrow"],
)
def test_a_conv_that_would_fill_its_tiles_poorly_stays_on_vnni(shape, wshape):
    _, module, _ = case((shape, wshape, (1, 1), (1, 1, 1, 1) if wshape[2] == 3 else (0, 0, 0, 0), "int8"))
    _, phases = build(module, AMX_CPU)
    kernels = kernel_scripts(phases)
    assert not any("tdpbsud" in k for k in kernels)
    assert any("vnni_conv" in k and "vpdpbusd" in k for k in kernels)


def test_a_sapphire_rapids_target_without_its_tiles_builds_vnni_convs():
    """What `mcpu = "host"` resolves to on a Sapphire Rapids whose Linux grants no tiles (recipe/targets.py:
    host_extensions): the same conv on VNNI."""
    _, module, _ = case(GEOMETRIES[1])
    _, phases = build(module, {**AMX_CPU, "mattr": ["-amx-tile", "-amx-int8"]})
    kernels = kernel_scripts(phases)
    assert not any("tdpbsud" in k for k in kernels)
    assert any("vnni_conv" in k and "vpdpbusd" in k for k in kernels)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=IDS)
def test_the_amx_library_runs_bit_exact_on_an_amx_host(geometry):
    import tvm
    from tvm import relax

    if not host_has_amx():
        pytest.skip("this CPU has no AMX tiles: the AMX library is compiled and inspected, not run")
    x, module, want = case(geometry)
    executable, _ = build(module, AMX_CPU)
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert np.array_equal(got, want)


THREADED_RUN = """
import numpy as np, tvm
from tvm import relax
from tests.helpers.int8_convs import AMX_CPU, VNNI_CPU, build
from tests.test_amx_conv_tvm import THREADED, case
x, module, want = case(THREADED)
run = lambda executable: relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
run(build(module, VNNI_CPU)[0])
print("exact" if np.array_equal(run(build(module, AMX_CPU)[0]), want) else "differs")
"""


def test_every_worker_thread_configures_its_tiles():
    """Worker threads started before the AMX kernel first runs (here by a VNNI kernel, as in any process that
    ran another model first) have no tile configuration: a thread started after the kernel's first one
    inherits it (Linux copies the register state into a new thread), one started before dies of an illegal
    instruction at its first tile load unless the kernel configures each thread. TVM_NUM_THREADS, read when
    the pool starts, so in a process of its own."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    if not host_has_amx():
        pytest.skip("this CPU has no AMX tiles")
    env = {**os.environ, "TVM_NUM_THREADS": "2"}
    done = subprocess.run(
        [sys.executable, "-c", THREADED_RUN],
        env=env,
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "exact"


def test_the_tile_configuration_is_palette_1_with_the_tiles_of_both_steps():
    """Sums in tiles 0 and 1 (16 rows of 16 int32); two blocks' weights of a 32-channel step in tiles 2 and 3
    (16 rows of 32 bytes), of a 64-channel step in 4 and 5 (16 rows of 64 bytes); data of a 64-channel step in
    tile 6 (16 rows of 64 bytes), of a 32-channel step in 7 (8 rows of 64 bytes)."""
    from modelbuild.compiler.kernels.amx_conv import tile_config_words

    config = b"".join(word.to_bytes(8, "little") for word in tile_config_words())
    assert config[0] == 1 and not any(config[1:16])
    assert [int.from_bytes(config[16 + 2 * t : 18 + 2 * t], "little") for t in range(16)] == [
        64,
        64,
        32,
        32,
        64,
        64,
        64,
        64,
    ] + [0] * 8
    assert list(config[48:64]) == [16, 16, 16, 16, 16, 16, 16, 8] + [0] * 8
