"""int8 depthwise conv2d with AVX-512 VNNI and VBMI: the geometries it takes, bit-exact against numpy; the
others, and targets without VBMI, keep the float-accumulated kernel."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.host_cpu import host_has
from tests.helpers.int8_convs import build, conv_module, reference

VBMI_CPU = {"kind": "llvm", "mcpu": "icelake-server", "num-cores": 2}  # VNNI and VBMI
VNNI_ONLY_CPU = {"kind": "llvm", "mcpu": "cascadelake", "num-cores": 2}


def depthwise_module(shape, weight, dtype, *, strides, padding, dilation):
    return conv_module(shape, weight, dtype, strides=strides, padding=padding, dilation=dilation, groups=shape[1])


def kernel_scripts(phases) -> list[str]:
    return [f.script() for f in phases.fused.functions.values() if hasattr(f, "params") and "sblock" in f.script()]


def run(executable, x):
    import tvm
    from tvm import relax

    return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def random_case(shape, wshape, dtype):
    rng = np.random.default_rng(shape[1] + wshape[2] * 10 + shape[3])
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype), rng.integers(-128, 128, wshape).astype(np.int8)


GEOMETRIES = [  # (data shape, weight shape, strides, padding, dilation, data dtype)
    ((1, 200, 2, 96), (200, 1, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1), "int8"),  # the classifier's largest
    ((1, 24, 12, 96), (24, 1, 3, 3), (2, 1), (1, 1, 1, 1), (1, 1), "int8"),  # stride 2 in rows only
    ((1, 16, 33, 64), (16, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), "uint8"),  # stride 2 in columns
    ((1, 8, 20, 70), (8, 1, 3, 7), (1, 1), (2, 3, 0, 3), (2, 2), "int8"),  # 7 taps a row, dilation 2, uneven
    ((2, 64, 64, 64), (64, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "int8"),  # enough work to run in parallel
    # output widths that are not whole vectors: computed rounded up to 16 columns, the rest dropped
    ((1, 32, 7, 7), (32, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "uint8"),  # 7 of 16
    (
        (1, 16, 56, 56),
        (16, 1, 3, 3),
        (2, 2),
        (1, 1, 1, 1),
        (1, 1),
        "int8",
    ),  # 56 of 64 at stride 2 (a MobileNet's 112 -> 56)
    ((1, 8, 30, 30), (8, 1, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1), "int8"),  # 30 of 32, two tap groups a row
    # loads reading on into the rows below: 7 of 16 at stride 2, two tap groups; a row of padding past the last
    ((1, 16, 14, 14), (16, 1, 5, 5), (2, 2), (2, 2, 2, 2), (1, 1), "int8"),
    ((1, 8, 6, 62), (8, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "uint8"),
]


IDS = lambda g: f"{g[0][1]}k{g[1][2]}x{g[1][3]}s{g[2][1]}w{g[0][3]}{g[5]}"  # noqa: E731


def built_case(geometry):
    shape, wshape, strides, padding, dilation, dtype = geometry
    x, weight = random_case(shape, wshape, dtype)
    module = depthwise_module(shape, weight, dtype, strides=strides, padding=padding, dilation=dilation)
    executable, phases = build(module, VBMI_CPU)
    return x, executable, phases, reference(x, weight, strides=strides, padding=padding, dilation=dilation)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=IDS)
def test_vnni_depthwise_is_tensorised(geometry):
    _, executable, phases, _ = built_case(geometry)
    assert any('sblock("vnni_depthwise_update_o"' in k for k in kernel_scripts(phases))
    assembly = "".join(m.inspect_source("asm") for m in executable.mod.imports)
    assert "vpdpbusd" in assembly
    assert "vperm" in assembly  # vpermb, or vpermw where pairs of bytes move together (stride 2)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=IDS)
def test_vnni_depthwise_runs_bit_exact_on_a_vnni_vbmi_host(geometry):
    if not host_has("avx512vnni", "avx512vbmi"):
        pytest.skip("this CPU lacks AVX-512 VNNI or VBMI: the kernel is compiled and inspected, not run")
    x, executable, _, want = built_case(geometry)
    assert np.array_equal(run(executable, x), want)


@pytest.mark.parametrize("target", [VNNI_ONLY_CPU, VBMI_CPU], ids=["no VBMI", "taps beyond one window"])
def test_other_depthwise_convs_keep_the_float_accumulated_kernel(target):
    shape, wshape = (1, 8, 6, 40), (8, 1, 3, 3)
    x, weight = random_case(shape, wshape, "int8")
    # dilation 20: 16 lanes x 3 taps span 15 + 2 * 20 + 1 = 56 columns, fine; the 4th (zero) tap of the group
    # reaches 15 + 3 * 20 = 75, beyond vpermb's 64-byte window
    geometry = (
        {"strides": (1, 1), "padding": (1, 20, 1, 20), "dilation": (1, 20)}
        if target is VBMI_CPU
        else {"strides": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1)}
    )
    executable, phases = build(depthwise_module(shape, weight, "int8", **geometry), target)
    names = [gv.name_hint for gv in phases.fused.functions]
    assert any("conv2d_int8" in n for n in names) and not any("depthwise" in n for n in names)
    # its int8 input is converted to float once per element, in a block of its own, not once per tap
    (script,) = [k for k in kernel_scripts(phases) if "exact_sum" in k]
    assert 'T.sblock("pad_temp")' in script and script.count('T.Cast("float32", ') == 2  # data, weights
    if host_has("avx512vnni"):
        assert np.array_equal(run(executable, x), reference(x, weight, **geometry))


def test_ordinary_convs_are_not_taken_for_depthwise():
    shape, wshape = (1, 8, 6, 32), (8, 8, 3, 3)
    _, weight = random_case(shape, wshape, "int8")
    module = conv_module(shape, weight, "int8", strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))
    _, phases = build(module, VBMI_CPU)
    assert not any("depthwise" in gv.name_hint for gv in phases.fused.functions)


def test_epilogue_is_vectorised_one_register_wide():
    """Six vectors of columns as one 96-lane loop made LLVM build each per-channel broadcast from inserts,
    lane by lane (a quarter of the classifier's largest depthwise conv)."""
    import re

    from modelbuild.compiler.kernels import vnni_depthwise

    shape, wshape = (1, 200, 2, 96), (200, 1, 5, 5)
    _, weight = random_case(shape, wshape, "int8")
    module = depthwise_module(shape, weight, "int8", strides=(1, 1), padding=(2, 2, 2, 2), dilation=(1, 1))
    executable, phases = build(module, VBMI_CPU)
    (script,) = [s for s in kernel_scripts(phases) if "vnni_depthwise" in s]
    vectors = re.findall(r'T.vectorized\(T.int64\((\d+)\)\):\s+with T.sblock\("(\w+)"\)', script)
    assert sorted(int(n) for n, block in vectors if not block.startswith(vnni_depthwise.PAD_BLOCK)) == [16, 16]
    # the six vectors unrolled: a loop over them spent its time on loop and address arithmetic
    assert re.search(
        r"T.unroll\(T.int64\(6\)\):\s+for \w+ in T.vectorized\(T.int64\(16\)\):\s+"
        r'with T.sblock\("vnni_depthwise_unpack"\)',
        script,
    )
    assembly = "".join(m.inspect_source("asm") for m in executable.mod.imports)
    assert not re.findall(r"\tvinsert", assembly)


def test_a_row_of_few_vectors_accumulates_with_the_rows_below_it_and_a_large_conv_runs_on_every_core():
    """One 16-column vector per row (14 columns) was one chain of dependent vpdpbusd: 7 rows now accumulate
    together; five (76 columns) take a second row, over every tap unrolled (the layout net's 5x5 conv at
    100x76: 0.83x). And a MobileNet's 3x3 conv at 56x56 (64 channels, 14336 output vectors) ran on one core."""
    import re

    for (height, width), rows, vectors in (((14, 14), 7, 1), ((12, 76), 2, 5)):
        shape, wshape = (1, 256, height, width), (256, 1, 5, 5)
        _, weight = random_case(shape, wshape, "int8")
        module = depthwise_module(shape, weight, "int8", strides=(1, 1), padding=(2, 2, 2, 2), dilation=(1, 1))
        _, phases = build(module, VBMI_CPU)
        (script,) = [s for s in kernel_scripts(phases) if "vnni_depthwise" in s]
        # 5 kernel rows x 2 groups of 4 taps, then the rows and vectors of the block
        assert re.search(
            r"for \w+ in T.unroll\(T.int64\(5\)\):\s+for \w+ in T.unroll\(T.int64\(2\)\):\s+"
            rf"for \w+ in T.unroll\(T.int64\({rows}\)\):\s+for \w+ in T.unroll\(T.int64\({vectors}\)\):\s+"
            r'with T.sblock\("vnni_depthwise_update_o"\)',
            script,
        ), (rows, vectors)

    shape, wshape = (1, 64, 56, 56), (64, 1, 3, 3)
    _, weight = random_case(shape, wshape, "int8")
    module = depthwise_module(shape, weight, "int8", strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))
    _, phases = build(module, VBMI_CPU)
    (script,) = [s for s in kernel_scripts(phases) if "vnni_depthwise" in s]
    assert "T.parallel" in script


def test_a_padded_row_is_as_wide_as_the_padded_input_and_the_last_loads_stay_in_the_buffer():
    """Each row was padded as wide as its last load: 128 bytes for the classifier's 5x5 conv at stride 2 from
    14 to 7 columns (18 padded), 3.4x the time of the float kernel; 64 bytes now, its loads reading on into
    the row below. Where the last row's loads reach past the padding (62 + 2 columns, a 32-byte load at
    column 48), a row of padding is added below it."""
    import re

    for shape, wshape, strides, padding, want in (
        ((1, 16, 14, 14), (16, 1, 5, 5), (2, 2), (2,) * 4, (18, 64)),
        ((1, 8, 6, 62), (8, 1, 3, 3), (1, 1), (1,) * 4, (9, 64)),
    ):
        _, weight = random_case(shape, wshape, "int8")
        module = depthwise_module(shape, weight, "int8", strides=strides, padding=padding, dilation=(1, 1))
        _, phases = build(module, VBMI_CPU)
        (script,) = [s for s in kernel_scripts(phases) if "vnni_depthwise" in s]
        (pad,) = re.findall(r'vnni_depthwise_pad = T.sblock_alloc_buffer\((.*?), "uint8"\)', script)
        assert tuple(int(d) for d in re.findall(r"T.int64\((\d+)\)", pad))[2:] == want  # rows, bytes a row
