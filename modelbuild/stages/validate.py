"""The validate stage: run the built library on the golden inputs and time it, in a fresh process.

The measurement runs in a subprocess of its own (measure.py) so that its peak resident memory and its
threads are its alone, not those of a worker that ran other stages before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from modelbuild.errors import StageError

METRICS_FILE = "metrics.json"


def run(*, inputs: dict[str, Path], params: dict, out: Path) -> None:
    """Write metrics.json: accuracy per output, timing, artifact size, peak memory, machine; or why not run."""
    if not params["runs_here"]:
        _write(out, {"ran": False, "reason": params["reason"]})
        return
    result = out / "measured.json"
    env = {**os.environ, "TVM_NUM_THREADS": str(params["threads"]), "OMP_NUM_THREADS": str(params["threads"])}
    proc = subprocess.run(
        [sys.executable, "-m", "modelbuild.stages.measure", str(inputs["library"]), str(inputs["golden"]),
         str(inputs["signature"]), json.dumps(params["timing"]), str(result)],
        env=env, capture_output=True, text=True,
    )
    sys.stdout.write(proc.stdout), sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise StageError(f"running the library failed (exit {proc.returncode}): {tail}")
    metrics = json.loads(result.read_text())
    result.unlink()
    metrics.update(ran=True, artifact_bytes=inputs["library"].stat().st_size, threads=params["threads"])
    _write(out, metrics)


def _write(out: Path, metrics: dict) -> None:
    (out / METRICS_FILE).write_text(json.dumps(metrics, indent=1, sort_keys=True))
