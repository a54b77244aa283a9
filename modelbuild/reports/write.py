"""Writing the reports into the build folder, each atomically."""

from __future__ import annotations

import json
from pathlib import Path

from modelbuild.fsutil import write_atomic
from modelbuild.reports import html, junit, markdown
from modelbuild.reports.model import Report

FILES = {
    # compact: json's C encoder, where indent would take the pure-Python one, ten times slower on the
    # latency samples every no-op build rewrites (`jq . report.json` pretty-prints it)
    "report.json": lambda r: json.dumps(r.to_json(), allow_nan=False, separators=(",", ":")),
    "report.md": markdown.render,
    "junit.xml": junit.render,
    "report.html": html.render,
}


def write_reports(report: Report, build_dir: Path) -> list[Path]:
    """Write report.json, report.md, junit.xml and report.html; return their paths."""
    paths = []
    for name, render in FILES.items():
        path = Path(build_dir) / name
        write_atomic(path, render(report).encode())
        paths.append(path)
    return paths
