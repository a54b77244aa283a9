"""GitHub Actions: the Markdown report as the job's summary, and each failed gate as an annotation on the
recipe line that sets it, so a reviewer sees the failure beside the diff.

Pure text; the CLI decides when (GITHUB_ACTIONS, GITHUB_STEP_SUMMARY are set) and writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from modelbuild.reports.model import Report

# (build name, gate name) -> (file, line) where the gate's limit is written
Locate = Callable[[str, str], tuple[Path, int | None]]


def annotations(report: Report, locate: Locate, relative: Callable[[Path], str]) -> list[str]:
    """One `::error` workflow command per failed gate and per failed stage."""
    lines = []
    for build in report.builds:
        for gate in build.gates:
            if gate.passed:
                continue
            file, line = locate(build.name, gate.name)
            where = f"file={_escape_property(relative(file))}" + (f",line={line}" if line else "")
            lines.append(
                f"::error {where},title={_escape_property(f'modelbuild gate {gate.name}')}::"
                f"{_escape_data(f'{build.name}: {gate.describe()}')}"
            )
        for stage, run in build.stages.items():
            if run.status == "failed":
                message = f"{build.name}: {run.error or 'the stage failed'}"
                lines.append(f"::error title={_escape_property(f'modelbuild {stage} failed')}::{_escape_data(message)}")
    return lines


def append_summary(path: Path, markdown: str) -> None:
    """Append the report to the job summary file (GitHub renders every step's appends, in order)."""
    with open(path, "a", encoding="utf-8") as summary:
        summary.write(markdown + "\n")


# GitHub's escaping for workflow commands (actions/toolkit, command.ts)
def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")
