"""Stand-in stages for testing the build system without TVM: real functions run in real worker processes.

The fake import reads a JSON "model" and writes its graph in canonical form, so a model re-saved with other
metadata or spacing yields the same output bytes, which is what early cutoff needs.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def import_(*, inputs: dict[str, Path], params: dict, out: Path) -> None:
    model = json.loads(inputs["model"].read_text())
    if model.get("fail"):
        from modelbuild.errors import StageError

        raise StageError(f"fake import refuses: {model['fail']}")
    if model.get("crash"):
        os._exit(11)  # a worker that dies as a segfault in native code would
    if model.get("progress"):
        from modelbuild import progress

        for step in range(model["progress"]):
            progress.report(message=f"step {step + 1}/{model['progress']}", step=step + 1)
            time.sleep(0.4)
    if model.get("sleep"):
        started = time.time()
        time.sleep(model["sleep"])
        (out / "interval.json").write_text(json.dumps([started, time.time()]))
    ir = {"graph": model["graph"], "inputs": params["inputs"]}
    (out / "ir.json").write_text(json.dumps(ir, sort_keys=True))
    (out / "signature.json").write_text(json.dumps({"inputs": params["inputs"], "outputs": {}}))


def compile_(*, inputs: dict[str, Path], params: dict, out: Path) -> None:
    ir = json.loads(inputs["ir"].read_text())
    (out / params["library"]).write_text(json.dumps({"ir": ir, "target": params["target"]}, sort_keys=True))
    (out / "analysis.json").write_text(json.dumps({"fusion": None, "memory": None}))
