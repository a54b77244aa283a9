"""Tuning with the real MetaSchedule on tiny models: a handful of trials, paid once."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from modelbuild.cli import main
from modelbuild.tuning import database as tuning_db
from tests.helpers.onnx_models import conv_relu
from tests.helpers.processes import left_in

RECIPE = """
[models.a]
path = "a.onnx"
inputs.x = {{ shape = [1, 3, 16, 16] }}
{second}
[targets.cpu]
kind = "llvm"
mcpu = "host"
num-cores = 2

[tuning.quick]
trials_per_task = {trials}
strategy = "{strategy}"
cost_model = "random"
number = 1
min_repeat_ms = 0
{records}
[validation]
enabled = false

[[builds]]
model = "a"
targets = ["cpu"]
tuning = "quick"
layout = "NCHW"  # one conv task: channels-last would add the two edge transposes as tasks of their own
{second_build}
"""

SECOND = """
[models.b]
path = "b.onnx"
inputs.x = { shape = [1, 3, 16, 16] }
"""
SECOND_BUILD = """
[[builds]]
model = "b"
targets = ["cpu"]
tuning = "quick"
layout = "NCHW"
"""


def write(root, trials=2, second=False, records="", strategy="evolutionary"):
    text = RECIPE.format(
        trials=trials,
        second=SECOND if second else "",
        second_build=SECOND_BUILD if second else "",
        records=records,
        strategy=strategy,
    )
    (root / "deploy.toml").write_text(textwrap.dedent(text))


def build(root, capsys) -> dict:
    assert main(["build", "-f", str(root / "deploy.toml"), "--json"]) == 0
    return {n["node"]: n["status"] for n in json.loads(capsys.readouterr().out)["nodes"]}


def summary(root, build_name) -> dict:
    trace = json.loads((root / ".cache/traces" / f"tune__{build_name}.json").read_text())
    action = json.loads((root / ".cache/actions" / trace["key"][:2] / f"{trace['key']}.json").read_text())
    digest = action["outputs"]["tune.json"]
    return json.loads((root / ".cache/objects" / digest[:2] / digest).read_text())


def database(root) -> dict:
    folders = list((root / ".cache/tuning").iterdir())
    assert len(folders) == 1  # one target, one database
    return tuning_db.read(folders[0])


@pytest.fixture
def root(tmp_path):
    conv_relu(tmp_path / "a.onnx", channels=8)
    conv_relu(tmp_path / "b.onnx", channels=8, seed=5)  # other weights, the same conv workload
    write(tmp_path)
    return tmp_path


def test_tuning_is_paid_once_continues_when_raised_and_is_shared_by_workload(root, capsys):
    assert main(["build", "-f", str(root / "deploy.toml")]) == 0
    shown = capsys.readouterr().out
    assert re.search(r"^progress tune:a@cpu  tasks \d/1  trials \d/2  best est\. [\d.]+ ms", shown, re.M), shown
    assert "built    tune:a@cpu" in shown
    first = summary(root, "a@cpu")
    assert first["measured_now"] == 2 and len(first["tasks"]) == 1
    reported = json.loads((root / "build/report.json").read_text())["builds"][0]["tuning"]
    assert reported["trials_measured_now"] == 2 and reported["tasks"] == 1
    assert "2 measured by this run" in (root / "build/report.md").read_text()
    # where the stage's time went: the waits on builder and runner are within the search's own seconds (the
    # local runner's results are in before they are asked for: its waits are about 0)
    seconds = reported["seconds_now"]
    assert set(seconds) == {"defaults", "search", "builder", "runner_waits"} and seconds["defaults"] > 0
    assert seconds["builder"] > 0 and seconds["builder"] + seconds["runner_waits"] <= seconds["search"]
    records_after_first = len(database(root)["records"])
    assert records_after_first >= 1
    task = first["tasks"][0]
    assert task["default_us"] > 0  # the default schedule was timed as the bar a tuned record must clear
    if task["applied"] == "tuned":
        assert task["tuned_us"] < task["default_us"]
    assert database(root)["defaults"][task["workload"]]["seconds"] == pytest.approx(task["default_us"] / 1e6)

    statuses = build(root, capsys)  # a second build measures nothing
    assert set(statuses.values()) == {"cached"}
    assert json.loads((root / "build/report.json").read_text())["builds"][0]["tuning"]["seconds_now"] == {}

    write(root, trials=3)  # raising the trials continues from the records already there
    build(root, capsys)
    assert summary(root, "a@cpu")["measured_now"] == 1
    db = database(root)
    assert len(db["records"]) >= records_after_first and list(db["trials"].values()) == [3]

    write(root, trials=3, second=True)  # a second model with the same workload reuses its records
    statuses = build(root, capsys)
    assert statuses["tune:b@cpu"] == "built" and statuses["tune:a@cpu"] == "cached"
    assert summary(root, "b@cpu")["measured_now"] == 0


def test_exported_records_let_a_fresh_clone_build_with_zero_trials_and_leave_no_temporary_files(
    root, tmp_path_factory, stage_tmpdir, capsys
):
    write(root, strategy="replay-trace")  # the records travel whatever searched for them; this one is 3x cheaper
    build(root, capsys)
    assert main(["tune", "export", str(root / "tuning/records.json"), "-f", str(root / "deploy.toml")]) == 0
    capsys.readouterr()
    clone = tmp_path_factory.mktemp("clone")
    conv_relu(clone / "a.onnx", channels=8)
    (clone / "tuning").mkdir()
    (clone / "tuning/records.json").write_text((root / "tuning/records.json").read_text())
    write(clone, trials=2, records='records = "tuning/records.json"', strategy="replay-trace")
    build(clone, capsys)
    assert summary(clone, "a@cpu")["measured_now"] == 0
    assert json.loads((clone / "build/report.json").read_text())["builds"][0]["tuning"]["trials_measured_now"] == 0
    tuned = (root / "build/a/cpu/model.so").read_bytes()
    assert (clone / "build/a/cpu/model.so").read_bytes() == tuned  # the same records give the same library
    assert left_in(stage_tmpdir) == []  # the compile's database of the records, the tuning's work


def in_a_fresh_process(code: str) -> None:
    """Run `code`, which prints ok, in its own interpreter: tvm.s_tir.tensor_intrin is imported once per process."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", code + "print('ok')\n"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_tensor_intrinsics_import_registers_them_and_restores_inspect():
    """MetaSchedule's CPU intrinsics are registered, the GPU ones deferred until read, and inspect.getmodule is
    TVM's and Python's own again afterwards."""
    in_a_fresh_process(
        "import inspect; original = inspect.getmodule\n"
        "from modelbuild.stages.tune import import_tensor_intrinsics\n"
        "import_tensor_intrinsics('llvm')\n"
        "from tvm.s_tir import TensorIntrin\n"
        "assert TensorIntrin.get('dot_16x4_vnni') is not None\n"
        # neither rocm.py nor cuda.py has run
        "assert TensorIntrin.get('sdot4', allow_missing=True) is None\n"
        "assert TensorIntrin.get('wmma_sync_16x16x16_f16f16f32', allow_missing=True) is None\n"
        "from tvm.s_tir.tensor_intrin import rocm\n"  # which runs it, once read:
        "assert rocm.AMDGPU_SDOT4_INTRIN == 'sdot4' and TensorIntrin.get('sdot4') is not None\n"
        "assert inspect.getmodule is original\n"
        "import os; assert inspect.getmodule(os.path) is os.path\n"
    )


def test_tuning_for_a_gpu_imports_its_tensor_intrinsics_at_once():
    in_a_fresh_process(
        "from modelbuild.stages.tune import import_tensor_intrinsics\n"
        "import_tensor_intrinsics('cuda')\n"
        "from tvm.s_tir import TensorIntrin\n"
        "assert TensorIntrin.get('wmma_sync_16x16x16_f16f16f32') is not None\n"
    )
