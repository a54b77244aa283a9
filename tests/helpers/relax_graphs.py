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
