"""Which device runs each operator of a heterogeneous build (`devices = ["cuda", "llvm"]`), from a cost model.

An operator without a GPU kernel in TVM (heterogeneous.py finds which) runs on the CPU. For the rest, the
model is a roofline per device (time = launch + max(FLOPs / peak, bytes / bandwidth)) and a copy cost
(latency + bytes / link bandwidth, each value copied once per device). Three placements are costed, and the
cheapest is built: operator by operator in the graph's order, each against the devices its operands already
sit on; everything that can on the GPU; everything on the CPU. The figures are estimates, not measurements:
the report shows what was decided, why, and the three estimates, and a GPU run's timings are what tell
whether the split paid.

Nothing here imports TVM: the decisions are tested on graphs written by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

GPU, CPU = "cuda", "llvm"
# operands that no operator produces, named by these prefixes: a function input arrives on the CPU, where the
# caller's arrays are; a weight is where the VM loads constants, on its first device (`weights_on`)
INPUT, CONSTANT = "input:", "constant:"


@dataclass(frozen=True)
class Operator:
    """One binding of the model's main function, as the cost model sees it."""

    name: str  # the binding's variable
    op: str  # relax.nn.conv2d, relax.topk, ...
    operands: tuple[tuple[str, int], ...]  # (an operator's name, or INPUT/CONSTANT + a name; its bytes)
    out_bytes: int
    flops: int
    gpu_kernel: bool  # whether TVM's GPU schedules (dlight) have a kernel for it
    why_cpu: str = ""  # why it has none, where gpu_kernel is False


@dataclass(frozen=True)
class Costs:
    """An A100-class GPU across PCIe 4 from a server CPU; the order of magnitude is what decides."""

    gpu_flops: float = 19.5e12
    gpu_bandwidth: float = 1.5e12
    gpu_launch: float = 5e-6
    cpu_flops: float = 1.0e12
    cpu_bandwidth: float = 100e9
    cpu_launch: float = 1e-6
    copy_bandwidth: float = 20e9
    copy_latency: float = 10e-6

    def run(self, operator: Operator, device: str) -> float:
        bytes_moved = operator.out_bytes + sum(size for _, size in operator.operands)
        if device == GPU:
            return self.gpu_launch + max(operator.flops / self.gpu_flops, bytes_moved / self.gpu_bandwidth)
        return self.cpu_launch + max(operator.flops / self.cpu_flops, bytes_moved / self.cpu_bandwidth)

    def copy(self, size: int) -> float:
        return self.copy_latency + size / self.copy_bandwidth


@dataclass(frozen=True)
class Placement:
    devices: tuple[str, ...]  # per operator, in order
    reasons: tuple[str, ...]  # per operator: why there
    copies: tuple[tuple[str, str, int], ...] = field(default=())  # (operand, to device, bytes), each made once
    # the cost model's time a call, in seconds, for this placement and the ones it was chosen over
    estimates: dict[str, float] = field(default_factory=dict)
    weights_on: str = GPU  # the VM's first device, where it loads the weights

    @property
    def vm_devices(self) -> list[str]:
        """The devices in the VM's order: the weights' first."""
        return [self.weights_on, CPU if self.weights_on == GPU else GPU]

    def summary(self, operators: list[Operator]) -> dict:
        """What the report shows: operators per device by op, the copies and their bytes, and each CPU
        operator with its reason."""
        by_device: dict[str, dict[str, int]] = {GPU: {}, CPU: {}}
        for operator, device in zip(operators, self.devices):
            ops = by_device[device]
            ops[operator.op] = ops.get(operator.op, 0) + 1
        on_cpu = [
            {"operator": o.name, "op": o.op, "why": why}
            for o, device, why in zip(operators, self.devices, self.reasons)
            if device == CPU
        ]
        return {
            "operators": {device: sum(ops.values()) for device, ops in by_device.items()},
            "by_op": {device: dict(sorted(ops.items())) for device, ops in by_device.items()},
            "copies": len(self.copies),
            "bytes_copied": sum(size for _, _, size in self.copies),
            "on_cpu": on_cpu,
            "estimated_ms": {name: round(seconds * 1e3, 3) for name, seconds in self.estimates.items()},
            "weights_on": self.weights_on,
            "vm_devices": self.vm_devices,
        }


def home(operand: str, placed: dict[str, str], weights_on: str = GPU) -> str:
    """Where an operand sits before any copy: its producer's device, the CPU for inputs, `weights_on` for
    weights."""
    if operand.startswith(INPUT):
        return CPU
    if operand.startswith(CONSTANT):
        return weights_on
    return placed[operand]


def place(operators: list[Operator], costs: Costs = Costs()) -> Placement:
    """The cheapest, by the cost model, of three placements: operator by operator (`greedy`), every operator
    with a GPU kernel on the GPU, and everything on the CPU. The greedy one decides each operator alone, and
    a model of many small operators can cross between the devices at every step; the other two bound it."""
    estimates: dict[str, float] = {}
    chosen: dict[str, Placement] = {}
    for name, make in (  # in the order a tie is settled: the placement with the fewest crossings first
        ("cpu", lambda weights: fixed(operators, CPU, "the whole model is cheaper on the CPU", weights)),
        ("gpu", lambda weights: fixed(operators, GPU, "on the GPU, as everything that has a GPU kernel", weights)),
        ("split", lambda weights: greedy(operators, costs, weights)),
    ):
        # the weights loaded where most of their readers run: the VM puts them all on its first device
        options = [make(weights) for weights in (CPU, GPU)]
        chosen[name] = min(options, key=lambda p: total_time(operators, p, costs))
        estimates[name] = total_time(operators, chosen[name], costs)
    best = min(chosen, key=lambda name: estimates[name])
    return replace(chosen[best], estimates=estimates)


def fixed(operators: list[Operator], device: str, why: str, weights_on: str = GPU) -> Placement:
    """Every operator on `device`, but those without a GPU kernel on the CPU."""
    chosen = [device if operator.gpu_kernel else CPU for operator in operators]
    reasons = [why if operator.gpu_kernel else operator.why_cpu or "no GPU kernel" for operator in operators]
    return Placement(tuple(chosen), tuple(reasons), _copies(operators, chosen, weights_on), weights_on=weights_on)


def total_time(operators: list[Operator], placement: Placement, costs: Costs) -> float:
    """The cost model's seconds a call: every operator where it is placed, and every copy."""
    running = sum(costs.run(o, device) for o, device in zip(operators, placement.devices))
    return running + sum(costs.copy(size) for _, _, size in placement.copies)


def _copies(operators: list[Operator], devices: list[str], weights_on: str) -> tuple[tuple[str, str, int], ...]:
    placed: dict[str, str] = {}
    copied: dict[tuple[str, str], int] = {}
    for operator, device in zip(operators, devices):
        placed[operator.name] = device
        for operand, size in operator.operands:
            if home(operand, placed, weights_on) != device:
                copied.setdefault((operand, device), size)
    return tuple((operand, device, size) for (operand, device), size in copied.items())


def greedy(operators: list[Operator], costs: Costs = Costs(), weights_on: str = GPU) -> Placement:
    """Each operator on the device where it costs least given where its operands already are (a copy of an
    operand to a device is paid once); an operator with no GPU kernel on the CPU."""
    placed: dict[str, str] = {}  # operator name -> device
    reasons: list[str] = []
    copied: dict[tuple[str, str], int] = {}  # (operand, device) -> bytes
    for operator in operators:
        if not operator.gpu_kernel:
            device, why = CPU, operator.why_cpu or "no GPU kernel"
        else:
            spent = {device: _cost(operator, device, placed, copied, costs, weights_on) for device in (GPU, CPU)}
            device = GPU if spent[GPU] <= spent[CPU] else CPU
            why = (
                "GPU kernel"
                if device == GPU
                else f"cheaper here ({spent[CPU] * 1e6:.0f} us against {spent[GPU] * 1e6:.0f} us on the GPU "
                "with its copies)"
            )
        placed[operator.name] = device
        reasons.append(why)
        for operand, size in operator.operands:
            if home(operand, placed, weights_on) != device:
                copied.setdefault((operand, device), size)
    copies = tuple((operand, device, size) for (operand, device), size in copied.items())
    return Placement(tuple(placed[o.name] for o in operators), tuple(reasons), copies, weights_on=weights_on)


def _cost(
    operator: Operator, device: str, placed: dict[str, str], copied: dict, costs: Costs, weights_on: str
) -> float:
    moves = sum(
        costs.copy(size)
        for operand, size in operator.operands
        if home(operand, placed, weights_on) != device and (operand, device) not in copied
    )
    return costs.run(operator, device) + moves
