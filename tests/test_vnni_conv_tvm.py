"""int8 conv2d with AVX-512 VNNI: every geometry the packed form handles, bit-exact against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.host_cpu import host_has
from tests.helpers.int8_convs import (
    GEOMETRIES,
    GEOMETRY_IDS,
    PLAIN_CPU,
    VNNI_CPU,
    build,
    case,
    conv_module,
    host_has_vnni,
    output_width,
)


def test_output_widths_are_what_the_geometries_say():
    assert [output_width(g) for g in GEOMETRIES] == [12, 10, 11, 10, 32, 16, 16, 29, 1, 3]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=GEOMETRY_IDS)
def test_vnni_conv_is_tensorised_and_bit_exact(geometry):
    import tvm
    from tvm import relax

    from modelbuild.compiler.kernels import vnni_conv

    shape, wshape, strides, padding, dilation, dtype = geometry
    x, weight, module, want = case(geometry)

    executable, phases = build(module, VNNI_CPU)
    kernels = [f.script() for f in phases.fused.functions.values() if hasattr(f, "params") and "sblock" in f.script()]
    out_width = output_width(geometry)
    form = vnni_conv.COLUMN_BLOCK if out_width in (16, 29, 32) else vnni_conv.BLOCK
    assert any(f'sblock("{form}_update' in k for k in kernels)
    if any(padding) or strides[1] > 1 or shape[1] % 4:  # padded first, then packed by shuffles
        assert any('sblock("vnni_pack_o"' in k for k in kernels)
    assembly = "".join(m.inspect_source("asm") for m in executable.mod.imports)
    assert "vpdpbusd" in assembly  # the hot loop is the VNNI instruction, not a fallback
    assert want.shape[3] == out_width

    plain, plain_phases = build(module, PLAIN_CPU)
    assert not any(vnni_conv.BLOCK in f.script() for f in plain_phases.fused.functions.values() if hasattr(f, "params"))
    got_plain = relax.VirtualMachine(plain, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert np.array_equal(got_plain, want)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=GEOMETRY_IDS)
def test_the_vnni_library_runs_bit_exact_on_a_vnni_host(geometry):
    import tvm
    from tvm import relax

    if not host_has_vnni():
        pytest.skip("this CPU has no AVX-512 VNNI: the VNNI library is compiled and inspected, not run")
    x, _, module, want = case(geometry)
    executable, _ = build(module, VNNI_CPU)
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert np.array_equal(got, want)


def test_a_row_rounded_up_to_whole_vectors_gets_one_unguarded_epilogue_per_row():
    """56 columns computed as 64: under the 16-column tiles, the last tile's epilogue was predicated and TVM
    vectorised every tile's epilogue with a per-lane guard (a requantising 64 -> 64 1x1 conv at 56x56: 236 us,
    131 us per row). Per row: three vectors of 16 and one of 8, no guard. (One row: pixel_rows computes 3 x 56
    pixels as 2 x 84, as many pixels in wider rows.)"""
    import re

    from modelbuild.compiler.kernels import vnni_conv

    weight = np.random.default_rng(0).integers(-128, 128, (64, 64, 1, 1)).astype(np.int8)
    module = conv_module((1, 64, 1, 56), weight, "int8", strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1))
    _, phases = build(module, VNNI_CPU)
    (script,) = [
        f.script()
        for f in phases.fused.functions.values()
        if hasattr(f, "params") and vnni_conv.COLUMN_BLOCK in f.script()
    ]
    assert "T.where" not in script
    epilogue = script[script.index('sblock("vnni_conv_by_column_update') :]
    assert re.search(r"T.unroll\(T.int64\(3\)\):\s+for \w+ in T.vectorized\(T.int64\(16\)\)", epilogue)
    assert "T.vectorized(T.int64(48), T.int64(56))" in epilogue  # the last 8 columns
    # its rows padded no wider than the packing reads: 64 bytes, not 128
    assert re.search(
        r"vnni_pad = T.sblock_alloc_buffer\(\(T.int64\(1\), T.int64\(1\), T.int64\(64\), T.int64\(64\)\)", script
    )


def test_rows_are_the_outer_loop_unless_too_few_or_the_conv_is_bound_by_its_stores():
    """Each core pads, packs and computes one band of rows, reading what it wrote itself (a 96 -> 24 3x3 conv
    at 160x160 took 1.7x as long with the blocks of output channels outermost while this VM's two cores were
    far apart). A row rounded up to whole vectors has its epilogue per row, between the row's loop and its
    channel blocks, so the rows alone run in parallel. A conv with too few rows to share (a conv1d's one row
    ran on one core) and one bound by its stores (a short reduction into a wide output) keep the channel
    blocks outermost: rows outermost, every row writes into each channel plane of the output (a 12 -> 96 conv
    at 160x160 with float output: 1024 us rows outermost, 518 us not)."""
    import re

    from modelbuild.compiler.kernels import vnni_conv

    rng = np.random.default_rng(1)
    orders = []
    # 29 x 29 pixels: no cut into other rows computes fewer than rows of 32 (compiler/passes/pixel_rows.py)
    for shape, wshape, padding in (
        ((1, 64, 16, 64), (64, 64, 1, 1), 0),
        ((1, 64, 29, 29), (64, 64, 1, 1), 0),
        ((1, 12, 160, 160), (96, 12, 1, 1), 0),
        ((1, 128, 8, 16), (128, 128, 3, 3), 1),
        ((1, 128, 1, 64), (128, 128, 1, 3), (0, 1)),
    ):
        weight = rng.integers(-128, 128, wshape).astype(np.int8)
        padding = padding if isinstance(padding, tuple) else (padding, padding)
        module = conv_module(shape, weight, "uint8", strides=(1, 1), padding=padding * 2, dilation=(1, 1))
        _, phases = build(module, VNNI_CPU)
        (script,) = [
            f.script()
            for f in phases.fused.functions.values()
            if hasattr(f, "params") and vnni_conv.COLUMN_BLOCK in f.script()
        ]
        orders.append(re.findall(r"for (\w+) in T.parallel", script))
    assert "b_h_o_0_fused" in orders[0] and "b_h_fused" in orders[1]
    assert "b_o_0_h_fused" in orders[2]  # 12 channels packed (300 KB), 96 written as int32: bound by its stores
    assert orders[3] == ["b_row_fused", "b_row_cg_fused", "b_h_o_0_fused"]  # padding, packing, the conv
    assert "b_o_0_h_fused" in orders[4]  # one row: the channel blocks shared among the cores


def test_a_conv_is_store_bound_by_the_bytes_it_writes_against_those_it_packs():
    from tvm import s_tir

    from modelbuild.compiler.kernels import packed_conv, vnni_conv
    from modelbuild.compiler.kernels.vnni_conv import VNNI

    rng = np.random.default_rng(2)
    bound = []
    for channels, out_channels, size in ((12, 96, 160), (64, 64, 160), (64, 256, 160), (16, 96, 80)):
        weight = rng.integers(-128, 128, (out_channels, channels, 1, 1)).astype(np.int8)
        module = conv_module(
            (1, channels, size, size), weight, "uint8", strides=(1, 1), padding=(0,) * 4, dilation=(1, 1)
        )
        _, phases = build(module, VNNI_CPU)
        (kernel,) = [
            f
            for f in phases.legalized.functions.values()
            if hasattr(f, "params") and vnni_conv.COLUMN_BLOCK in f.script()
        ]
        bound.append(packed_conv.store_bound(s_tir.Schedule(kernel), VNNI))
    # int32 outputs: 96 x 4 bytes a pixel against 12 packed, 9.8 MB; 64 x 4 against 64, not more than 4x; 64
    # channels at 160x160 pack to 1.6 MB, past what a core's cache holds across the blocks of channels; 96 x 4
    # against 16 at 80x80 writes 2.5 MB, which stays in cache
    assert bound == [True, False, False, False]


def test_a_row_of_one_column_accumulates_several_blocks_of_channels_together():
    """One accumulator per block of 16 channels was one chain of dependent vpdpbusd (a 512 -> 1280 conv of a
    1x1 map: 25.5 us; 7.0 us with 8 chains). 80 channels: 5 blocks, unrolled, one data broadcast for all."""
    import re

    from modelbuild.compiler.kernels import vnni_conv

    *_, module, _ = case(GEOMETRIES[-2])
    _, phases = build(module, VNNI_CPU)
    (script,) = [
        f.script() for f in phases.fused.functions.values() if hasattr(f, "params") and vnni_conv.BLOCK in f.script()
    ]
    assert re.search(
        r"for \w+ in T.unroll\(T.int64\(5\)\):\s+for \w+ in T.unroll\(T.int64\(1\)\):\s+"
        r'with T.sblock\("vnni_conv_update_o"\)',
        script,
    )


@pytest.mark.parametrize(
    "shape, wshape, parallel",
    [
        ((1, 512, 7, 7), (512, 512, 1, 1), True),  # 12.8 M multiply-adds: 98 us on one core, 50 on two
        ((1, 8, 24, 96), (16, 8, 1, 1), False),  # 0.3 M: the classifier's small convs, slower on two
    ],
)
def test_a_conv_runs_on_every_core_by_its_multiply_adds(shape, wshape, parallel):
    from modelbuild.compiler.kernels import vnni_conv

    weight = np.random.default_rng(0).integers(-128, 128, wshape).astype(np.int8)
    module = conv_module(shape, weight, "int8", strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1))
    _, phases = build(module, VNNI_CPU)
    (script,) = [
        f.script()
        for f in phases.fused.functions.values()
        if hasattr(f, "params") and any(b in f.script() for b in vnni_conv.BLOCKS)
    ]
    assert ("T.parallel" in script) is parallel


def squeeze_and_excite_module(squeezed, feature_map, weight):
    """A one-pixel conv whose output scales every pixel of a feature map: the epilogue broadcasts it."""
    from tvm import relax

    bb = relax.BlockBuilder()
    s = relax.Var("s", relax.TensorType(shape=squeezed, dtype="int8"))
    x = relax.Var("x", relax.TensorType(shape=feature_map, dtype="int32"))
    with bb.function("main", [s, x]):
        with bb.dataflow():
            gate = bb.emit(relax.op.nn.conv2d(s, relax.const(weight, "int8"), out_dtype="int32"))
            y = bb.emit_output(relax.op.multiply(x, gate))
        bb.emit_func_output(y)
    return bb.get()


@pytest.mark.parametrize(
    "channels, out_channels, size, blocks_in_parallel",
    [
        (24, 96, 40, False),  # the DB detector's: one block of output channels, whose epilogue's rows are shared
        (48, 1152, 7, True),  # EfficientNet-B0's last: 9 blocks, each with its epilogue, shared
    ],
)
def test_a_one_pixel_conv_broadcast_over_a_feature_map_scales_it_on_every_core(
    channels, out_channels, size, blocks_in_parallel
):
    """A squeeze-and-excite conv is too small to share among the cores, but its fused epilogue scales a whole
    feature map: its blocks of output channels run in parallel, or with one block its epilogue's rows (the DB
    detector's 24 -> 96 one at 160x160 took 222 us on two threads, 229 on one, before). A channel's plane is
    one run of vectors: at 7x7, rows of 7 were vectors of 7 (EfficientNet's 48 -> 1152 131 us, 25 in float).
    Exact against numpy where the host has VNNI."""
    import tvm
    from tvm import relax

    from modelbuild.compiler.kernels import vnni_conv

    rng = np.random.default_rng(3)
    weight = rng.integers(-128, 128, (out_channels, channels, 1, 1)).astype(np.int8)
    s = rng.integers(-128, 128, (1, channels, 1, 1)).astype(np.int8)
    x = rng.integers(-1000, 1000, (1, out_channels, size, size)).astype(np.int32)
    executable, phases = build(squeeze_and_excite_module(s.shape, x.shape, weight), VNNI_CPU)
    (script,) = [
        f.script() for f in phases.fused.functions.values() if hasattr(f, "params") and vnni_conv.BLOCK in f.script()
    ]
    conv = script[: script.index(f'sblock("{vnni_conv.BLOCK}_update')]
    epilogue = script[script.index(f'sblock("{vnni_conv.BLOCK}_update') :]
    assert ("T.parallel" in conv) is blocks_in_parallel and ("T.parallel" in epilogue) is not blocks_in_parallel
    assert "T.vectorized(T.int64(16))" in epilogue and f"T.vectorized(T.int64({size}))" not in epilogue
    if host_has_vnni():
        vm = relax.VirtualMachine(executable, tvm.cpu())
        gate = np.einsum("oc,c->o", weight[:, :, 0, 0].astype(np.int64), s[0, :, 0, 0].astype(np.int64))
        expected = (x.astype(np.int64) * gate[None, :, None, None]).astype(np.int32)  # int32 wraps as TVM's does
        np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(s), tvm.runtime.tensor(x)).numpy(), expected)


def test_a_sigmoid_gate_of_a_one_pixel_conv_is_computed_once_per_channel_under_its_loops():
    """EfficientNet's int8 squeeze-and-excite: sigmoid(conv) scales a 480-channel map at 14x14. Inlined into
    the map's scaling, the sigmoid was computed again for every vector of a channel's plane (thirteen scalar
    sigmoids per channel: 19 us a call, 8 for the float kernel); kept apart, it is one vector per 16 channels
    under the conv's loops, and the scaling reads it. Matches numpy where the host has VNNI."""
    import tvm
    from tvm import relax

    from modelbuild.compiler.kernels import vnni_conv

    rng = np.random.default_rng(4)
    weight = rng.integers(-128, 128, (96, 20, 1, 1)).astype(np.int8)
    s = rng.integers(-128, 128, (1, 20, 1, 1)).astype(np.int8)
    x = rng.standard_normal((1, 96, 14, 14)).astype(np.float32)
    bb = relax.BlockBuilder()
    sv = relax.Var("s", relax.TensorType(shape=s.shape, dtype="int8"))
    xv = relax.Var("x", relax.TensorType(shape=x.shape, dtype="float32"))
    with bb.function("main", [sv, xv]):
        with bb.dataflow():
            summed = bb.emit(relax.op.nn.conv2d(sv, relax.const(weight, "int8"), out_dtype="int32"))
            gate = bb.emit(
                relax.op.sigmoid(relax.op.multiply(relax.op.astype(summed, "float32"), relax.const(1e-4, "float32")))
            )
            y = bb.emit_output(relax.op.multiply(xv, gate))
        bb.emit_func_output(y)
    executable, phases = build(bb.get(), VNNI_CPU)
    (script,) = [
        f.script() for f in phases.fused.functions.values() if hasattr(f, "params") and vnni_conv.BLOCK in f.script()
    ]
    scaling = script[script.index('T.sblock("T_multiply') :]
    assert 'T.sblock("sigmoid' in script and "T.float32(1.0) /" not in scaling
    assert "T.vectorized(T.int64(16))" in scaling
    if host_has_vnni():
        vm = relax.VirtualMachine(executable, tvm.cpu())
        summed = np.einsum("oc,c->o", weight[:, :, 0, 0].astype(np.int64), s[0, :, 0, 0].astype(np.int64))
        expected = x / (1 + np.exp(-summed * 1e-4))[None, :, None, None]
        np.testing.assert_allclose(
            vm["main"](tvm.runtime.tensor(s), tvm.runtime.tensor(x)).numpy(), expected, rtol=1e-6, atol=1e-6
        )


@pytest.mark.parametrize("shape, wshape", [((1, 512, 7, 7), (512, 512, 1, 1)), ((1, 16, 48, 48), (88, 16, 1, 1))])
def test_the_word_broadcast_to_every_lane_is_a_value_not_a_buffer(shape, wshape):
    """An assignment in the intrinsic's TVMScript made the 4-byte word a buffer of scope "local", which TVM
    allocates from its workspace pool (a call to allocate and one to free) at every iteration of the loop
    outside the tensorised one; a value, it is a register (a 16 -> 88 1x1 conv at 48x48: 16.3 -> 13.1 us)."""
    import re

    weight = np.random.default_rng(0).integers(-128, 128, wshape).astype(np.int8)
    module = conv_module(shape, weight, "int8", strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1))
    executable, _ = build(module, VNNI_CPU)
    llvm_ir = "".join(m.inspect_source("ll") for m in executable.mod.imports)
    assert "vpdpbusd" in llvm_ir
    workspace = [int(size) for size in re.findall(r"call ptr %\w+\(i32 1, i32 %dev_id, i64 (\d+),", llvm_ir)]
    assert workspace and 4 not in workspace  # the packed data and the accumulators are still allocated


def test_float_accumulation_is_exact_at_its_bound_of_1024_extreme_products():
    import tvm
    from tvm import relax

    from modelbuild.compiler.kernels.integer_kernels import EXACT_FLOAT_PRODUCTS

    shape, wshape = (1, 64, 4, 4), (16, 64, 4, 4)  # 64 x 4 x 4 = 1024 products per output
    assert wshape[1] * wshape[2] * wshape[3] == EXACT_FLOAT_PRODUCTS
    x = np.full(shape, -128, np.int8)
    weight = np.full(wshape, -128, np.int8)
    module = conv_module(shape, weight, "int8", strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1))
    executable, phases = build(module, PLAIN_CPU)
    assert any("conv2d_int8" in gv.name_hint for gv in phases.fused.functions)  # the float-accumulated kernel
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert got.ravel().tolist() == [1 << 24] * 16  # 1024 x 16384: the largest sum, still exact


def test_a_padded_row_is_written_in_vectors_each_wholly_padding_or_input():
    """A 3x3 conv of 160 columns pads each row to 192: 1 column of padding, 160 of input, 31 of padding. Each
    vector the pad writes lies in one of the three, so the column's bounds are known at compile time: a row
    is vector copies and constants, with no per-lane select or lane-by-lane load at the input's ends (one
    loop of three 64-column vectors spent a quarter of the detector's 96 -> 24 conv on AMX padding)."""
    import re

    shape, weight = (1, 16, 4, 160), np.ones((16, 16, 3, 3), np.int8)
    module = conv_module(shape, weight, "int8", strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))
    executable, phases = build(module, VNNI_CPU)
    [script] = [
        s for s in (f.script() for f in phases.planned.functions.values() if hasattr(f, "params")) if "vnni_pad" in s
    ]
    spans = [
        (int(a), int(b)) if b else (0, int(a))
        for a, b, block in re.findall(
            r'T\.vectorized\(T\.int64\((\d+)\)(?:, T\.int64\((\d+)\))?\):\s+with T\.sblock\("(vnni_pad\w*)"\)', script
        )
    ]
    assert spans == [(0, 1), (1, 65), (65, 129), (129, 161), (161, 192)]
    assembly = "".join(m.inspect_source("asm") for m in executable.mod.imports)
    assert not re.findall(r"\tvpinsrb", assembly)  # no byte loaded into a vector lane by lane


GUARDED_RUN = r"""
import ctypes, mmap, sys
import numpy as np
import tvm
from tvm import relax
sys.path.insert(0, {root!r})
from tests.helpers.int8_convs import build, conv_module, reference

groups, mcpu, shape, strides, kernel = {groups}, {mcpu!r}, {shape}, {strides}, {kernel!r}
page = mmap.PAGESIZE
pages = int(np.prod(shape)) // page  # whole pages of int8 data
memory = mmap.mmap(-1, (pages + 2) * page)
libc = ctypes.CDLL(None)
start = ctypes.addressof(ctypes.c_char.from_buffer(memory))
for guard in (start, start + (pages + 1) * page):  # no access to the page before the data, nor the one after
    assert libc.mprotect(ctypes.c_void_p(guard), page, 0) == 0
x = np.frombuffer(memory, np.int8, count=pages * page, offset=page).reshape(shape)
x[...] = np.random.default_rng(0).integers(-128, 128, shape)
weight = np.random.default_rng(1).integers(-128, 128, (16, shape[1] // groups, 3, 3)).astype(np.int8)
module = conv_module(shape, weight, "int8", strides=strides, padding=(1, 1, 1, 1), dilation=(1, 1), groups=groups)
executable, phases = build(module, {{"kind": "llvm", "mcpu": mcpu, "num-cores": 2}})
assert any(kernel in gv.name_hint for gv in phases.fused.functions)
got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.from_dlpack(x)).numpy()
want = reference(x, weight, strides=strides, padding=(1, 1, 1, 1), dilation=(1, 1))
assert np.array_equal(got, want)
print("ok")
"""


@pytest.mark.parametrize(
    "groups, shape, strides, mcpu, features, kernel",
    [
        (1, "(1, 16, 16, mmap.PAGESIZE // 256)", (1, 1), "cascadelake", ("avx512vnni",), "vnni"),
        (16, "(1, 16, 16, mmap.PAGESIZE // 256)", (1, 1), "icelake-server", ("avx512vnni", "avx512vbmi"), "vnni"),
        # an image model's first conv: 3 channels, packed in groups of 4 (the fourth read a plane past the input)
        (1, "(1, 3, 64, 64)", (2, 2), "cascadelake", ("avx512vnni",), "vnni"),
        # AVX2 without VNNI: vpmaddwd on pairs, and a depthwise conv summed in float, its padding a copy
        (1, "(1, 16, 16, mmap.PAGESIZE // 256)", (1, 1), "znver3", ("avx2",), "avx2"),
        (16, "(1, 16, 16, mmap.PAGESIZE // 256)", (1, 1), "znver3", ("avx2",), "conv2d_int8"),
        (1, "(1, 3, 64, 64)", (2, 2), "znver3", ("avx2",), "avx2"),
        # AMX tiles: 64 channels of 16 columns, one page
        (1, "(1, 64, 4, 16)", (1, 1), "sapphirerapids", ("amx-int8", "amx-tile"), "amx"),
    ],
    ids=["conv", "depthwise", "3-channel-stem", "avx2-conv", "avx2-depthwise", "avx2-3-channel-stem", "amx-conv"],
)
def test_a_padded_conv_reads_nothing_outside_its_input(groups, shape, strides, mcpu, features, kernel):
    """The input lies in whole pages between two pages that may not be read: the padding of its first row,
    the vectors past its last and the channels that fill its last group must not load from them (a vector
    select of a clamped load did, and crashed the detector on real images). In a fresh process, so a fault
    fails this test rather than the run."""
    import subprocess
    import sys
    from pathlib import Path

    if not host_has(*features):
        pytest.skip(f"this CPU lacks {', '.join(features)}: the kernel cannot run here")
    root = str(Path(__file__).resolve().parents[1])
    code = GUARDED_RUN.format(root=root, groups=groups, mcpu=mcpu, shape=shape, strides=strides, kernel=kernel)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=root)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr[-1500:])
