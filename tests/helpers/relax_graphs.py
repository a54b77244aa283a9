"""Hand-built Relax graphs and what lowering makes of them, for the tests of the compiler modules."""

from __future__ import annotations

import numpy as np

SHAPE = (1, 8, 16, 16)


def build_module(body, shape=SHAPE, dtype: str = "float32"):
    """A main(x) whose dataflow block is written by `body(bb, x)` returning the output."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=shape, dtype=dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(body(bb, x))
        bb.emit_func_output(out)
    return bb.get()


def op_names(module) -> list[str]:
    """The operators main calls, in order of its bindings."""
    from tvm import relax

    return [
        b.value.op.name
        for block in module["main"].body.blocks
        for b in block.bindings
        if isinstance(b.value, relax.Call) and hasattr(b.value.op, "name")
    ]


def scheduled_kernel(module, name: str, *, schedule: bool, layout: str | None = None) -> tuple[str, object]:
    """The script of the kernel whose name has `name` after lowering, and the built library's main."""
    import tvm
    from tvm import relax, tirx

    from modelbuild.compiler import lowering

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, target, fuse=True, layout=layout, schedule=schedule)
        executable = tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))
    kernels = [f for gv, f in phases.fused.functions.items() if isinstance(f, tirx.PrimFunc) and name in gv.name_hint]
    assert len(kernels) == 1
    return kernels[0].script(), relax.VirtualMachine(executable, tvm.cpu())["main"]


def kernel_shapes(module, layout: str) -> dict[str, list]:
    """Each fused kernel's name -> the shapes of its buffer arguments, lowered with `layout`."""
    import tvm

    from modelbuild.compiler import lowering

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, target, fuse=True, layout=layout, schedule=True)
    return {
        name: [shape for shape, _ in args] for name, args in lowering.kernel_flops_and_args(phases.fused)[1].items()
    }


def grouped_conv(x: np.ndarray, w: np.ndarray, groups: int) -> np.ndarray:
    """A stride-1, unpadded grouped conv in float64: NCHW data, OIHW weights."""
    _, channels, height, width = x.shape
    out_channels, per_group_in, kh, kw = w.shape
    windows = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))  # n c y x i j
    out = []
    for g in range(groups):
        data = windows[:, g * per_group_in : (g + 1) * per_group_in]
        weights = w[g * (out_channels // groups) : (g + 1) * (out_channels // groups)]
        out.append(np.einsum("ncyxij,ocij->noyx", data, weights))
    return np.concatenate(out, axis=1)


def conv_module(shape, w, *, strides, padding, dilation, groups):
    """A main(x) of one float NCHW conv2d by the constant `w`, and its ReLU."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=shape, dtype="float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = relax.op.nn.conv2d(
                x, relax.const(w), strides=strides, padding=padding, dilation=dilation, groups=groups
            )
            out = bb.emit_output(relax.op.nn.relu(conv))
        bb.emit_func_output(out)
    return bb.get()


def padded_grouped_conv(x, w, *, strides, padding, dilation, groups) -> np.ndarray:
    """A grouped conv in float64 numpy: NCHW data, OIHW weights, padding (top, left, bottom, right)."""
    (sh, sw), (dh, dw), (top, left, bottom, right) = strides, dilation, padding
    data = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    out_ch, per_group, kh, kw = w.shape
    out_h = (data.shape[2] - dh * (kh - 1) - 1) // sh + 1
    out_w = (data.shape[3] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((x.shape[0], out_ch, out_h, out_w))
    per_out = out_ch // groups
    for g in range(groups):
        ins, outs = slice(g * per_group, (g + 1) * per_group), slice(g * per_out, (g + 1) * per_out)
        for i in range(kh):
            for j in range(kw):
                rows = slice(i * dh, i * dh + sh * (out_h - 1) + 1, sh)
                cols = slice(j * dw, j * dw + sw * (out_w - 1) + 1, sw)
                out[:, outs] += np.einsum("nchw,oc->nohw", data[:, ins, rows, cols], w[outs, :, i, j])
    return out
