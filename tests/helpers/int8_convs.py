"""int8 convs built for a CPU's dot-product and tile instructions, and the numpy reference they must equal
bit for bit: the geometries the VNNI, AVX2, sdot and AMX kernel tests share."""

from __future__ import annotations

import numpy as np

from tests.helpers.host_cpu import host_has

VNNI_CPU = {"kind": "llvm", "mcpu": "cascadelake", "num-cores": 2}


PLAIN_CPU = {"kind": "llvm", "num-cores": 2}


def host_has_vnni() -> bool:
    return host_has("avx512vnni")


def conv_module(shape, weight, dtype, *, strides, padding, dilation, groups=1):
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=shape, dtype=dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(
                relax.op.nn.conv2d(
                    x,
                    relax.const(weight, "int8"),
                    strides=strides,
                    padding=padding,
                    dilation=dilation,
                    groups=groups,
                    out_dtype="int32",
                )
            )
        bb.emit_func_output(y)
    return bb.get()


def build(module, target_table):
    import tvm

    from modelbuild.compiler import lowering

    target = tvm.target.Target(target_table)
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, target, fuse=True, layout=None, schedule=True)
        executable = tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))
    return executable, phases


def reference(x, weight, *, strides, padding, dilation):
    """The int8 conv in int64 numpy; a weight of one input channel per output channel is depthwise."""
    (sh, sw), (dh, dw), (top, left, bottom, right) = strides, dilation, padding
    depthwise = weight.shape[1] == 1 and weight.shape[0] == x.shape[1] > 1
    data = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    out_ch, _, kh, kw = weight.shape
    out_h = (data.shape[2] - dh * (kh - 1) - 1) // sh + 1
    out_w = (data.shape[3] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((x.shape[0], out_ch, out_h, out_w), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = data[:, :, i * dh : i * dh + sh * (out_h - 1) + 1 : sh, j * dw : j * dw + sw * (out_w - 1) + 1 : sw]
            taps = weight[:, :, i, j].astype(np.int64)
            out += patch * taps[None, :, 0, None, None] if depthwise else np.einsum("nchw,oc->nohw", patch, taps)
    return out


GEOMETRIES = [  # (data shape, weight shape, strides, padding, dilation, data dtype)
    # output widths that are not a multiple of 16: output channels in the vector lanes
    ((1, 16, 12, 12), (32, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "int8"),
    ((1, 3, 17, 20), (8, 3, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), "int8"),  # 3 channels, stride 2, odd sizes
    # 13 x 11 pixels: no cut into rows of another width takes column lanes either (compiler/passes/pixel_rows.py)
    ((1, 24, 13, 11), (20, 24, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), "uint8"),
    ((1, 8, 11, 11), (16, 8, 3, 3), (1, 1), (2, 1, 0, 2), (2, 2), "int8"),  # uneven padding, dilation 2
    # output widths of 16 and 32: output columns in the vector lanes
    ((1, 20, 3, 32), (40, 20, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), "int8"),  # 20 channels, 40 outputs
    ((1, 3, 9, 32), (8, 3, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), "int8"),  # stride 2: columns split by phase
    ((1, 8, 7, 48), (24, 8, 5, 3), (1, 3), (2, 1, 2, 2), (1, 2), "uint8"),  # 5x3, stride (1, 3), dilation 2
    # an output width of 29: column lanes on 32 columns, the last 3 dropped
    ((1, 12, 5, 29), (20, 12, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "int8"),
    # rows of 1 and 3 columns: several blocks of output channels accumulate together
    ((1, 64, 1, 1), (80, 64, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), "int8"),  # a squeeze-and-excite conv
    ((1, 16, 6, 3), (48, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "uint8"),
]


def output_width(geometry) -> int:
    """The conv's output width from its geometry alone (not from the numpy reference under test)."""
    shape, wshape, strides, padding, dilation, _ = geometry
    span = dilation[1] * (wshape[3] - 1) + 1
    return (shape[3] + padding[1] + padding[3] - span) // strides[1] + 1


def case(geometry):
    shape, wshape, strides, padding, dilation, dtype = geometry
    rng = np.random.default_rng(len(shape) + wshape[0])
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    weight = rng.integers(-128, 128, wshape).astype(np.int8)
    module = conv_module(shape, weight, dtype, strides=strides, padding=padding, dilation=dilation)
    return x, weight, module, reference(x, weight, strides=strides, padding=padding, dilation=dilation)


GEOMETRY_IDS = lambda g: f"{g[0][1]}x{g[1][0]}k{g[1][2]}s{g[2][0]}w{g[0][3]}{g[5]}"  # noqa: E731


AVX2_CPU = {"kind": "llvm", "mcpu": "znver3", "num-cores": 2}  # AMD Zen 3: AVX2, no AVX-512


def host_has_avx2() -> bool:
    return host_has("avx2")


DOTPROD = {
    "kind": "llvm",
    "mtriple": "aarch64-linux-gnu",
    "mcpu": "neoverse-n1",
    "mattr": ["+neon", "+dotprod"],
    "num-cores": 4,
}


def kernels_of(phases) -> list[str]:
    return [f.script() for f in phases.fused.functions.values() if hasattr(f, "params") and "sblock" in f.script()]


def assembly_of(executable) -> str:
    return "".join(m.inspect_source("asm") for m in executable.mod.imports)


def run_on_device(library, on: dict, x: np.ndarray):
    """(what the device says of itself, the library's output for x); the device's session ends on return,
    which frees the one emulated device for the next library."""
    from modelbuild.measurement import device

    run, _, described = device.load(str(library), on)
    return described, run([x])[0]


AMX_CPU = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2}
