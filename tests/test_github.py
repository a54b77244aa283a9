"""GitHub Actions output: annotations of failed gates on the recipe line that sets each, and the summary."""

from __future__ import annotations

import textwrap
from pathlib import Path

from modelbuild.recipe import load_recipe
from modelbuild.reports.github import annotations, append_summary
from modelbuild.reports.model import BuildReport, Report, StageRun, Validation
from modelbuild.validation.gates import GateResult
from tests.helpers.onnx_models import conv_relu


def report() -> Report:
    failed = BuildReport(
        "net@cpu",
        validation=Validation(ran=True),
        gates=[GateResult("min_cosine", 0.998, 0.9999, False), GateResult("max_p99_ms", 1.0, 5.0, True)],
    )
    broken = BuildReport("net+int8@cpu", stages={"quantize": StageRun("failed", 1.0, "k", error="no samples, 50%")})
    return Report(passed=False, recipe="deploy.toml", builds=[failed, broken], cache={})


def test_each_failed_gate_and_stage_is_one_annotation_escaped_as_github_reads_it():
    lines = annotations(
        report(),
        lambda build, gate: (Path("/repo/recipes/validation/float-ci.toml"), 7),
        lambda path: str(path).removeprefix("/repo/"),
    )
    assert lines == [
        "::error file=recipes/validation/float-ci.toml,line=7,title=modelbuild gate min_cosine::"
        "net@cpu: min_cosine: 0.998 < 0.9999",
        "::error title=modelbuild quantize failed::net+int8@cpu: no samples, 50%25",
    ]


def test_the_summary_is_appended_to_what_earlier_steps_wrote(tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("## an earlier step\n")
    append_summary(summary, "# modelbuild report: FAILED")
    assert summary.read_text() == "## an earlier step\n# modelbuild report: FAILED\n"


def test_a_gate_is_located_where_it_is_written_the_builds_own_override_first(tmp_path):
    conv_relu(tmp_path / "net.onnx")
    (tmp_path / "preset.toml").write_text("[validation.gates]\nmin_cosine = 0.9999\nmax_p99_ms = 50\n")
    (tmp_path / "deploy.toml").write_text(
        textwrap.dedent("""\
        include = ["preset.toml"]

        [models.net]
        path = "net.onnx"
        inputs.x = { shape = [1, 3, 8, 8] }

        [targets.cpu]
        kind = "llvm"
        mcpu = "x86-64"

        [[builds]]
        model = "net"
        targets = ["cpu"]

        [[builds]]
        model = "net"
        targets = ["cpu"]
        quantization = "int8"
        validation.gates = { min_cosine = 0.99 }

        [quantization.int8]
        calibration = { source = "random", samples = 4 }
        """)
    )
    recipe = load_recipe(tmp_path / "deploy.toml")
    float_build, int8_build = recipe.spec.builds
    assert recipe.gate_location(float_build, "min_cosine") == (tmp_path / "preset.toml", 2)
    assert recipe.gate_location(int8_build, "min_cosine") == (tmp_path / "deploy.toml", 19)
    assert recipe.gate_location(int8_build, "max_p99_ms") == (tmp_path / "preset.toml", 3)


def test_ci_workflow_writes_a_workflow_that_builds_against_the_base_branch_and_refuses_to_overwrite(tmp_path, capsys):
    import yaml

    from modelbuild.cli import main

    out = tmp_path / ".github/workflows/models.yml"
    assert main(["ci-workflow", "-o", str(out)]) == 0
    steps = yaml.safe_load(out.read_text())["jobs"]["build"]["steps"]
    uses = [s.get("uses", "").split("@")[0] for s in steps]
    assert {"actions/checkout", "actions/cache", "actions/upload-artifact"} <= set(uses)
    run = next(s for s in steps if s.get("name") == "modelbuild")["run"]
    assert "--baseline baseline/report.json" in run
    assert next(s for s in steps if s.get("uses", "").startswith("actions/cache"))["with"]["path"] == ".cache"
    capsys.readouterr()
    out.write_text("mine")
    assert main(["ci-workflow", "-o", str(out)]) == 2 and out.read_text() == "mine"
    assert "exists (fix: pass --force" in capsys.readouterr().err
    assert main(["ci-workflow", "-o", str(out), "--force"]) == 0 and out.read_text() != "mine"
