"""A real model built with the real TVM on a Ray cluster (tests/helpers/ray_cluster.py) and on this machine:
the same library, byte for byte, so where a stage ran never changes what a key names."""

from __future__ import annotations

import json
import textwrap

import pytest

from modelbuild.hashing import sha256_file
from tests.helpers.cli import run_cli
from tests.helpers.onnx_models import conv_relu

pytest.importorskip("ray", reason="ray is not installed here (pip install 'modelbuild[cluster]')")

RECIPE = """
[models.tiny]
path = "tiny.onnx"
inputs.x = { shape = [1, 3, 16, 16], dtype = "float32" }

[targets.cpu]
kind = "llvm"
mcpu = "core-avx2"
num-cores = 1

[validation]
enabled = false  # validation times here whatever the executor; this test is about what the cluster makes

[[builds]]
model = "tiny"
targets = ["cpu"]
"""


def project(folder):
    conv_relu(folder / "tiny.onnx")
    (folder / "deploy.toml").write_text(textwrap.dedent(RECIPE))
    return folder


def test_a_library_built_on_the_cluster_is_the_library_built_here(
    ray_cluster, bucket, tmp_path_factory, capsys, monkeypatch
):
    here = project(tmp_path_factory.mktemp("here"))
    code, out, err = run_cli(capsys, here, "build", "--executor", "local")
    assert code == 0, err
    there = project(tmp_path_factory.mktemp("there"))
    monkeypatch.setenv("MODELBUILD_REMOTE_CACHE", bucket)
    code, out, err = run_cli(capsys, there, "build", "--executor", ray_cluster.address)
    assert code == 0, err
    built = [line.split()[1] for line in out.splitlines() if line.startswith("built ")]
    assert built == ["import:tiny", "compile:tiny@cpu"], out
    assert "remote cache" in err and "2 results taken" in err, "both stages came back through the remote cache"
    library = "build/tiny/cpu/model.so"
    assert sha256_file(there / library) == sha256_file(here / library)


TUNED = """
[models.tiny]
path = "tiny.onnx"
inputs.x = { shape = [1, 3, 16, 16] }

[targets.cpu]
kind = "llvm"
mcpu = "core-avx2"
num-cores = 1

[tuning.quick]
trials_per_task = 4
cost_model = "random"
number = 1
min_repeat_ms = 0

[validation]
enabled = false

[[builds]]
model = "tiny"
targets = ["cpu"]
tuning = "quick"
layout = "NCHW"  # one conv task
"""


def test_tuning_compiles_its_candidates_on_the_cluster_and_measures_them_here(
    ray_cluster, bucket, tmp_path, capsys, monkeypatch
):
    conv_relu(tmp_path / "tiny.onnx", channels=8)
    (tmp_path / "deploy.toml").write_text(textwrap.dedent(TUNED))
    monkeypatch.setenv("MODELBUILD_REMOTE_CACHE", bucket)
    code, out, err = run_cli(capsys, tmp_path, "build", "--executor", ray_cluster.address, "--json")
    assert code == 0, err
    nodes = {n["node"]: n for n in json.loads(out)["nodes"]}
    assert nodes["tune:tiny@cpu"]["status"] == "built"
    trace = json.loads((tmp_path / ".cache/traces/tune__tiny@cpu.json").read_text())
    action = json.loads((tmp_path / ".cache/actions" / trace["key"][:2] / f"{trace['key']}.json").read_text())
    digest = action["outputs"]["tune.json"]
    summary = json.loads((tmp_path / ".cache/objects" / digest[:2] / digest).read_text())
    assert summary["compiled_on_cluster"] >= 4, "the search's candidates compiled on the cluster"
    assert summary["measured_now"] == 4
    (database,) = (tmp_path / ".cache/tuning").iterdir()
    times = [json.loads(line)[1][1] for line in (database / "database_tuning_record.json").read_text().splitlines()]
    assert len(times) >= 4 and all(t[0] < 1.0 for t in times), "each candidate ran and was timed, here"
