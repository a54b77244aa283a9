"""Small charts as inline SVG text, so report.html needs no network, no script and no plotting package.

Each function takes plain numbers and returns one <svg> element with a <title> (what a screen reader and a
hovering mouse get) and a class naming the chart, which the tests look for.
"""

from __future__ import annotations

import math
from html import escape

WIDTH, HEIGHT, PAD = 560, 220, 44
INK, MUTED, ACCENT, WARN = "#1f2933", "#9aa5b1", "#2f6fde", "#d64545"


def histogram(values: list[float], marks: dict[str, float], *, title: str, unit: str, bins: int = 30) -> str:
    """Counts of `values` in equal bins, with a labelled vertical line at each mark (p50, p99)."""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    counts, per_unit, last = [0] * bins, bins / span, bins - 1
    for v in values:  # pure Python on every no-op build: kept to one multiply and one compare per run
        i = int((v - low) * per_unit)
        counts[i if i < last else last] += 1
    x, y = _scale(low, high, 0, max(counts))
    width = (WIDTH - 2 * PAD) / bins
    bars = "".join(
        f'<rect x="{x(low + i * span / bins):.1f}" y="{y(c):.1f}" width="{max(width - 1, 1):.1f}" '
        f'height="{y(0) - y(c):.1f}" fill="{ACCENT}"/>'
        for i, c in enumerate(counts)
        if c
    )
    return _chart("histogram", title, bars + _marks(marks, x) + _x_axis(low, high, unit, x) + _y_label("runs"))


def cdf(values: list[float], marks: dict[str, float], *, title: str, unit: str) -> str:
    """The fraction of runs at or below each latency, with the marks."""
    ordered = sorted(values)
    x, y = _scale(ordered[0], ordered[-1], 0, 1)
    n = len(ordered)
    step = max(1, n // 150)  # 150 points draw the curve; thousands only weigh the page (and each no-op build)
    picked = sorted(set(range(0, n, step)) | {n - 1})
    points = " ".join(f"{x(ordered[i]):.1f},{y((i + 1) / n):.1f}" for i in picked)
    line = f'<polyline points="{points}" fill="none" stroke="{ACCENT}" stroke-width="2"/>'
    return _chart(
        "cdf", title, line + _marks(marks, x) + _x_axis(ordered[0], ordered[-1], unit, x) + _y_label("fraction of runs")
    )


def bars(rows: list[tuple[str, float]], *, title: str, unit: str, highlight: set[str] = frozenset()) -> str:
    """Horizontal bars, one per (label, value); highlighted labels in the warning colour."""
    top = max((v for _, v in rows), default=1.0) or 1.0
    row = 22
    height = PAD + row * len(rows) + 10
    label_width = 170
    scale = (WIDTH - label_width - 90) / top
    body = ""
    for i, (label, value) in enumerate(rows):
        y0 = 30 + i * row
        colour = WARN if label in highlight else ACCENT
        body += (
            f'<text x="{label_width - 6}" y="{y0 + 14}" text-anchor="end" font-size="12" fill="{INK}">'
            f"{escape(_short(label, 26))}</text>"
            f'<rect x="{label_width}" y="{y0 + 2}" width="{max(value * scale, 1):.1f}" height="{row - 6}" '
            f'fill="{colour}"/><text x="{label_width + max(value * scale, 1) + 6:.1f}" y="{y0 + 14}" '
            f'font-size="12" fill="{INK}">{_num(value)} {escape(unit)}</text>'
        )
    return _chart("bars", title, body, height=height)


def line(xs: list[float], series: dict[str, list[float]], *, title: str, x_label: str, y_label: str) -> str:
    """One polyline per series over shared x values (the Amdahl curve against measured speed-ups)."""
    values = [v for ys in series.values() for v in ys if v is not None]
    x, y = _scale(min(xs), max(xs), 0, max(values) * 1.1)
    colours = [ACCENT, WARN, MUTED]
    body = ""
    for row, ((name, ys), colour) in enumerate(zip(series.items(), colours)):
        pts = [(a, b) for a, b in zip(xs, ys) if b is not None]
        body += (
            f'<polyline points="{" ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in pts)}" fill="none" '
            f'stroke="{colour}" stroke-width="2"/>'
        )
        body += "".join(f'<circle cx="{x(a):.1f}" cy="{y(b):.1f}" r="3" fill="{colour}"/>' for a, b in pts)
        body += f'<text x="{PAD + 8}" y="{40 + 16 * row}" font-size="12" fill="{colour}">{escape(name)}</text>'
    return _chart("line", title, body + _x_axis(min(xs), max(xs), x_label, x) + _y_label(y_label))


def roofline(points: list[tuple[str, float, float]], peak_flops: float, peak_bytes: float, *, title: str) -> str:
    """Kernels as (name, FLOP/byte, FLOP/s) on log axes under the machine's roof: min(peak, bandwidth x I)."""
    intensities = [i for _, i, _ in points] + [peak_flops / peak_bytes]
    lo_i, hi_i = min(intensities) / 2, max(intensities) * 2
    lo_f = min([f for _, _, f in points] + [peak_bytes * lo_i]) / 2
    x, y = _scale(math.log10(lo_i), math.log10(hi_i), math.log10(lo_f), math.log10(peak_flops * 2))
    roof = [(i, min(peak_flops, peak_bytes * i)) for i in (lo_i, peak_flops / peak_bytes, hi_i)]
    body = (
        f'<polyline points="{" ".join(f"{x(math.log10(i)):.1f},{y(math.log10(f)):.1f}" for i, f in roof)}" '
        f'fill="none" stroke="{INK}" stroke-width="2"/>'
    )
    for name, i, f in points:
        body += (
            f'<circle cx="{x(math.log10(i)):.1f}" cy="{y(math.log10(f)):.1f}" r="4" fill="{ACCENT}">'
            f"<title>{escape(name)}: {_num(f / 1e9)} GFLOP/s at {_num(i)} FLOP/byte</title></circle>"
        )
    axis = (
        f'<text x="{WIDTH / 2}" y="{HEIGHT - 6}" text-anchor="middle" font-size="12" fill="{MUTED}">'
        f"FLOP per byte (log) {_num(lo_i)} .. {_num(hi_i)}</text>"
    )
    return _chart("roofline", title, body + axis + _y_label("FLOP/s (log)"))


def scatter(points: list[tuple[str, float, float, bool]], *, title: str, x_label: str, y_label: str) -> str:
    """Points (label, x, y, highlighted): the highlighted ones in the accent colour, the others in the
    warning colour; each point's label in its <title>."""
    xs, ys = [p[1] for p in points], [p[2] for p in points]
    x, y = _scale(min(xs), max(xs), min(ys), max(ys))
    body = "".join(
        f'<circle cx="{x(a):.1f}" cy="{y(b):.1f}" r="4" fill="{ACCENT if good else WARN}">'
        f"<title>{escape(label)}: {_num(a)}, {b:.6g}</title></circle>"
        for label, a, b, good in points
    )
    low, high = (
        f'<text x="{PAD + 4}" y="{y(v) - 4:.1f}" font-size="11" fill="{MUTED}">{v:.6g}</text>'
        for v in (min(ys), max(ys))
    )
    return _chart("scatter", title, body + low + high + _x_axis(min(xs), max(xs), x_label, x) + _y_label(y_label))


def timeline(stages: list[tuple[str, float, str]], *, title: str) -> str:
    """Stages one after another as (name, seconds, status): built ones solid, cached ones pale."""
    total = sum(s for _, s, _ in stages) or 1.0
    scale = (WIDTH - 2 * PAD) / total
    body, at = "", PAD
    for i, (name, seconds, status) in enumerate(stages):
        width = max(seconds * scale, 2)
        colour = {"built": ACCENT, "failed": WARN}.get(status, MUTED)
        y0 = 30 + (i % 2) * 40
        body += (
            f'<rect x="{at:.1f}" y="{y0}" width="{width:.1f}" height="24" fill="{colour}">'
            f"<title>{escape(name)}: {status}, {seconds:.2f} s</title></rect>"
            f'<text x="{at:.1f}" y="{y0 + 38}" font-size="11" fill="{INK}">{escape(name)} '
            f"{seconds:.2f} s</text>"
        )
        at += width
    return _chart("timeline", title, body, height=120)


def _chart(kind: str, title: str, body: str, *, height: int = HEIGHT) -> str:
    return (
        f'<svg class="chart {kind}" role="img" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
        f'<text x="{PAD}" y="16" font-size="13" font-weight="600" fill="{INK}">{escape(title)}</text>{body}</svg>'
    )


def _scale(x0: float, x1: float, y0: float, y1: float):
    """Data to pixel mappings for the plot area (y grows upwards)."""
    xs, ys = (x1 - x0) or 1.0, (y1 - y0) or 1.0
    return (
        lambda v: PAD + (v - x0) / xs * (WIDTH - 2 * PAD),
        lambda v: HEIGHT - PAD - (v - y0) / ys * (HEIGHT - PAD - 28),
    )


def _marks(marks: dict[str, float], x) -> str:
    """Dashed vertical lines with their labels, each label on its own row, on the side with room for it."""
    out = ""
    for i, (name, v) in enumerate(marks.items()):
        left = x(v) > WIDTH * 0.7
        out += (
            f'<line x1="{x(v):.1f}" x2="{x(v):.1f}" y1="28" y2="{HEIGHT - PAD}" stroke="{WARN}" '
            f'stroke-dasharray="4 3"/><text x="{x(v) + (-4 if left else 4):.1f}" y="{40 + 14 * i}" '
            f'text-anchor="{"end" if left else "start"}" font-size="12" fill="{WARN}">{escape(name)} '
            f"{_num(v)}</text>"
        )
    return out


def _x_axis(low: float, high: float, unit: str, x) -> str:
    return (
        f'<line x1="{PAD}" x2="{WIDTH - PAD}" y1="{HEIGHT - PAD}" y2="{HEIGHT - PAD}" stroke="{MUTED}"/>'
        f'<text x="{x(low):.1f}" y="{HEIGHT - PAD + 16}" font-size="11" fill="{MUTED}">{_num(low)}</text>'
        f'<text x="{x(high):.1f}" y="{HEIGHT - PAD + 16}" text-anchor="end" font-size="11" fill="{MUTED}">'
        f'{_num(high)}</text><text x="{WIDTH / 2}" y="{HEIGHT - 8}" text-anchor="middle" font-size="12" '
        f'fill="{MUTED}">{escape(unit)}</text>'
    )


def _y_label(text: str) -> str:
    return (
        f'<text x="12" y="{HEIGHT / 2}" font-size="12" fill="{MUTED}" '
        f'transform="rotate(-90 12 {HEIGHT / 2})" text-anchor="middle">{escape(text)}</text>'
    )


def _num(v: float) -> str:
    return f"{v:.3g}"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
