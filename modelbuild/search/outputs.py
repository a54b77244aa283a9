"""What a search leaves in build/search/<build>/: the chosen configuration as a recipe snippet to commit
(so CI builds it without searching), and search.json, search.md and search.html: every candidate with its
figures and why it was rejected, and the frontier of speed against worst cosine (speed: the ratio to the float
library timed beside each candidate where every one has it, else the objective)."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from modelbuild.fsutil import write_atomic
from modelbuild.reports import svg, write_reports
from modelbuild.search import candidates
from modelbuild.search.runner import SearchResult
from modelbuild.search.strategy import frontier, paired, speed_of

SNIPPET_SUFFIX = "-searched"


def write(result: SearchResult, base) -> list[Path]:
    """Write every file of the search; return their paths, the snippet first where one passed."""
    paths = []
    if result.best is not None:
        paths.append(result.folder / f"{snippet_name(result)}.toml")
        write_atomic(paths[-1], snippet(result, base).encode())
    for name, text in (
        ("search.json", json.dumps(to_json(result), indent=1) + "\n"),
        ("search.md", markdown(result)),
        ("search.html", html(result)),
    ):
        write_atomic(result.folder / name, text.encode())
        paths.append(result.folder / name)
    if result.report is not None:
        write_reports(result.report, result.folder)
    return paths


def snippet_name(result: SearchResult) -> str:
    return f"{result.build.split('+', 1)[1].split('@', 1)[0]}{SNIPPET_SUFFIX}"


def snippet(result: SearchResult, base) -> str:
    """The chosen configuration as a [quantization.NAME-searched] section: every field where it differs
    from the schema's defaults, paths as the recipe wrote them."""
    from modelbuild.recipe.schema import QuantizationSpec  # pydantic: only a finished search writes one

    candidate, outcome = result.best
    section = candidates.quantization_of(base, candidate).model_dump()
    changed = _changed(section, QuantizationSpec().model_dump())
    name = snippet_name(result)
    ratio = _ratio(result, outcome)
    head = [
        f"# Written by `modelbuild search {result.build}` ([search.{result.section}]): the lowest {result.objective}",
        f"# of {len(result.trials)} candidates that passed the build's accuracy gates on its golden inputs:",
        f"# {candidate.describe()}; {result.objective} {_value(outcome.objective, result.objective)}"
        + (f", {ratio:.2f}x the float build" if ratio else "")
        + ".",
        "# Commit it, add it to the recipe's include list and build it with",
        f'# quantization = "{name}" in place of the searched section: the build then searches nothing.',
        "",
    ]
    return "\n".join(head + _toml_table(("quantization", name), changed)) + "\n"


def _changed(values: dict, defaults: dict) -> dict:
    out = {}
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(defaults.get(key), dict):
            inner = _changed(value, defaults[key])
            if inner:
                out[key] = inner
        elif value != defaults.get(key) and value is not None:
            out[key] = value
    return out


def _toml_table(path: tuple[str, ...], table: dict) -> list[str]:
    lines = [f"[{'.'.join(path)}]"]
    lines += [f"{key} = {_toml(value)}" for key, value in table.items() if not isinstance(value, dict)]
    for key, value in table.items():
        if isinstance(value, dict):
            lines += ["", *_toml_table((*path, key), value)]
    return lines


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is a JSON string
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def to_json(result: SearchResult) -> dict:
    best = result.best
    front = set(frontier(result.trials))
    return {
        "build": result.build,
        "search": result.section,
        "objective": result.objective,
        "unit": candidates.UNITS[result.objective],
        "seconds": round(result.seconds, 1),
        "float_build": {"name": result.float_build.name, "objective": result.float_objective}
        if result.float_build
        else None,
        "chosen": result.names[best[0]] if best else None,
        "candidates": [
            {
                "section": result.names[c],
                "description": c.describe(),
                "precision": c.precision,
                "raised": list(c.raised),
                "settings": c.settings.__dict__,
                "passed": o.passed,
                "objective": o.objective,
                "vs_float": _ratio(result, o),
                "worst_cosine": o.accuracy,
                "margin": o.margin if o.margin != float("-inf") else None,
                "rejected_because": None if o.passed else o.why,
                "on_frontier": c in front,
                "stages_run": result.stages_run.get(c),
            }
            for c, o in result.trials.items()
        ],
    }


def markdown(result: SearchResult) -> str:
    lines = [
        f"# Search: {result.build} ([search.{result.section}])",
        "",
        _summary(result),
        "",
        f"{len(result.trials)} candidates in {result.seconds:.0f} s; the float build: "
        f"{_value(result.float_objective, result.objective)}.",
        "",
    ]
    head, *rows = _rows(result)
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def html(result: SearchResult) -> str:
    measured = [(c, o) for c, o in result.trials.items() if o.objective is not None and o.accuracy is not None]
    outcomes = [o for _, o in measured]
    speed = speed_of(outcomes)  # as the frontier compares them
    points = [(c.describe(), speed(o), o.accuracy, o.passed) for c, o in measured]
    x_label = (
        "latency over the float library's, timed in turns"
        if paired(outcomes)
        else f"{result.objective} ({candidates.UNITS[result.objective]})"
    )
    chart = (
        svg.scatter(
            points,
            title="candidates: speed against worst cosine (passing in blue)",
            x_label=x_label,
            y_label="worst cosine",
        )
        if points
        else ""
    )
    head, *rows = _rows(result)
    table = "<tr>" + "".join(f"<th>{escape(cell)}</th>" for cell in head) + "</tr>"
    table += "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>modelbuild search: '
        f'{escape(result.build)}</title></head><body style="font: 14px system-ui, sans-serif">'
        f"<h1>Search: {escape(result.build)}</h1><p>{escape(_summary(result).replace('**', ''))}</p>"
        f"{chart}<table>{table}</table></body></html>\n"
    )


def _summary(result: SearchResult) -> str:
    best = result.best
    if best is None:
        return "**No candidate passed the build's accuracy gates.**"
    ratio = _ratio(result, best[1])
    return (
        f"Chosen: **{best[0].describe()}**, {result.objective} {_value(best[1].objective, result.objective)}"
        + (f" ({ratio:.2f}x the float build)" if ratio else "")
        + f"; snippet {snippet_name(result)}.toml."
    )


def _rows(result: SearchResult) -> list[list[str]]:
    """The candidates table, its head first, in the order they were built."""
    front = set(frontier(result.trials))
    rows = [
        [
            "#",
            "candidate",
            f"{result.objective} ({candidates.UNITS[result.objective]})",
            "vs float",
            "worst cosine",
            "verdict",
        ]
    ]
    for index, (c, o) in enumerate(result.trials.items(), 1):
        ratio = _ratio(result, o)
        verdict = ("passed" if o.passed else f"rejected: {o.why}") + (" (frontier)" if c in front else "")
        rows.append(
            [
                str(index),
                c.describe(),
                _value(o.objective, result.objective, unit=False),
                f"{ratio:.2f}x" if ratio else "-",
                _cosine(o.accuracy),
                verdict,
            ]
        )
    return rows


def _ratio(result: SearchResult, outcome) -> float | None:
    """The candidate over the float build: timed in turns with its library where it was, else the two builds'
    own timings, each from a process of its own."""
    if outcome.vs_float is not None:
        return outcome.vs_float
    reference = result.float_objective
    return outcome.objective / reference if outcome.objective and reference else None


def _value(value: float | None, objective: str, *, unit: bool = True) -> str:
    if value is None:
        return "-"
    text = f"{value:.0f}" if objective == "size" else f"{value:.3f}"
    return f"{text} {candidates.UNITS[objective]}" if unit else text


def _cosine(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}"
