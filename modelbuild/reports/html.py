"""report.html: one self-contained page a reviewer reads instead of the JSON: builds and gates (failures
first), then per build its latency distribution, accuracy, memory, int8 layers, thread scaling, roofline and
the stages' timeline, as inline SVG charts (reports/svg.py). No script, no network, no external file.
"""

from __future__ import annotations

from html import escape

from modelbuild.reports import svg
from modelbuild.reports.markdown import (
    gates_in_brief,
    layers_in_brief,
    of_roof,
    ran_on,
    stage_time,
    status,
    vs_baseline_rows,
)
from modelbuild.reports.model import BuildReport, Report

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; color: #1f2933; margin: 24px auto; max-width: 1180px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 36px; border-top: 1px solid #e4e7eb; padding-top: 16px; }
table { border-collapse: collapse; margin: 8px 0 16px; } th, td { padding: 4px 10px; text-align: left; }
th { background: #f5f7fa; } tr:nth-child(even) td { background: #fafbfc; }
.fail { color: #d64545; font-weight: 600; } .pass { color: #2f8132; } .muted { color: #7b8794; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; } .chart { border: 1px solid #e4e7eb; border-radius: 4px; }
"""


def render(report: Report) -> str:
    verdict = "passed" if report.passed else "FAILED"
    body = [
        f'<h1>modelbuild report: <span class="{"pass" if report.passed else "fail"}">{verdict}</span></h1>',
        f'<p class="muted">{escape(report.recipe)}</p>',
        _summary(report),
    ]
    body += [_build(b) for b in report.builds]
    c = report.cache
    body.append(
        f'<p class="muted">Cache: {c["hits"]} hits, {c["misses"]} misses, hit rate {c["hit_rate"]:.2f}.</p>'
        if "hits" in c
        else ""
    )
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>modelbuild report: {verdict}'
        f"</title><style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _summary(report: Report) -> str:
    rows = "".join(
        f'<tr><td><a href="#{_anchor(b.name)}">{escape(b.name)}</a></td>'
        f'<td class="{"pass" if b.passed else "fail"}">{escape(status(b))}</td>'
        f"<td>{_ms(b, 'median')}</td><td>{_ms(b, 'p99')}</td><td>{_fmt(b.throughput)}</td>"
        f"<td>{_gate_cell(b)}</td></tr>"
        for b in report.builds
    )
    return (
        '<table class="summary"><tr><th>build</th><th>status</th><th>p50 ms</th><th>p99 ms</th>'
        f"<th>throughput/s</th><th>gates</th></tr>{rows}</table>"
    )


def _build(b: BuildReport) -> str:
    parts = [
        f'<section class="build" id="{_anchor(b.name)}"><h2>{escape(b.name)}</h2>',
        f"<p>artifact <code>{escape(b.artifact or '-')}</code>"
        + (
            ""
            if b.validation.ran
            else f' <span class="muted">not validated: {escape(b.validation.reason or "")}</span>'
        )
        + "</p>",
        f'<p class="muted">ran on {escape(ran_on(b))}</p>' if b.validation.ran and ran_on(b) else "",
        _gates(b),
        _accuracy(b),
        _vs_baseline(b),
    ]
    charts = [_latency(b), _memory(b), _int8(b), _scaling(b), _roofline(b), _timeline(b)]
    parts.append('<div class="charts">' + "".join(c for chart in charts for c in chart) + "</div>")
    parts.append(_kernels(b) + "</section>")
    return "\n".join(parts)


def _gates(b: BuildReport) -> str:
    if not b.gates:
        return '<p class="muted">No gates.</p>'
    rows = "".join(
        f'<tr class="gate"><td>{escape(g.name)}</td><td>{_fmt(g.value)}</td><td>{_fmt(g.limit)}</td>'
        f'<td class="{"pass" if g.passed else "fail"}">{g.verdict}</td>'
        f'<td class="muted">{escape(g.detail)}</td></tr>'
        for g in sorted(b.gates, key=lambda g: g.passed)
    )  # failures first
    return (
        f'<table class="gates"><tr><th>gate</th><th>value</th><th>limit</th><th>result</th><th></th></tr>{rows}</table>'
    )


def _accuracy(b: BuildReport) -> str:
    if not b.accuracy:
        return ""
    rows = "".join(
        f"<tr><td>{escape(name)}</td><td>{_fmt(a.get('max_abs'))}</td><td>{_fmt(a.get('cosine'))}</td>"
        f"<td>{_fmt(a.get('sqnr_db'))}</td><td>{_fmt(a.get('top1_agreement'))}</td></tr>"
        for name, a in b.accuracy.items()
    )
    return (
        '<table class="accuracy"><tr><th>output</th><th>max abs</th><th>cosine</th><th>SQNR dB</th>'
        f"<th>top-1</th></tr>{rows}</table>"
    )


def _vs_baseline(b: BuildReport) -> str:
    rows = vs_baseline_rows(b)
    if not rows:
        return ""
    body = "".join(
        f"<tr><td>{escape(what)}</td><td>{base}</td><td>{now}</td><td>{change}</td></tr>"
        for what, base, now, change in rows
    )
    together = (
        ' <span class="muted">(latency: its library timed in turns with this one)</span>'
        if b.vs_baseline.get("timed_together")
        else ""
    )
    return (
        f'<table class="baseline"><tr><th>against <code>{escape(b.vs_baseline["report"])}</code>{together}</th>'
        f"<th>baseline</th><th>now</th><th>change</th></tr>{body}</table>"
    )


def _slow(kernel: dict) -> str:
    """'slow for its shape' and its arguments' shapes, for a kernel the roofline marked slow."""
    if not kernel.get("slow"):
        return ""
    return "slow for its shape: " + escape(" x ".join(map(str, kernel.get("shapes") or [])))


def _kernels(b: BuildReport) -> str:
    """The model's layers behind its kernels: the measured heaviest ones where the roofline ran, else the
    heaviest by FLOPs, else the largest fused groups."""
    measured = (b.roofline or {}).get("kernels")
    if measured:
        rows = "".join(
            f"<tr><td><code>{escape(k['kernel'])}</code></td><td>{escape(layers_in_brief(k.get('layers')))}"
            f"</td><td>{k['calls']}</td><td>{k['flops_per_s'] / 1e9:.2f}</td>"
            f"<td>{escape(of_roof(k['roof_fraction']))}</td>"
            f'<td class="{"fail" if k.get("slow") else "muted"}">{_slow(k)}</td></tr>'
            for k in measured
        )
        return (
            '<table class="kernels"><tr><th>heaviest kernels</th><th>ONNX layers</th><th>calls</th>'
            f"<th>GFLOP/s</th><th>of roof</th><th></th></tr>{rows}</table>"
        )
    if b.kernels:
        total = sum(k["flops"] * k["calls"] for k in b.kernels)
        rows = "".join(
            f"<tr><td><code>{escape(k['kernel'])}</code></td><td>{escape(layers_in_brief(k.get('layers')))}"
            f"</td><td>{k['calls']}</td><td>{k['flops'] * k['calls'] / 1e6:.1f}</td>"
            f"<td>{k['flops'] * k['calls'] / total:.0%}</td></tr>"
            for k in b.kernels
        )
        return (
            '<table class="kernels"><tr><th>heaviest kernels by FLOPs</th><th>ONNX layers</th><th>calls</th>'
            f"<th>MFLOP in all</th><th>share of these</th></tr>{rows}</table>"
        )
    groups = (b.fusion or {}).get("groups") or []
    if not groups:
        return ""
    rows = "".join(
        f"<tr><td><code>{escape(g['kernel'])}</code></td><td>{escape(' + '.join(g['ops']))}</td>"
        f"<td>{escape(layers_in_brief(g.get('layers')))}</td><td>{g['calls']}</td></tr>"
        for g in groups[:10]
    )
    more = f'<p class="muted">and {len(groups) - 10} more fused kernels.</p>' if len(groups) > 10 else ""
    return (
        '<table class="kernels"><tr><th>fused kernel</th><th>operators</th><th>ONNX layers</th><th>calls</th></tr>'
        f"{rows}</table>{more}"
    )


def _latency(b: BuildReport) -> list[str]:
    samples = (b.latency_ms or {}).get("samples_ms")
    if not samples:
        return []
    marks = {"p50": b.latency_ms["median"], "p99": b.latency_ms["p99"]}
    runs = f"{len(samples)} runs"
    return [
        svg.histogram(samples, marks, title=f"Latency, {runs}", unit="ms"),
        svg.cdf(samples, marks, title=f"Latency CDF, {runs}", unit="ms"),
    ]


def _memory(b: BuildReport) -> list[str]:
    m = b.memory
    if not m:
        return []
    rows = [
        ("naive", m["naive_bytes"] / 1e6),
        ("planned", m["planned_bytes"] / 1e6),
        ("lower bound", m["lower_bound_bytes"] / 1e6),
    ]
    title = f"Memory of {m['intermediates']} intermediates"
    if b.fusion:
        title += f"; {b.fusion['operators']} ops in {b.fusion['kernels']} kernels"
    # the process's peak RSS (runtime, weights, Python) is another quantity: said beside, not drawn to scale
    rss = (
        (
            f'<p class="muted">Peak resident memory of the whole validating process: '
            f"{m['measured_peak_rss_bytes'] / 1e6:.1f} MB.</p>"
        )
        if m.get("measured_peak_rss_bytes")
        else ""
    )
    return [svg.bars(rows, title=title, unit="MB") + rss]


def _int8(b: BuildReport) -> list[str]:
    q = b.quantization
    out = []
    if q and q.get("layers"):
        jump = q.get("first_jump")
        rows = [(r["node"] or r["tensor"], r["sqnr_db"]) for r in q["layers"]]
        marked = {r["node"] or r["tensor"] for r in q["layers"] if r["tensor"] == jump}
        out.append(
            svg.bars(
                rows[:40],
                title="SQNR per layer, int8 vs fp32" + (" (red: first jump)" if marked else ""),
                unit="dB",
                highlight=marked,
            )
        )
    if b.vs_float:
        out.append(
            svg.bars(
                [(b.vs_float.build, b.vs_float.latency_ms), (b.name, b.latency_ms["median"])],
                title=f"p50 against the float build: {b.vs_float.latency_ratio:.2f}x"
                + (" (timed in turns)" if b.vs_float.timed_together else ""),
                unit="ms",
            )
        )
    return out


def _scaling(b: BuildReport) -> list[str]:
    sc = b.scaling
    if not sc or len(sc["threads"]) < 2:
        return []
    f = sc["parallel_fraction"]
    series = {"measured": sc["speedup"]}
    if f is not None and not sc.get("noisy"):
        series[f"Amdahl f = {f:.2f}"] = [1 / ((1 - f) + f / p) for p in sc["threads"]]
    title = "Speed-up by thread count" + (" (measured under noise: no conclusion)" if sc.get("noisy") else "")
    return [svg.line(sc["threads"], series, title=title, x_label="threads", y_label="speed-up over 1 thread")]


def _roofline(b: BuildReport) -> list[str]:
    r = b.roofline
    if not r or not r.get("kernels"):
        return []
    points = [(k["kernel"], k["intensity"], k["flops_per_s"]) for k in r["kernels"] if k["intensity"] > 0]
    if not points:
        return []
    return [
        svg.roofline(
            points,
            r["peak_flops_per_s"],
            r["peak_bytes_per_s"],
            title="Roofline: the heaviest kernels under this machine's peaks",
        )
    ]


def _timeline(b: BuildReport) -> list[str]:
    if not b.stages:
        return []
    stages = [
        (name, s.built_seconds if s.status == "cached" and s.built_seconds is not None else s.seconds, s.status)
        for name, s in b.stages.items()
    ]
    times = "; ".join(f"{name} {stage_time(s)}" for name, s in b.stages.items())
    return [
        svg.timeline(stages, title="Stages (pale: cached, at the time they took to build)")
        + f'<p class="muted">{escape(times)}</p>'
    ]


def _gate_cell(b: BuildReport) -> str:
    return gates_in_brief(
        b, lambda g: f'<span class="fail">{escape(g.name)}</span> {_fmt(g.value)} (limit {_fmt(g.limit)})'
    )


def _ms(b: BuildReport, stat: str) -> str:
    return _fmt(b.latency_ms[stat]) if b.latency_ms else "-"


def _fmt(x) -> str:
    if x is None:
        return "-"
    return f"{x:.4g}" if isinstance(x, float) else escape(str(x))


def _anchor(name: str) -> str:
    return "build-" + "".join(c if c.isalnum() else "-" for c in name)
