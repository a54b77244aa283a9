"""Progress of a running stage: the stage appends JSON lines to a file, the scheduler reads the last one.

The file is named by the worker (MODELBUILD_PROGRESS); a stage that never reports costs nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ENV = "MODELBUILD_PROGRESS"


def report(**fields) -> None:
    """Record the stage's progress now (for example tasks done, trials, best latency)."""
    path = os.environ.get(ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(fields) + "\n")


def latest(path: Path) -> dict | None:
    """The last progress a stage reported, or None."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:
            continue  # a line being written
    return None


def describe(fields: dict, elapsed: float | None = None) -> str:
    """One short line for a person. Tuning's counts read as tasks, trials, best estimate and an ETA (from the
    trials measured so far over `elapsed` seconds); other stages give their own 'message', else their fields."""
    if "planned" in fields and "trials" in fields:
        parts = [
            f"tasks {fields.get('tasks_done', 0)}/{fields.get('tasks', '?')}",
            f"trials {fields['trials']}/{fields['planned']}",
        ]
        if fields.get("estimate_ms") is not None:
            parts.append(f"best est. {fields['estimate_ms']:.3f} ms")
        left = eta(fields["trials"], fields["planned"], elapsed)
        if left is not None:
            parts.append(f"ETA {clock(left)}")
        return "  ".join(parts)
    return fields.get("message") or "  ".join(f"{k} {v}" for k, v in fields.items())


def eta(done: int, total: int, elapsed: float | None) -> float | None:
    """Seconds left at the rate so far, or None before there is a rate."""
    if not elapsed or done <= 0 or total <= done:
        return None if total > done else 0.0
    return elapsed / done * (total - done)


def clock(seconds: float) -> str:
    """12s, 3m05s, 1h02m."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
