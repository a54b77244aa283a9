"""A heterogeneous build: the model's operators split between a GPU and the CPU, with the copies between them.

TVM has a GPU kernel for an operator where its GPU pipeline lowers it to PrimFuncs that its GPU schedules
(dlight) schedule, with no call into its CPU runtime (nonzero, unique); placement.py then decides from a cost
model. The main function is rewritten with Relax's virtual devices: its inputs on the CPU, each operator's
operands copied (`R.to_vdevice`, once per value and device) to where it runs, and TVM's own pipeline compiles
each device's kernels for its target. The VM loads the weights on its first device: the placement says which
that is.
"""

from __future__ import annotations

from modelbuild.compiler.lowering import tensor_bytes
from modelbuild.errors import StageError
from modelbuild.gpu.placement import CONSTANT, CPU, GPU, INPUT, Operator, Placement, place

# TVM's GPU schedules, in the order its default cuda pipeline tries them
GPU_RULES = ("Matmul", "GEMV", "Reduction", "GeneralReduction", "Fallback")
CPU_TARGET = {"kind": "llvm"}


def build_target(gpu_target):
    """The target TVM compiles a heterogeneous module for: the GPU's, with the CPU as its host."""
    import tvm

    return tvm.target.Target(gpu_target, host=CPU_TARGET)


def split(module, gpu_target) -> tuple[object, list[Operator], Placement]:
    """(the module with main's operators placed and the copies inserted, its operators, their placement)."""
    operators = find_operators(module, gpu_target)
    placement = place(operators)
    return placed_module(module, gpu_target, operators, placement), operators, placement


def _bindings(function) -> list:
    from tvm import relax

    body = function.body
    if not isinstance(body, relax.SeqExpr):
        raise StageError("a heterogeneous build needs a main function of bindings")
    return [binding for block in body.blocks for binding in block.bindings]


def _keyed(function) -> list[tuple[object, str]]:
    """main's bindings, each with a name of its own: the importer reuses a name down a chain of bindings
    (HardSigmoid_1 three times), so a repeated one gets #2, #3."""
    seen: dict[str, int] = {}
    keyed = []
    for binding in _bindings(function):
        seen[binding.var.name] = seen.get(binding.var.name, 0) + 1
        count = seen[binding.var.name]
        keyed.append((binding, binding.var.name if count == 1 else f"{binding.var.name}#{count}"))
    return keyed


def find_operators(module, gpu_target) -> list[Operator]:
    """main's bindings that compute, as the cost model sees them: whether TVM's GPU pipeline has a kernel for
    each (`on_gpu`), its FLOPs there (TVM's estimate) and its operands' bytes. A binding that computes nothing
    (a tuple's item, a shape) is no operator: it stays with what it reads."""
    import tvm
    from tvm import relax

    # the figure dlight would assume for a target that does not say, given so that it does not say so per call
    gpu = tvm.target.Target({"max_shared_memory_per_block": 49152, **gpu_target})
    names: dict[object, str] = {p: INPUT + p.name for p in module["main"].params}  # each value's operand name
    lowered: dict[str, tuple[bool, str, int] | None] = {}  # on_gpu's answer, by the call's signature
    operators = []
    for binding, key in _keyed(module["main"]):
        value = binding.value
        if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
            source = _source(value)  # a tuple's item, or a plain alias: the operator it reads
            if source is not None and source in names:
                names[binding.var] = names[source]
            continue
        signature = _signature(value)
        if signature not in lowered:
            lowered[signature] = on_gpu(value, gpu)
        if lowered[signature] is None:
            continue
        names[binding.var] = key
        kernel, why, flops = lowered[signature]
        operands = [_operand(arg, names) for arg in value.args]
        operators.append(
            Operator(
                name=key,
                op=value.op.name,
                operands=tuple(operand for operand in operands if operand is not None),
                out_bytes=_bytes(binding.var.ty),
                flops=flops,
                gpu_kernel=kernel,
                why_cpu=why,
            )
        )
    return operators


def on_gpu(call, gpu) -> tuple[bool, str, int] | None:
    """(whether TVM's GPU pipeline has a kernel for this call, why not, its FLOPs), found by lowering the call
    alone as that pipeline would (sort and scan dispatch, legalisation, dlight's schedules); None for a call
    that lowers to no kernel on either device (a shape)."""
    import tvm
    from tvm import relax
    from tvm.s_tir import dlight

    builder = relax.BlockBuilder()
    operands = [
        relax.Var(f"operand{i}", arg.ty) if isinstance(arg, relax.Var) else arg for i, arg in enumerate(call.args)
    ]
    with builder.function("main", [o for o in operands if isinstance(o, relax.Var)]):
        output = builder.emit(relax.Call(call.op, operands, call.attrs, call.ty_args))
        builder.emit_func_output(output)
    with gpu:
        lowered = relax.backend.DispatchSortScan()(builder.get())
        lowered = relax.transform.LegalizeOps()(lowered)
        lowered = dlight.ApplyDefaultSchedule(*(getattr(dlight.gpu, rule)() for rule in GPU_RULES))(lowered)
    calls = [b.value for b in _bindings(lowered["main"]) if isinstance(b.value, relax.Call)]
    names = [getattr(c.op, "name", "") for c in calls]
    kernels = [f for f in lowered.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    if not kernels and not any(name.startswith("relax.call") for name in names):
        return None
    flops = sum(_flops(kernel) for kernel in kernels)
    outside = [name for name in names if name not in ("relax.call_tir",) and name.startswith("relax.call")]
    if outside:
        return False, f"no GPU kernel: TVM runs {call.op.name} as a call into its CPU runtime", flops
    left = [name for name in names if name != "relax.call_tir" and not name.startswith("relax.call")]
    unscheduled = [k for k in kernels if not (k.attrs and k.attrs.get("tirx.is_scheduled"))]
    if unscheduled or (left and not kernels):
        return False, f"no GPU kernel: TVM's GPU schedules have none for {call.op.name}", flops
    return True, "", flops


def _signature(call) -> str:
    """What decides a call's lowering: its op, attributes and operand types (not which values it reads)."""
    return f"{call.op.name}|{call.attrs}|{[str(arg.ty) for arg in call.args]}"


def _source(value):
    """The variable a binding that computes nothing reads: a tuple's (its first field's, for a tuple made)."""
    from tvm import relax

    if isinstance(value, relax.TupleGetItem):
        value = value.tuple_value
    if isinstance(value, relax.Tuple) and len(value.fields):
        value = value.fields[0]
    return value if isinstance(value, relax.Var) else None


def _flops(kernel) -> int:
    import tvm
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return int(estimate_tir_flops(tvm.IRModule({"main": kernel})))
    except Exception:  # noqa: BLE001  (an estimate TVM cannot make counts as none: the bytes still decide)
        return 0


def _operand(arg, names: dict) -> tuple[str, int] | None:
    """(the operand's name for the cost model, its bytes); None for what crosses no device (a scalar, a
    shape, a value no operator produced)."""
    from tvm import relax
    from tvm.ir import Constant  # relax constants are tvm.ir.Constant in TVM 0.27

    if isinstance(arg, Constant):
        return None if _scalar(arg) else (f"{CONSTANT}{hash(arg)}", _bytes(arg.ty))
    if isinstance(arg, relax.Var) and arg in names:
        return (names[arg], _bytes(arg.ty))
    return None


def _bytes(info) -> int:
    from tvm import relax

    if isinstance(info, relax.TupleType):
        return sum(_bytes(field) for field in info.fields)
    return tensor_bytes(info)


def placed_module(module, gpu_target, operators: list[Operator], placement: Placement, vdevices=None):
    """main rewritten onto the two virtual devices: its inputs on the CPU, each placed operator's operands
    copied to where it runs (each value once per device), and the rest inferred from what it reads
    (RealizeVDevice). `vdevices` ({GPU: ..., CPU: ...}) replaces the two, as a test does to run the split on
    two CPU devices."""
    import tvm
    from tvm import relax
    from tvm.ir import Constant

    vdevices = vdevices or {
        GPU: relax.VDevice(tvm.target.Target(gpu_target), 0, "global"),
        CPU: relax.VDevice(tvm.target.Target(CPU_TARGET), 0, "global"),
    }
    main = module["main"]
    device_of = dict(zip((o.name for o in operators), placement.devices))
    where = {b.value: device_of[key] for b, key in _keyed(main) if key in device_of}
    params = {p: relax.Var(p.name, _on(p.ty, vdevices[CPU])) for p in main.params}

    copies: dict = {}  # (value, device) -> its copy there, made once

    @relax.expr_functor.mutator
    class Place(relax.PyExprMutator):
        def visit_var_(self, var):
            return params[var] if var in params else super().visit_var_(var)

        def visit_call_(self, call):
            new = super().visit_call_(call)
            device = where.get(call)
            if device is None:
                return new
            args = [self._on_device(arg, device) for arg in new.args]
            return relax.Call(new.op, args, new.attrs, new.ty_args)

        def _on_device(self, arg, device):
            if not isinstance(arg, relax.Var | Constant) or _scalar(arg):
                return arg
            here = arg.ty.vdevice if isinstance(arg.ty, relax.TensorType) else None
            known = [name for name, vdevice in vdevices.items() if here is not None and _same(here, vdevice)]
            home = known[0] if known else (placement.weights_on if isinstance(arg, Constant) else None)
            if home in (None, device):
                return arg
            if (arg, device) not in copies:
                copies[(arg, device)] = self.builder_.emit(relax.op.to_vdevice(arg, vdevices[device]))
            return copies[(arg, device)]

    body = Place(module).visit_expr(main.body)
    placed = relax.Function(list(params.values()), body, attrs=main.attrs)
    result = module.clone()
    result["main"] = placed
    result.update_global_info("vdevice", [vdevices[device] for device in placement.vm_devices])
    return relax.transform.RealizeVDevice()(result)


def _same(one, other) -> bool:
    def key(vdevice):
        return str(vdevice.target), int(vdevice.vdevice_id), str(vdevice.memory_scope)

    return key(one) == key(other)


def _scalar(arg) -> bool:
    """A scalar constant: TVM's fusion makes it an immediate of the kernel, on whichever device."""
    from tvm.ir import Constant

    return isinstance(arg, Constant) and getattr(arg.ty, "ndim", 0) == 0  # a PrimType has no ndim


def _on(info, vdevice):
    from tvm import relax

    if isinstance(info, relax.TensorType):
        return relax.TensorType(info.shape, info.dtype, vdevice)
    return info
