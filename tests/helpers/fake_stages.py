"""Stand-in stages for testing the build system without TVM: real functions run in real worker processes.

The fake import reads a JSON "model" and writes its graph in canonical form, so a model re-saved with other
metadata or spacing yields the same output bytes, which is what early cutoff needs.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

from modelbuild import manifest, signature
from modelbuild.signature import Signature
from modelbuild.stages.contracts import COMPILE, IMPORT


def import_(*, inputs: dict[str, Path], params: dict, out: Path) -> None:
    model = json.loads(inputs["model"].read_text())
    if model.get("fail"):
        from modelbuild.errors import StageError

        raise StageError(f"fake import refuses: {model['fail']}")
    if model.get("bad_input"):
        from modelbuild.errors import InputError

        raise InputError(f"fake import: {model['bad_input']}")
    if model.get("disk_full"):
        import errno

        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out / "ir.json"))
    if model.get("crash"):
        os._exit(11)  # a worker that dies as a segfault in native code would
    if model.get("pidfile"):  # says which process runs the stage, for tests that kill its parent
        Path(model["pidfile"]).write_text(str(os.getpid()))
    if model.get("cmdline"):  # says what process runs the stage: a worker of the pool, or of a Ray node
        Path(model["cmdline"]).write_bytes(Path("/proc/self/cmdline").read_bytes())
    if model.get("hold"):  # runs until the test lets it go: a stage caught mid-run
        _wait_for(Path(model["hold"]), "the test to let the stage finish", timeout=120)
    if model.get("progress"):
        from modelbuild import progress

        for step in range(1, model["progress"] + 1):
            progress.report(message=f"step {step}/{model['progress']}", step=step)
            _wait_for(Path(model["acks"]) / f"step-{step}", "the build to show step {step}")
    if model.get("meet"):  # a rendezvous: finishes only if the other stage is running at the same time
        folder, other = Path(model["meet"]["folder"]), model["meet"]["other"]
        (folder / model["meet"]["me"]).touch()
        _wait_for(folder / other, f"stage {other} to start while this one runs")
    declared = {name: {"shape": i["shape"], "dtype": i["dtype"]} for name, i in params["inputs"].items()}
    ir = {"graph": model["graph"], "inputs": declared}
    (out / "ir.json").write_text(json.dumps(ir, sort_keys=True))
    (out / "signature.json").write_text(Signature(inputs=declared, outputs={}).to_json())


def _wait_for(path: Path, what: str, timeout: float = 60.0) -> None:
    """Poll for a file another process writes; fail the stage (not hang the suite) if it never comes."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            from modelbuild.errors import StageError

            raise StageError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.01)


def compile_(*, inputs: dict[str, Path], params: dict, out: Path) -> None:
    ir = json.loads(inputs["ir"].read_text())
    (out / params["library"]).write_text(json.dumps({"ir": ir, "target": params["target"]}, sort_keys=True))
    (out / "analysis.json").write_text(json.dumps({"fusion": None, "memory": None}))
    described = manifest.describe(
        library=params["library"], target=params["target"], runtime={}, signature=signature.read(inputs["signature"])
    )
    (out / manifest.FILE).write_text(described.to_json())


# fast fakes that run the same way as the TVM stages, in worker processes
# under the real stages' contracts: the same input roles, fewer outputs
FAKE_STAGES = {
    "import": replace(
        IMPORT, entry="tests.helpers.fake_stages:import_", tools=("onnx",), outputs=("ir.json", "signature.json")
    ),
    "compile": replace(COMPILE, entry="tests.helpers.fake_stages:compile_"),
}


def write_fake_model(path: Path, graph: list[str], **extra) -> Path:
    path.write_text(json.dumps({"graph": graph, **extra}))
    return path


FAKE_RECIPE = """
[models.a]
path = "a.json"
inputs.x = {{ shape = {shape_a}, dtype = "float32" }}

[models.b]
path = "b.json"
inputs.x = {{ shape = [1, 4], dtype = "float32" }}

[targets.cpu]
kind = "llvm"
mcpu = "skylake"
num-cores = {cores}

[validation]
enabled = false  # these recipes test the build core; validation has its own tests

[[builds]]
model = "a"
targets = ["cpu"]

[[builds]]
model = "b"
targets = ["cpu"]
"""


def fake_compiler(path, version: str, *, fails: str = ""):
    """An executable that answers --version and logs each call; with `fails`, it fails every link with that."""
    path.write_text(
        f'#!/bin/sh\necho "$@" >> {path}.calls\n'
        + (f"echo '{fails}' >&2; exit 1\n" if fails else f"echo '{version}'\necho 'Copyright'\n")
    )
    path.chmod(0o755)
    return path
