"""modelbuild.build from Python: the typed report back, the typed errors raised, the same store as the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import modelbuild
from modelbuild import manifest
from modelbuild.api import run_build
from modelbuild.cli import main
from modelbuild.errors import BuildFailed, ModelbuildError, RecipeError, SelectionError
from tests.helpers.fake_stages import write_fake_model


def test_build_returns_the_report_and_a_second_build_runs_nothing(fake_project):
    root, _ = fake_project
    report = modelbuild.build(root / "deploy.toml")
    assert report.passed and sorted(b.name for b in report.builds) == ["a@cpu", "b@cpu"]
    assert json.loads((root / "build/report.json").read_text())["passed"] is True
    again = modelbuild.build(root / "deploy.toml")
    statuses = {stage.status for b in again.builds for stage in b.stages.values()}
    assert statuses == {"cached"}


def test_a_build_from_python_and_one_from_the_cli_share_the_store(fake_project, capsys):
    root, _ = fake_project
    modelbuild.build(root / "deploy.toml", ["a@cpu"])
    assert main(["build", "-f", str(root / "deploy.toml"), "a@cpu"]) == 0
    assert "0 built, 2 cached, 0 failed" in capsys.readouterr().out


def test_the_build_folder_describes_each_library(fake_project):
    root, _ = fake_project
    modelbuild.build(root / "deploy.toml")
    described = manifest.read(root / "build/a/cpu")
    assert described.library == "model.so" and described.threads == 2
    assert described.target["mcpu"] == "skylake"
    assert described.signature.inputs == {"x": {"shape": [1, 3, 8, 8], "dtype": "float32"}}


def test_a_failed_stage_is_raised_with_its_log_and_the_report_of_the_rest(fake_project):
    root, _ = fake_project
    write_fake_model(root / "a.json", ["conv"], fail="no such operator")
    with pytest.raises(BuildFailed, match="import:a failed: fake import refuses: no such operator") as caught:
        modelbuild.build(root / "deploy.toml", keep_going=True)
    assert caught.value.exit_code == 3 and caught.value.log
    assert [b.name for b in caught.value.report.builds if b.passed] == ["b@cpu"]


def test_bad_input_in_a_stage_is_raised_with_the_clis_exit_code(fake_project):
    root, _ = fake_project
    write_fake_model(root / "a.json", ["conv"], bad_input="input 'y' is not in the model")
    with pytest.raises(BuildFailed) as caught:
        modelbuild.build(root / "deploy.toml", ["a@cpu"])
    assert caught.value.exit_code == 2


def test_a_bad_recipe_and_a_bad_selector_raise_their_typed_errors(fake_project):
    root, _ = fake_project
    with pytest.raises(SelectionError, match="no build matches 'gpu'"):
        modelbuild.build(root / "deploy.toml", ["gpu"])
    (root / "deploy.toml").write_text((root / "deploy.toml").read_text().replace("num-cores", "num_cores"))
    with pytest.raises(RecipeError, match="deploy.toml"):
        modelbuild.build(root / "deploy.toml")
    assert not (root / ".cache/actions").exists() or not list((root / ".cache/actions").glob("*/*"))


def test_jobs_below_one_are_refused():
    with pytest.raises(ModelbuildError, match="at least 1"):
        run_build(None, jobs=0)


def test_importing_the_package_loads_no_build_system():
    """`modelbuild.build` is resolved on first use: a program that only runs a library pays for nothing."""
    code = "import sys, modelbuild; print(sorted(m for m in sys.modules if m.startswith('modelbuild')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['modelbuild']"
