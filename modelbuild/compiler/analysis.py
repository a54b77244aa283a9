"""What fusion and memory planning saved, computed from facts read off the IR: pure, no TVM.

A kernel call is described by the bytes of the tensors it reads and writes; main-memory traffic is their sum
over all calls. A chain of N element-wise kernels on a tensor of S bytes costs 2NS unfused and 2S fused, so
the ratio R is N. Memory: every intermediate in a buffer of its own (naive), the storage the planner
allocated (planned), and the lower bound M_peak = max over time of the bytes live at that time.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class KernelCall:
    """One call of a compiled kernel: its name, the primitive ops it merges, bytes read and written, and the
    ONNX layers it computes (empty where the IR kept no names)."""

    kernel: str
    ops: tuple[str, ...]
    read_bytes: int
    write_bytes: int
    layers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    """One binding of the lowered main function: tensors it allocates (name -> bytes) and names it uses.

    `alias` maps a name defined here to the tensor it views (a reshape, a plain rebinding).
    """

    allocates: dict[str, int] = field(default_factory=dict)
    uses: tuple[str, ...] = ()
    alias: dict[str, str] = field(default_factory=dict)


def traffic(calls: list[KernelCall]) -> int:
    """Bytes read plus bytes written by every kernel call."""
    return sum(c.read_bytes + c.write_bytes for c in calls)


def fusion_summary(before: list[KernelCall], after: list[KernelCall]) -> dict:
    """Operators before fusion, kernels after, the groups that merged ops, and the traffic ratio R."""
    bytes_before, bytes_after = traffic(before), traffic(after)
    groups: dict[str, dict] = {}
    for call in after:
        if len(call.ops) > 1:
            group = groups.setdefault(
                call.kernel, {"kernel": call.kernel, "ops": list(call.ops), "calls": 0, "layers": []}
            )
            _count(group, call)
    return {
        "operators": len(before),
        "kernels": len(after),
        "groups": sorted(groups.values(), key=lambda g: (-len(g["ops"]), g["kernel"])),
        "traffic_bytes_before": bytes_before,
        "traffic_bytes_after": bytes_after,
        "traffic_ratio": bytes_before / bytes_after if bytes_after else 1.0,
    }


def _count(entry: dict, call: KernelCall) -> None:
    """One more call of the entry's kernel; a kernel TVM shares between several layers lists them all."""
    entry["calls"] += 1
    entry["layers"] += [layer for layer in call.layers if layer not in entry["layers"]]


def _root(name: str, alias: dict[str, str]) -> str:
    seen = {name}
    while name in alias and alias[name] not in seen:  # a cycle would be a bug upstream: stop, never hang
        name = alias[name]
        seen.add(name)
    return name


def lifetimes(steps: list[Step], outputs: set[str]) -> dict[str, tuple[int, int, int]]:
    """Each intermediate tensor's (first step, last step, bytes); tensors the function returns are excluded."""
    alias: dict[str, str] = {}
    spans: dict[str, list[int]] = {}
    sizes: dict[str, int] = {}
    for t, step in enumerate(steps):
        for name, size in step.allocates.items():
            sizes[name], spans[name] = size, [t, t]
        for new, old in step.alias.items():
            alias[new] = old
        for name in step.uses:
            root = _root(name, alias)
            if root in spans:
                spans[root][1] = t
    returned = {_root(name, alias) for name in outputs}
    return {n: (s[0], s[1], sizes[n]) for n, s in spans.items() if n not in returned}


def peak_live_bytes(spans: dict[str, tuple[int, int, int]]) -> int:
    """M_peak: the most bytes simultaneously live; a tensor is live from its allocation to its last use."""
    if not spans:
        return 0
    end = max(last for _, last, _ in spans.values())
    return max(sum(size for first, last, size in spans.values() if first <= t <= last) for t in range(end + 1))


def memory_summary(steps: list[Step], outputs: set[str], planned_bytes: int) -> dict:
    """Naive, planned and lower-bound bytes for the intermediates, with the ratios a person compares."""
    spans = lifetimes(steps, outputs)
    naive = sum(size for _, _, size in spans.values())
    bound = peak_live_bytes(spans)
    return {
        "intermediates": len(spans),
        "naive_bytes": naive,
        "planned_bytes": planned_bytes,
        "lower_bound_bytes": bound,
        "planned_over_naive": planned_bytes / naive if naive else 1.0,
        "planned_over_bound": planned_bytes / bound if bound else 1.0,
    }


def heaviest_kernels(calls: list[KernelCall], flops: dict[str, int], args: dict[str, list], top: int = 8) -> list[dict]:
    """The kernels doing the most floating-point work over the whole model, with what a roofline needs."""
    totals: dict[str, dict] = {}
    for call in calls:
        entry = totals.setdefault(
            call.kernel,
            {
                "kernel": call.kernel,
                "ops": list(call.ops),
                "calls": 0,
                "layers": [],
                "flops": flops.get(call.kernel, 0),
                "bytes": call.read_bytes + call.write_bytes,
                "args": args.get(call.kernel, []),
            },
        )
        _count(entry, call)
    ranked = sorted(totals.values(), key=lambda k: (-k["flops"] * k["calls"], k["kernel"]))
    return [k for k in ranked if k["flops"] > 0 and k["args"]][:top]


SLOW_FOR_ITS_SHAPE = 0.3  # a kernel under this fraction of its roof is named in the reports, with its geometry


def roofline(kernels: list[dict], seconds: dict[str, float], peak_flops: float, peak_bytes: float) -> dict:
    """Each kernel's achieved FLOP/s and bytes/s against the machine's peaks, and which roof bounds it.

    A kernel whose arithmetic intensity (FLOPs per byte moved) is below the ridge peak_flops / peak_bytes is
    memory-bound; its roof is intensity x peak_bytes, otherwise peak_flops. One under SLOW_FOR_ITS_SHAPE of its
    roof is `slow`: the layer a user should blame first."""
    ridge = peak_flops / peak_bytes
    rows = []
    for k in kernels:
        t = seconds.get(k["kernel"])
        if not t:
            continue
        intensity = k["flops"] / k["bytes"] if k["bytes"] else float("inf")
        roof = min(peak_flops, intensity * peak_bytes)
        achieved = k["flops"] / t
        rows.append(
            {
                "kernel": k["kernel"],
                "ops": k["ops"],
                "layers": k.get("layers", []),
                "calls": k["calls"],
                "flops": k["flops"],
                "bytes": k["bytes"],
                "seconds": t,
                "flops_per_s": achieved,
                "bytes_per_s": k["bytes"] / t,
                "intensity": intensity,
                "bound": "memory" if intensity < ridge else "compute",
                "roof_fraction": achieved / roof,
                "slow": achieved / roof < SLOW_FOR_ITS_SHAPE,
                "shapes": [shape for shape, _ in k.get("args", [])],
            }
        )
    return {
        "peak_flops_per_s": peak_flops,
        "peak_bytes_per_s": peak_bytes,
        "ridge_flops_per_byte": ridge,
        "slow_below": SLOW_FOR_ITS_SHAPE,
        "kernels": rows,
    }
