"""What `modelbuild search` refuses before building anything: one line, exit 2, nothing built."""

from __future__ import annotations

import textwrap

from modelbuild.cli import main
from tests.helpers.paths import REPO

RECIPE = """
include = ["{repo}/recipes/targets/rpi4.toml"]

[models.cls]
path = "m.onnx"
inputs.x = {{ shape = [1, 3, 48, 192] }}

[targets.cpu]
kind = "llvm"
mcpu = "host"

[quantization.int8]

[search.fast]

[validation.gates]
{gates}

[[builds]]
model = "cls"
targets = ["cpu", "rpi4"]
quantization = "int8"
search = "fast"
"""


def search(tmp_path, capsys, build: str, gates: str = "min_cosine = 0.99") -> tuple[int, str]:
    (tmp_path / "m.onnx").write_bytes(b"never read: nothing is built")
    (tmp_path / "deploy.toml").write_text(textwrap.dedent(RECIPE.format(repo=REPO, gates=gates)))
    code = main(["search", build, "-f", str(tmp_path / "deploy.toml")])
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and not (tmp_path / "build").exists()
    return code, err


def test_a_search_needs_an_accuracy_gate(tmp_path, capsys):
    code, err = search(tmp_path, capsys, "cls+int8@cpu", gates="max_p50_ms = 5")
    assert code == 2 and "deploy.toml" in err and "validation.gates: a search needs an accuracy gate" in err
    assert "min_cosine = 0.99" in err


def test_a_search_needs_a_target_it_can_run(tmp_path, capsys):
    code, err = search(tmp_path, capsys, "cls+int8@rpi4")
    assert code == 2 and "target 'rpi4' cannot run here: built for aarch64-linux-gnu" in err
    assert "rpc device" in err


def test_a_search_runs_for_one_build(tmp_path, capsys):
    code, err = search(tmp_path, capsys, "cls")
    assert code == 2 and "'cls' selects 2 builds with a search: cls+int8@cpu, cls+int8@rpi4" in err
