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


def describe(fields: dict) -> str:
    """One short line for a person: the stage's own 'message', else its fields."""
    return fields.get("message") or "  ".join(f"{k} {v}" for k, v in fields.items())
