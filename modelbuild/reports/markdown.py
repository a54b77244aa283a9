"""report.md: one table of builds and gates (failures first), then the details, sized for a CI job summary."""

from __future__ import annotations

from modelbuild.reports.model import BuildReport, Report, StageRun
from modelbuild.validation.gates import BUSY_SHARE, THROTTLED_SHARE


def render(report: Report) -> str:
    verdict = "passed" if report.passed else "FAILED"
    lines = [
        f"# modelbuild report: {verdict}",
        "",
        "| build | status | p50 ms | p99 ms | throughput/s | gates |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for b in report.builds:
        lines.append(
            f"| {cell(b.name)} | {status(b)} | {_ms(b, 'median')} | {_ms(b, 'p99')} | "
            f"{_fmt(b.throughput)} | {_gates(b)} |"
        )
    for b in report.builds:
        lines += ["", f"## {b.name}", ""] + _details(b)
    c = report.cache
    lines += [
        "",
        "## Cache",
        "",
        f"hits {c['hits']}, misses {c['misses']}, hit rate {c['hit_rate']:.2f}, "
        f"mean hit {c['mean_hit_seconds'] * 1000:.1f} ms, mean miss {c['mean_miss_seconds']:.2f} s, "
        f"T_avg {c['mean_access_seconds']:.3f} s",
    ]
    return "\n".join(lines) + "\n"


def cell(text: str) -> str:
    """A name as one table cell: tensor and node names are the exporter's, and a `|` in one (or a line break)
    would split the row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def status(b: BuildReport) -> str:
    """The build's state in a few words, for the summary tables."""
    if b.stage_failed:
        return "stage failed"
    if not b.validation.ran:
        return "built, not run here" if b.passed else "not run here (fails)"
    return "passed" if b.passed else "gate failed"


def _gates(b: BuildReport) -> str:
    return gates_in_brief(b, lambda g: f"**{g.name}** {_fmt(g.value)} (limit {_fmt(g.limit)})")


def gates_in_brief(b: BuildReport, failure) -> str:
    """A summary table's gates cell: 'none', '6 passed', or each failed gate as `failure(gate)` renders it."""
    failed = [g for g in b.gates if not g.passed]
    if not b.gates:
        return "none"
    if not failed:
        return f"{len(b.gates)} passed"
    return "; ".join(failure(g) for g in failed)


def _details(b: BuildReport) -> list[str]:
    out = [f"- artifact: `{b.artifact}`" + (f" ({b.artifact_bytes} bytes)" if b.artifact_bytes else "")]
    if b.bound_inputs:
        out.append(
            "- bound inputs (constants in the library, not its arguments): "
            + ", ".join(f"{name} = {value}" for name, value in b.bound_inputs.items())
        )
    out += [f"- {stage}: {stage_time(s)}" + (f": {s.error}" if s.error else "") for stage, s in b.stages.items()]
    if b.validation.ran and ran_on(b):
        out.append(f"- ran on: {ran_on(b)}")
    if not b.validation.ran:
        out.append(f"- not validated: {b.validation.reason}")
    if b.gates:
        out += ["", "| gate | value | limit | result |", "| --- | --- | --- | --- |"]
        out += [
            f"| {g.name} | {_fmt(g.value)} | {_fmt(g.limit)} | {g.verdict.replace('FAIL', '**FAIL**')} |"
            for g in b.gates
        ]
    if b.accuracy:
        out += [
            "",
            "| output | max abs | max rel | cosine | SQNR dB | top-1 |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        out += [
            f"| {cell(name)} | {_fmt(a['max_abs'])} | {_fmt(a['max_rel'])} | {_fmt(a['cosine'])} | "
            f"{_fmt(a['sqnr_db'])} | {_fmt(a.get('top1_agreement'))} |"
            for name, a in b.accuracy.items()
        ]
    if b.vs_baseline:
        out += _vs_baseline(b)
    out += _quantization(b)
    out += _tuning(b.tuning)
    out += _fusion_and_memory(b)
    if b.latency_ms:
        t = b.latency_ms
        out += [
            "",
            f"Latency over {t['runs']} runs (ms): min {_fmt(t['min'])}, mean {_fmt(t['mean'])}, "
            f"p50 {_fmt(t['median'])}, p90 {_fmt(t['p90'])}, p99 {_fmt(t['p99'])}, p99.9 {_fmt(t['p99.9'])}, "
            f"max {_fmt(t['max'])}, CV {t['cv']:.1%}; cold (load + first run) {_fmt(b.cold_ms)} ms; "
            f"peak RSS {mb(b.peak_rss_bytes)}. Percentiles: {t['percentile_method']}.",
        ]
        if b.scaling:
            sc = b.scaling
            points = ", ".join(f"{p}: {m:.3g} ms" for p, m in zip(sc["threads"], sc["median_ms"]))
            f = sc["parallel_fraction"]
            if sc.get("noisy"):
                out.append(
                    f"\nScaling (median latency by thread count): {points}; measured under noise (CV up to "
                    f"{max(sc['cv']):.0%} at one thread count), so no conclusion about more cores."
                )
            else:
                out.append(
                    f"\nScaling (median latency by thread count): {points}; Amdahl parallel fraction "
                    f"f = {f:.2f}, so more cores could give at most "
                    f"{1 / (1 - f) if f < 1 else float('inf'):.1f}x."
                )
        out += _roofline(b.roofline)
        if t["cv"] > 0.05:
            out.append(f"\n> Warning: the coefficient of variation is {t['cv']:.0%}: the machine was noisy.")
        if (b.others_cpu or 0) > BUSY_SHARE:
            out.append(
                f"\n> Warning: other processes used {b.others_cpu:.0%} of this machine's CPUs while the "
                "library was timed: a parallel kernel waits for every thread it started, so this latency "
                "is the machine's as much as the library's (docs/guide/validation.md: timing on a busy machine)."
            )
        if (b.throttled or 0) > THROTTLED_SHARE:
            quota = _machine(b).get("cpu_quota")
            out.append(
                f"\n> Warning: a CPU quota (its cgroup's: a container's --cpus, a CI runner's limit) "
                f"withheld {b.throttled:.0%} of its CPUs' time while the library was timed: each throttled "
                "period stalls every thread until the next, so this latency is the quota's as much as the "
                "library's (docs/guide/validation.md: timing on a busy machine)."
                + (
                    f" The quota is {_cpus(quota)}: time and deploy the library with at most "
                    f"{_threads(max(1, int(quota)))} (`timing.threads`, `num-cores`), or with "
                    "TVM_THREAD_POOL_SPIN_COUNT=0."
                    if quota
                    else ""
                )
            )
    return out


def vs_baseline_rows(b: BuildReport) -> list[tuple[str, str, str, str]]:
    """(what, baseline, now, change) for p50, p99 and each output's cosine, SQNR and max abs: the rows a
    reviewer reads to see whether the change made the model slower or less accurate, and where."""
    v = b.vs_baseline
    if not v:
        return []
    rows = [
        (f"latency {'p50' if stat == 'median' else stat} (ms)", _fmt(base), _fmt(now), f"{now / base - 1:+.1%}")
        for stat, (base, now) in v["latency_ms"].items()
        if base
    ]
    for output, figures in v["accuracy"].items():
        rows += [
            (f"{output}: {label}", _fmt(base), _fmt(now), _change(base, now))
            for key, label in (("cosine", "cosine"), ("sqnr_db", "SQNR dB"), ("max_abs", "max abs"))
            if key in figures
            for base, now in [figures[key]]
        ]
    rows += [
        (f"kernel of {layers_in_brief(k['layers'], 2)} (us per call)", _fmt(base), _fmt(now), f"{now / base - 1:+.1%}")
        for k in v.get("kernels", [])
        for base, now in [k["us"]]
        if base
    ]
    return rows


def _change(base: float, now: float) -> str:
    return "same" if base == now else f"{now - base:+.3g}"


def _vs_baseline(b: BuildReport) -> list[str]:
    together = " (latency: its library timed in turns with this one)" if b.vs_baseline.get("timed_together") else ""
    out = [
        "",
        f"Against the baseline `{b.vs_baseline['report']}`{together}:",
        "",
        "| | baseline | now | change |",
        "| --- | --- | --- | --- |",
    ]
    return out + [f"| {what} | {base} | {now} | {change} |" for what, base, now, change in vs_baseline_rows(b)]


def _tuning(t: dict | None) -> list[str]:
    if not t:
        return []
    line = (
        f"Tuning: {t['tuned_tasks']} of {t['tasks']} kernels use a tuned schedule (the others the default, "
        f"which was faster or not searched); {t['trials_total']} trials in the database, "
        f"{t['trials_measured_now']} measured by this run."
    )
    return ["", line + _tuning_seconds(t.get("seconds_now") or {})]


def _tuning_seconds(seconds: dict) -> str:
    """Where this run's tune stage spent its seconds; nothing when the stage was cached."""
    if not seconds:
        return ""
    said = f" Its seconds: {seconds['defaults']:.1f} timing the default schedules"
    if "search" not in seconds:
        return said + "."
    return (
        said + f", {seconds['search']:.1f} searching, of which {seconds['builder']:.1f} waiting on the "
        f"builder and {seconds['runner_waits']:.1f} on measurements."
    )


def _quantization(b: BuildReport) -> list[str]:
    q = b.quantization
    if not q:
        return []
    out = [
        "",
        f"{q.get('precision', 'int8')} ({q['scheme']}, {'per-channel' if q['per_channel'] else 'per-tensor'} weights, "
        f"{q['calibration']['method']} calibration on {q['calibration']['samples']} samples): weights "
        f"{mb(q['weight_bytes_fp32'])} -> {mb(q['weight_bytes_int8'])} (/{q['weight_ratio']:.1f})"
        + _preparation(q)
        + ".",
    ]
    out += [f"\n> Warning: {w}" for w in q["warnings"]]
    if b.vs_float:
        v = b.vs_float
        out += [
            "",
            f"Latency {b.latency_ms['median']:.3f} ms against {v.latency_ms:.3f} ms for "
            f"`{v.build}`: {v.latency_ratio:.2f}x"
            + (" (its library timed in turns with this one)." if v.timed_together else "."),
        ]
    if b.accuracy_vs_qdq:
        out += ["", "| output | vs onnxruntime QDQ: max abs | cosine |", "| --- | --- | --- |"]
        out += [
            f"| {cell(name)} | {_fmt(a['max_abs'])} | {_fmt(a['cosine'])} |" for name, a in b.accuracy_vs_qdq.items()
        ]
    if q.get("float_candidates") and b.accuracy_gate_failed:
        out += _float_candidates(q)
    if q.get("layers") and b.accuracy_gate_failed:
        jump = q.get("first_jump")
        lead = "" if q.get("float_candidates") else "An accuracy gate failed. "
        out += [
            "",
            lead
            + "SQNR of int8 against fp32 activations, in execution order"
            + (f"; the error first jumps at `{jump}`: try `exclude_nodes` for it." if jump else "."),
            "",
            "| tensor | op | node | SQNR dB |",
            "| --- | --- | --- | --- |",
        ]
        out += [
            f"| {cell(r['tensor'])} | {r['op']} | {cell(r['node'])} | {r['sqnr_db']:.1f}"
            + (" **<- first jump**" if r["tensor"] == jump else "")
            + " |"
            for r in q["layers"]
        ]
    return out


ADDITIVE = (0.75, 1.33)  # layers alone summing to the whole model's error within this: shares are what float removes


def _float_candidates(q: dict) -> list[str]:
    """The layers that cause the most output error on their own, and the recipe line that leaves them in float."""
    rows = {r["node"]: r for r in q["sensitivity"]["layers"]}
    chosen = [rows[name] for name in q["float_candidates"]]
    names = ", ".join(f'"{r["node"]}"' for r in chosen)
    ratio = q["sensitivity"]["sum_over_whole"]
    if ratio is not None and ADDITIVE[0] <= ratio <= ADDITIVE[1]:
        claim = (
            f"The layers' errors add up to the whole model's ({ratio:.2f}x): leaving {_these(len(chosen))} "
            f"in float removes about {sum(r['share'] for r in chosen):.0%} of it on the calibration samples"
        )
    else:
        times = "an unmeasured multiple of" if ratio is None else f"{ratio:.2f}x"
        claim = (
            f"The layers' errors do not add up on these samples ({times} the whole model's: they "
            f"cancel or compound), so the shares only rank them: try {_these(len(chosen))} in float first"
        )
    out = [
        "",
        (
            f"An accuracy gate failed. Each quantized layer alone, the others in float: its share of the output "
            f"error on {q['sensitivity']['samples']} calibration samples. {claim}: `exclude_nodes = [{names}]`. "
            f"Or keep them integer with int16 inputs, at twice their int8 cost: `int16_nodes = [{names}]`."
        ),
        "",
        "| node | op | share of error | output SQNR alone dB |",
        "| --- | --- | --- | --- |",
    ]
    return out + [f"| {cell(r['node'])} | {r['op']} | {r['share']:.1%} | {r['sqnr_db']:.1f} |" for r in chosen]


def _these(count: int) -> str:
    return "this layer" if count == 1 else f"these {count} layers"


def _preparation(q: dict) -> str:
    done = [
        f"{q[key]} convs {what}"
        for key, what in (
            ("smoothed_convs", "smoothed"),
            ("gptq_convs", "GPTQ-rounded"),
            ("bias_corrected_convs", "bias-corrected"),
        )
        if q.get(key)
    ]
    if q.get("int16_nodes"):
        done.append(f"{len(q['int16_nodes'])} layers with int16 inputs")
    return "; " + ", ".join(done) if done else ""


def _roofline(r: dict | None) -> list[str]:
    if not r or not r["kernels"]:
        return []
    blas = f"; BLAS sgemm {r['blas_flops_per_s'] / 1e9:.1f} GFLOP/s" if r.get("blas_flops_per_s") else ""
    out = [
        "",
        f"Roofline (machine peaks: {r['peak_flops_per_s'] / 1e9:.1f} GFLOP/s, an FMA loop on its cores, "
        f"{r['peak_bytes_per_s'] / 1e9:.1f} GB/s; ridge {r['ridge_flops_per_byte']:.1f} FLOP/byte{blas}):",
        "",
        "| kernel | layers | calls | GFLOP/s | GB/s | FLOP/byte | bound | of roof |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    out += [
        f"| {k['kernel']} | {cell(layers_in_brief(k.get('layers')))} | {k['calls']} | "
        f"{k['flops_per_s'] / 1e9:.2f} | {k['bytes_per_s'] / 1e9:.2f} | "
        f"{k['intensity']:.1f} | {k['bound']} | {of_roof(k['roof_fraction'])} |"
        for k in r["kernels"]
    ]
    slow = slow_kernels(r)
    if slow:
        out += ["", f"Slow for its shape (under {r['slow_below']:.0%} of its roof):", ""]
        out += [f"- {line}" for line in slow]
    out += ["", "The bandwidth peak is a 64 MB copy, i.e. main memory: a kernel whose data stays in cache can pass it."]
    return out


def slow_kernels(r: dict | None) -> list[str]:
    """A line for each kernel the roofline marked slow (under `slow_below` of its roof): its layers, its
    arguments' shapes and how far under the roof it ran."""
    return [
        f"{k['kernel']} ({layers_in_brief(k.get('layers'))}): {' x '.join(map(str, k.get('shapes') or []))}, "
        f"{k['flops_per_s'] / 1e9:.1f} GFLOP/s, {of_roof(k['roof_fraction'])} of its {k['bound']} roof"
        for k in (r or {}).get("kernels", [])
        if k.get("slow")
    ]


def layers_in_brief(layers: list[str] | None, shown: int = 3) -> str:
    """The ONNX layers a kernel computes, the first few named; reports older than the names say '-'."""
    if not layers:
        return "-"
    more = f" +{len(layers) - shown}" if len(layers) > shown else ""
    return ", ".join(layers[:shown]) + more


def of_roof(fraction: float) -> str:
    """A kernel above the roof is not 150% efficient: its data stayed in cache, past the DRAM bandwidth peak."""
    return f"{fraction:.0%}" if fraction <= 1 else "above (data in cache)"


def _placement(p: dict) -> list[str]:
    """A split build's placement: operators per device, the copies, and why each CPU operator is there."""
    ops = p["operators"]
    out = [
        "",
        f"Placement: {ops.get('cuda', 0)} operators on the GPU, {ops.get('llvm', 0)} on the CPU; "
        f"{p['copies']} copies between them, {mb(p['bytes_copied'])} a call; estimated "
        + ", ".join(f"{name} {ms:.3f} ms" for name, ms in p.get("estimated_ms", {}).items())
        + ".",
    ]
    if p["on_cpu"]:
        out += ["", "| on the CPU | op | why |", "| --- | --- | --- |"]
        out += [f"| {c['operator']} | {c['op']} | {c['why']} |" for c in p["on_cpu"]]
    return out


def _fusion_and_memory(b: BuildReport) -> list[str]:
    out = _placement(b.placement) if b.placement else []
    f, m = b.fusion, b.memory
    if f:
        out += [
            "",
            f"Fusion: {f['operators']} operators -> {f['kernels']} kernels; estimated memory traffic "
            f"{mb(f['traffic_bytes_before'])} -> {mb(f['traffic_bytes_after'])} (/{f['traffic_ratio']:.2f}).",
        ]
        if f["groups"]:
            out += ["", "| fused kernel | operators | ONNX layers | calls |", "| --- | --- | --- | --- |"]
            out += [
                f"| {g['kernel']} | {' + '.join(g['ops'])} | {cell(layers_in_brief(g.get('layers')))} | {g['calls']} |"
                for g in f["groups"][:10]
            ]
            if len(f["groups"]) > 10:
                out.append(f"| ... {len(f['groups']) - 10} more | | | |")
    if m:
        rss = f", measured peak RSS {mb(m['measured_peak_rss_bytes'])}" if m.get("measured_peak_rss_bytes") else ""
        out += [
            "",
            f"Memory for {m['intermediates']} intermediates: naive {mb(m['naive_bytes'])}, planned "
            f"{mb(m['planned_bytes'])} ({m['planned_over_naive']:.2f} of naive), lower bound "
            f"{mb(m['lower_bound_bytes'])} (planned is {m['planned_over_bound']:.2f}x the bound){rss}.",
        ]
    layout = (b.schedule or {}).get("layout") or ""
    if layout.startswith("model ("):
        out += ["", f"Layout: the model's own, channels-last was refused: {layout.removeprefix('model (')[:-1]}."]
    refused = (b.schedule or {}).get("kernels") or {}
    if refused:
        named = ", ".join(f"{k} {n}" for k, n in list(refused.items())[:5]) + (", ..." if len(refused) > 5 else "")
        out += [
            "",
            f"Default schedule: TVM refused {sum(refused.values())} steps in {len(refused)} kernels ({named}); "
            "those kernels keep a simpler schedule.",
        ]
    return out


def mb(n: int | None) -> str:
    """Bytes as a person reads them: 38.2 MB, 412.0 kB."""
    if n is None:
        return "-"
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def stage_time(stage: StageRun) -> str:
    """'built in 16.1 s', or 'cached; built in 16.1 s': a no-op run keeps the time of the build it reuses."""
    if stage.status == "cached" and stage.built_seconds is not None:
        return f"cached; built in {stage.built_seconds:.2f} s"
    return f"{stage.status} in {stage.seconds:.2f} s"


def summary_line(b: BuildReport) -> str | None:
    """One line per build for the terminal: ops -> kernels, traffic ratio, memory naive -> planned (bound)."""
    f, m = b.fusion, b.memory
    if not f or not m:
        return None
    return (
        f"{b.name}  ops {f['operators']} -> kernels {f['kernels']}  traffic /{f['traffic_ratio']:.1f}  "
        f"memory {mb(m['naive_bytes'])} -> {mb(m['planned_bytes'])} (bound {mb(m['lower_bound_bytes'])})"
    )


def _cpus(count: float) -> str:
    return f"{count:g} CPU{'' if count == 1 else 's'}"


def _threads(count: int) -> str:
    return f"{count} thread{'' if count == 1 else 's'}"


def _machine(b: BuildReport) -> dict:
    return (b.provenance or {}).get("machine") or {}


def ran_on(b: BuildReport) -> str | None:
    """Where the library was measured: this machine's CPU, or a device over RPC as it describes itself."""
    machine = _machine(b)
    if machine.get("via") != "rpc":
        if "cpu" not in machine:
            return None
        parts = [machine["cpu"], f"{machine['cores']} cores"]
        if machine.get("cpu_quota") is not None:
            parts.append(f"a CPU quota of {_cpus(machine['cpu_quota'])}")
        if machine.get("gpu"):
            parts.append(
                f"GPU {machine['gpu']}, compute capability {machine['compute_capability']}, CUDA driver "
                f"{machine['cuda_driver']}"
            )
        return f"this machine ({', '.join(parts)})"
    told = [machine[k] for k in ("machine", "os") if machine.get(k)]
    if machine.get("threads"):
        told.append(f"{machine['threads']} thread{'s' if machine['threads'] > 1 else ''}")
    described = ", ".join(told)
    where = f"device {machine['device']!r} from the RPC tracker at {machine['tracker']}"
    where += f" ({described})" if described else ""
    if machine.get("emulated"):
        where += (
            f", emulated by {machine['emulated']}: its latency is not a hardware figure and no latency gate applies"
        )
    return where


def outcome_line(b: BuildReport) -> str:
    """What a person wants at the end of a build: speed, the accuracy figure closest to failing, the artifact."""
    parts = [b.name]
    latency = b.latency_ms
    if latency:
        parts.append(
            f"p50 {latency['median']:.3g} ms  p99 {latency['p99']:.3g} ms  {latency['throughput']:.4g}/s"
            + ("  (emulated device)" if _machine(b).get("emulated") else "")
            + (
                f"  (busy machine: others used {b.others_cpu:.0%} of the CPUs)"
                if (b.others_cpu or 0) > BUSY_SHARE
                else ""
            )
            + (
                f"  (CPU quota: {b.throttled:.0%} of the CPUs' time withheld)"
                if (b.throttled or 0) > THROTTLED_SHARE
                else ""
            )
        )
    elif not b.validation.ran:
        parts.append(f"not validated: {b.validation.reason}")
    worst = worst_accuracy(b)
    if worst:
        parts.append(worst)
    if b.artifact:
        parts.append(b.artifact)
    return "  ".join(parts)


# accuracy gates and their figures, in the order a person reads them first
_ACCURACY = (
    ("min_cosine", "cosine"),
    ("max_abs_error", "max_abs"),
    ("max_rel_error", "max_rel"),
    ("min_sqnr_db", "sqnr_db"),
    ("min_top1_agreement", "top1_agreement"),
)


def worst_accuracy(b: BuildReport) -> str | None:
    """A failed accuracy gate's figure, else the first gated one of cosine, max abs, max rel, SQNR, top-1, as
    'cosine 0.99987 (gate >= 0.9999)'; with no accuracy gate, the worst output's cosine."""
    gates = {g.name: g for g in b.gates if g.applicable and g.value is not None}
    gated = [(g, figure) for name, figure in _ACCURACY if (g := gates.get(name))]
    if gated:
        gate, figure = next(((g, f) for g, f in gated if not g.passed), gated[0])
        sign = ">=" if gate.name.startswith("min") else "<="
        return f"{figure} {gate.value:.6g} (gate {sign} {gate.limit:.6g}{'' if gate.passed else ', FAILED'})"
    cosines = [out["cosine"] for out in (b.accuracy or {}).values() if "cosine" in out]
    return f"cosine {min(cosines):.6g}" if cosines else None


def _ms(b: BuildReport, stat: str) -> str:
    return _fmt(b.latency_ms[stat]) if b.latency_ms else "-"


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)
