"""The relax pipeline of tvm.compile for CPU targets, run phase by phase so the IR between the phases can be
read: after legalisation (primitive operators), after fusion (kernels), and after memory planning.

This mirrors tvm.relax.backend.cpu_generic.get_default_pipeline in TVM 0.27; the remaining finalisation
passes run inside tvm.compile. Every call into TVM's IR for the fusion and memory figures is in this file.

Note: in TVM 0.27, tvm.compile(mod, target=llvm) uses the *generic* default pipeline, which does not fuse
(relax/vm_build.py keeps the fusing CPU pipeline for GPU targets only, wary of fusion dropping unused
call_pure_packed results). ONNX-imported models have no such calls, so modelbuild fuses by default: on the
bundled classifier 271 operators become 69 kernels and the library shrinks from 2.0 MB to 1.4 MB.
`fuse = false` in a build gives the stock, unfused library.

Before legalisation, float convs are converted to channels-last (channels_last.py: `layout = "auto"`, the
default), so the default schedule vectorises them over output channels rather than output columns.
Grouped convs whose groups are narrower than a vector are merged into groups one vector wide on the way,
with zeros between the merged groups' weights (group_blocks.py), so that a vector of output channels reads
one input channel, not a gather. Transposed convs whose stride equals their kernel become 1x1 convs and a
depth-to-space (conv_transpose.py), which is exact, convs on maps smaller than their kernel lose the kernel
rows and columns that only ever multiply padding (padding_taps.py, exact too), matmuls and convs whose output
channels no vector width divides compute them rounded up to whole vectors (channel_padding.py), and int8
1x1 convs whose rows the packed kernels' vector lanes do not divide are computed on their pixels cut into
rows that they do (pixel_rows.py), and chains of element-wise steps by constants (an int8 conv's rescale,
bias and a model's affine blocks) become one addition and one multiplication (affine_folding.py); a quantize
of a concatenation of nearest upsamplings is computed before them, so they move int8 (early_quantize.py).
FuseOps fuses a nearest upsampling into the kernel of the element-wise step that reads it, unless that
kernel's conv computes more than a pixel (upsample_fusion.py).
A TopK becomes top_k.py's kernel before TVM's sort dispatch sees it.
These run whether or not the default schedule does, so the tune stage sees the kernels the compile stage
builds. exp, erf, tanh, sigmoid and softmax are legalised as polynomials that stay in vectors (fast_math.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from modelbuild.compiler import default_schedule, fast_math, layer_names
from modelbuild.compiler.analysis import KernelCall, Step
from modelbuild.compiler.kernels import (
    layer_norm,
    linear_upsample,
    narrow_matmul,
    nearest_upsample,
    packed_gemv,
    scatter_nd,
    strided_pool,
    top_k,
)
from modelbuild.compiler.kernels.integer_kernels import (
    conv_instruction,
    legalize_conv2d,
    legalize_matmul,
    legalize_quantize,
)
from modelbuild.compiler.passes import (
    affine_folding,
    channel_padding,
    channels_last,
    column_padding,
    column_phases,
    constant_folding,
    conv_transpose,
    early_quantize,
    float16_compute,
    group_blocks,
    padding_taps,
    pixel_rows,
    pointwise_matmul,
    reshape_sinking,
    transpose_folding,
    upsample_fusion,
)
from modelbuild.compiler.relax_rewrite import operator_name

_ALIAS_OPS = {"relax.reshape", "relax.memory.view"}


@dataclass
class Phases:
    """The module at each point of the pipeline the reports look at."""

    legalized: object  # primitive operators as call_tir, constants folded
    grouped: object  # after FuseOps: fused groups as Primitive functions
    fused: object  # after FuseTIR: one call_tir per kernel
    lowered: object  # explicit allocations, before memory planning
    planned: object  # after StaticPlanBlockMemory
    layout: str = channels_last.KEPT  # the conv layout used: CONVERTED, or KEPT and why where it was asked for


def lower(module, target, *, fuse: bool, layout: str | None, database=None, schedule: bool = False) -> Phases:
    """Run the CPU pipeline up to memory planning; call inside `with target:` and a PassContext.

    With a MetaSchedule database, the kernels it has records for get their tuned schedules after fusion;
    with `schedule`, every other kernel gets the default schedule (default_schedule.py)."""
    import tvm
    from tvm import relax
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    seq = tvm.transform.Sequential
    module = seq([float16_compute.transform(), conv_transpose.transform(), padding_taps.transform()])(module)
    module, used_layout = _channels_last(module, layout)  # a choice as well as a rewrite: it says which layout
    instruction = conv_instruction(target)
    module = seq(
        [
            transpose_folding.transform(),
            channel_padding.transform(),
            constant_folding.transform(),
            affine_folding.transform(),
            early_quantize.transform(),
            # computed once, used twice: smoothing gives each conv reading a tensor the same divisor, so the
            # QDQ graph quantizes that tensor once per conv with equal constants (6 of the DB detector's 10
            # quantize kernels), and the one left fuses into the kernel that makes the tensor
            relax.transform.EliminateCommonSubexpr(),
            # the float pointwise convs as matmuls, once their scales and biases are folded into them and the
            # quantized ones are integer convs; the matmuls' columns padded to whole vectors as any matmul's are
            pointwise_matmul.transform(),
            reshape_sinking.transform(),  # their epilogues fused into the matmuls
            channel_padding.transform(),
            # the NCHW convs left: strided ones over their columns' phases, then all over rows of whole vectors
            column_phases.transform(),
            column_padding.transform(),
            *([pixel_rows.transform(instruction.lanes)] if instruction is not None else []),
        ]
    )(module)

    legalize = relax.transform.LegalizeOps(
        customize_legalize_map={
            "relax.quantize": legalize_quantize,
            "relax.nn.conv2d": legalize_conv2d,
            "relax.matmul": _legalize_matmul,
            "relax.image.resize2d": _legalize_resize2d,
            "relax.nn.max_pool2d": strided_pool.legalize,
            "relax.nn.avg_pool2d": strided_pool.legalize,
            "relax.nn.layer_norm": layer_norm.legalize,
            "relax.scatter_nd": scatter_nd.legalize,
            **fast_math.legalizations(),
        }
    )
    legalized = seq(
        # top_k before the library dispatch, which would send topk to TVM's full sort
        [top_k.transform(), *cpu.library_dispatch_passes(target)]
        + [legalize, relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant()]
    )(module)
    grouped = upsample_fusion.transform()(legalized) if fuse else legalized
    fused = relax.transform.FuseTIR()(grouped) if fuse else legalized
    if database is not None:
        with database:
            fused = relax.transform.MetaScheduleApplyDatabase()(fused)
    if schedule:
        fused = default_schedule.apply(fused, target)
    lowered = seq(cpu.dataflow_lower_passes(target))(fused)
    planned = relax.transform.StaticPlanBlockMemory()(lowered)
    return Phases(legalized, grouped, fused, lowered, planned, used_layout)


def _legalize_resize2d(bb, call):
    """A linear upsampling by whole factors in two passes of taps (linear_upsample.py); any other resize as
    nearest_upsample.py legalises it (its own kernel, or TVM's)."""
    kernel = linear_upsample.legalize if linear_upsample.eligible(call) else nearest_upsample.legalize_resize2d
    return kernel(bb, call)


def _legalize_matmul(bb, call):
    """A float GEMV by constant weights on packed weights (packed_gemv.py), a float matmul by one to three
    columns, constant or computed, on its columns one after another (narrow_matmul.py); any other matmul as the integer
    kernels legalise it (int8 by constant int8 weights), or TVM."""
    call = _with_constant_weights(bb, call)
    if packed_gemv.eligible(call):
        return packed_gemv.legalize(bb, call)
    if narrow_matmul.eligible(call):
        return narrow_matmul.legalize(bb, call)
    return legalize_matmul(bb, call)


def _with_constant_weights(bb, call):
    """The matmul reading as a constant the weights a variable names where it is bound to one: a Gemm's
    transposed weights, folded by constant_folding, stay a binding, and the packed kernels take constants only
    (openWakeWord's detector's GEMVs, Gemm layers of PyTorch's Linear, were not packed)."""
    from tvm import relax
    from tvm.ir import Constant

    weights = call.args[1]
    bound = bb.lookup_binding(weights) if isinstance(weights, relax.Var) else None
    if not isinstance(bound, Constant):
        return call
    return bb.normalize(relax.Call(call.op, [call.args[0], bound], call.attrs))


def _channels_last(module, layout: str | None):
    """channels_last.convert, with grouped convs merged (group_blocks) where the convs do end up channels-last:
    in the model's NCHW their vectors run over columns, where there is no gather to save and the merged
    groups would only multiply more zeros."""
    if layout not in channels_last.LAYOUTS:  # nothing goes channels-last: no merge to try
        return module, channels_last.KEPT
    converted, used_layout = channels_last.convert(group_blocks.transform()(module), layout)
    return (converted, used_layout) if used_layout == channels_last.CONVERTED else channels_last.convert(module, layout)


def finish_passes(target):
    """What tvm.compile must still run on the planned module: the CPU finalisation after memory planning."""
    import tvm
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    rest = [p for p in cpu.finalize_passes(target) if "StaticPlanBlockMemory" not in str(p.info.name)]
    return tvm.transform.Sequential(rest)


def _bindings(function):
    for block in function.body.blocks:
        yield from block.bindings


def tensor_bytes(ty) -> int:
    """Bytes of a tensor type with a static shape (0 for anything else)."""
    import tvm

    shape = getattr(ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        return 0
    try:
        dims = [int(v) for v in shape.values]
    except TypeError:  # a dimension known only at run time: the boxes a NonMaxSuppression keeps
        return 0
    dtype = tvm.runtime.DataType(str(ty.dtype))
    return math.prod(dims) * dtype.bits * dtype.lanes // 8


def _tensor_args(call) -> list:
    args = call.args[1]
    return list(args.fields) if hasattr(args, "fields") else [args]


def kernel_calls(module, grouped=None, legalized=None) -> list[KernelCall]:
    """Every call_tir in main, with bytes read and written; op names of fused kernels come from `grouped`,
    and with `legalized` too, the ONNX layers each call computes."""
    ops_of = _group_ops(grouped) if grouped is not None else {}
    sites = [b for b in _bindings(module["main"]) if _is_call_tir(b.value)]
    layers = _layers_per_call(grouped, legalized) if legalized is not None else [_layers([b.var.name]) for b in sites]
    if len(layers) != len(sites):  # calls that do not line up: no layers rather than wrong ones
        layers = [()] * len(sites)
    calls = []
    for binding, named in zip(sites, layers):
        call = binding.value
        kernel = call.args[0].name_hint
        read = sum(tensor_bytes(arg.ty) for arg in _tensor_args(call))
        write = sum(tensor_bytes(t) for t in _out_types(binding.var.ty))
        calls.append(KernelCall(kernel, tuple(ops_of.get(kernel, [op_name(kernel)])), read, write, named))
    return calls


def launched_kernel_calls(module, grouped=None, legalized=None) -> list[KernelCall]:
    """kernel_calls, but only the calls that run as kernels: a call to a reshape of a whole tensor becomes a
    view of it in the first lowering pass (RewriteDataflowReshape), which launches nothing and moves no bytes
    (61 of the layout net's 206 int8 calls)."""
    from tvm import relax

    rewritten = relax.transform.RewriteDataflowReshape()(module)
    views = {b.var for b in _bindings(rewritten["main"]) if not _is_call_tir(b.value)}  # the pass keeps the vars
    sites = [b for b in _bindings(module["main"]) if _is_call_tir(b.value)]
    return [call for call, site in zip(kernel_calls(module, grouped, legalized), sites) if site.var not in views]


def _is_call_tir(value) -> bool:
    return operator_name(value) == "relax.call_tir"


def _out_types(ty) -> list:
    return list(ty.fields) if hasattr(ty, "fields") else [ty]


def _group_ops(grouped) -> dict[str, list[str]]:
    """Fused function name -> the primitive ops it merged, in order (FuseTIR keeps the name)."""
    return {name: [op_name(k) for k in kernels] for name, kernels in _primitive_functions(grouped).items()}


def _primitive_functions(grouped) -> dict[str, list[str]]:
    """Fused function name -> the primitive kernels it calls, in order."""
    from tvm import relax

    return {
        gv.name_hint: [b.value.args[0].name_hint for b in _bindings(func) if _is_call_tir(b.value)]
        for gv, func in grouped.functions.items()
        if isinstance(func, relax.Function) and func.attrs and "Primitive" in func.attrs
    }


def _layers_per_call(grouped, legalized) -> list[tuple[str, ...]]:
    """The ONNX layers of each kernel call of the fused module, in order.

    Before fusion every primitive call is bound to a variable named after its layer (the import stage's
    names, kept through legalisation). FuseOps then names the bindings it groups anew, but keeps their
    order: walking the grouped main, each fused call takes the next primitive calls of the legalised main.
    A walk that does not line up returns nothing."""
    import tvm

    primitive = [(b.value.args[0].name_hint, b.var.name) for b in _bindings(legalized["main"]) if _is_call_tir(b.value)]
    fused = _primitive_functions(grouped)
    out, at = [], 0
    for binding in _bindings(grouped["main"]):
        op = getattr(binding.value, "op", None)
        if _is_call_tir(binding.value):
            kernels = [binding.value.args[0].name_hint]
        elif isinstance(op, tvm.ir.GlobalVar) and op.name_hint in fused:
            kernels = fused[op.name_hint]
        else:
            continue
        segment = primitive[at : at + len(kernels)]
        if [kernel for kernel, _ in segment] != kernels:
            return []
        out.append(_layers([name for _, name in segment]))
        at += len(kernels)
    return out


def _layers(names: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n for n in names if layer_names.is_layer(n)))


def op_name(kernel: str) -> str:
    """The operator a legalised kernel implements: 'conv2d12' -> 'conv2d', 'tir_clip1' -> 'clip'."""
    return re.sub(r"\d+$", "", kernel.removeprefix("tir_"))


def steps(module) -> tuple[list[Step], set[str]]:
    """The lowered main as allocation, use and alias steps, and the variables it returns, each variable named
    uniquely: names repeat (the import names every binding of an ONNX node after the node, so a Softmax's
    reshape of its own result carries the result's name), and an alias of a name to itself never ends."""
    from tvm import relax

    out = []
    for binding in _bindings(module["main"]):
        name, value = _unique_name(binding.var), binding.value
        uses = tuple(_unique_name(v) for v in relax.analysis.free_vars(value))
        op = operator_name(value)
        if op == "relax.builtin.alloc_tensor":
            out.append(Step(allocates={name: tensor_bytes(binding.var.ty)}, uses=uses))
        elif isinstance(value, relax.Var) or op in _ALIAS_OPS:
            out.append(Step(uses=uses, alias={name: uses[0]} if uses else {}))
        else:
            out.append(Step(uses=uses))
    returned = {_unique_name(v) for v in relax.analysis.free_vars(module["main"].body.body)}
    return out, returned


def _unique_name(var) -> str:
    return f"{var.name}#{hash(var)}"  # a TVM object's hash is its identity


def planned_storage_bytes(module) -> int:
    """Bytes of every storage block StaticPlanBlockMemory allocated in main."""
    total = 0
    for binding in _bindings(module["main"]):
        value = binding.value
        if operator_name(value) == "relax.memory.alloc_storage":
            total += int(value.args[0].values[0])
    return total


def kernel_flops_and_args(module) -> tuple[dict[str, int], dict[str, list]]:
    """FLOPs of each PrimFunc (TVM's estimate) and the shape and dtype of each of its buffer arguments."""
    import tvm
    from tvm import tirx
    from tvm.s_tir.analysis import estimate_tir_flops

    flops, args = {}, {}
    for gv, func in module.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        try:
            flops[gv.name_hint] = int(estimate_tir_flops(tvm.IRModule({"main": func})))
        except Exception:  # an estimate TVM cannot make just leaves the kernel off the roofline
            continue
        # in TVM 0.27 a PrimFunc's parameters are buffer variables carrying their own shape and dtype
        if all(getattr(p, "shape", None) is not None and _static(p.shape) for p in func.params):
            args[gv.name_hint] = [[[int(d) for d in p.shape], str(p.dtype)] for p in func.params]
    return flops, args


def _static(shape) -> bool:
    try:
        [int(d) for d in shape]
        return True
    except (TypeError, ValueError):
        return False


def refused_steps(module) -> dict:
    """The default schedule's steps TVM refused, per kernel (only kernels with any) and in all: a step
    that TVM starts to refuse (after an upgrade) shows here before it shows as speed."""
    per_kernel = {}
    for gv, func in module.functions.items():
        count = (
            int(func.attrs[default_schedule.REFUSED]) if func.attrs and default_schedule.REFUSED in func.attrs else 0
        )
        if count:
            per_kernel[gv.name_hint] = count
    return {"refused_steps": sum(per_kernel.values()), "kernels": dict(sorted(per_kernel.items()))}
