"""Nearest-neighbour upsamplings fused into the kernel of the element-wise step that reads them, where that
kernel computes no more than a pixel per channel before it: the DB detectors' squeeze-and-excite FPN, whose
every level adds the coarser level upsampled (x + x * gate(x) + upsample(coarser), the gate a 1x1 conv of one
pixel, the kernel's anchor).

TVM's FuseOps takes a resize for an injective op, which joins a kernel only where every op from it to that
kernel's anchor is injective too: behind a conv's epilogue it never does, so each level's upsampled map was
written whole (96 x 160 x 160 floats at the detector's finest level, 9.8 MB, 0.21 ms) and read back. As a
broadcast (op_pattern 1, a bias's kind) FuseOps fuses it into its element-wise consumer's kernel, where the
default schedule computes it row by row as that consumer reads it (one load and one shuffle a vector:
kernels/nearest_upsample.py).

Not into a kernel whose conv or matmul computes more than one pixel: the hand-written int8 convs expect no
such block and would refuse it, leaving the conv to the generic steps; there the upsampling stays a kernel of
its own, as TVM fuses it.
"""

from __future__ import annotations

from modelbuild.compiler.kernels import nearest_upsample
from modelbuild.compiler.relax_rewrite import known_dims, module_pass, operator_name

BROADCAST, INJECTIVE, OUT_ELEMWISE_FUSABLE = 1, 2, 4  # TVM's OpPatternKind


def transform():
    """`fuse` as a module pass: FuseOps, with nearest upsamplings fused as broadcasts."""
    return module_pass(fuse, "FuseOpsUpsampling")


def fuse(legalized):
    """FuseOps with every nearest upsampling marked a broadcast, except those it would put in a kernel with a
    conv or matmul of more than one pixel (see the module's docstring)."""
    from tvm import relax

    # by name first: building a schedule to find the block costs ~1 ms a function (264 in the DB detector)
    marked = [
        gv
        for gv, func in legalized.functions.items()
        if gv.name_hint.startswith(nearest_upsample.FUNCTION) and _upsamples(func)
    ]
    module = _with_pattern(legalized, marked, BROADCAST)
    while True:  # unmarking one changes only where it goes, but fuse again until none is refused
        grouped = relax.transform.FuseOps()(module)
        refused = list(_beside_wide_anchors(grouped, marked))
        if not refused:
            return grouped
        module = _with_pattern(module, refused, INJECTIVE)
        marked = [gv for gv in marked if not any(gv.same_as(r) for r in refused)]


def _upsamples(func) -> bool:
    from tvm import tirx
    from tvm.s_tir import Schedule, ScheduleError

    if not isinstance(func, tirx.PrimFunc):
        return False
    try:
        Schedule(func).get_sblock(nearest_upsample.BLOCK)
    except ScheduleError:
        return False
    return True


def _with_pattern(module, gvs, pattern: int):
    module = module.clone()
    for gv in gvs:
        module.update_func(gv, module[gv].with_attr("op_pattern", pattern))
    return module


def _beside_wide_anchors(grouped, marked):
    """The marked upsamplings that FuseOps put in a fused function beside a conv or matmul of more than one
    pixel."""
    from tvm import relax

    for func in grouped.functions.values():
        if not isinstance(func, relax.Function) or not func.attrs or "Primitive" not in func.attrs:
            continue
        calls = [b for block in func.body.blocks for b in block.bindings if operator_name(b.value) == "relax.call_tir"]
        kernels = [b.value.args[0] for b in calls]
        inside = [gv for gv in marked if any(gv.same_as(k) for k in kernels)]
        if inside and any(_wide_anchor(grouped[k], b.var.ty) for k, b in zip(kernels, calls)):
            yield from inside


def _wide_anchor(kernel, out_type) -> bool:
    """Whether the kernel is a conv or matmul whose output is not one pixel per channel (NCHW, H x W = 1)."""
    pattern = kernel.attrs["op_pattern"] if kernel.attrs is not None and "op_pattern" in kernel.attrs else None
    if pattern is None or int(pattern) != OUT_ELEMWISE_FUSABLE:
        return False
    shape = known_dims(getattr(out_type, "shape", None))
    if shape is None:
        return True
    return len(shape) != 4 or shape[2] * shape[3] != 1
