"""A real model built with the real TVM on a Ray cluster (tests/helpers/ray_cluster.py) and on this machine:
the same library, byte for byte, so where a stage ran never changes what a key names."""

from __future__ import annotations

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
