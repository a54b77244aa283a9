"""Validation end to end with the real TVM and onnxruntime: gates, reports, and what reruns."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from importlib import resources

import jsonschema
import pytest

from modelbuild.cli import main
from tests.helpers.onnx_models import two_convs, two_in_two_out

RECIPE = """
[models.net]
path = "net.onnx"
inputs.x = {{ shape = [1, 3, 8, 8], dtype = "float32" }}

[targets.cpu]
kind = "llvm"
mcpu = "host"
num-cores = 1

[validation]
golden = {{ seed = {seed}, count = 2 }}
timing = {{ warmup = 1, min_runs = 5, min_seconds = 0.0, roofline = true }}

[validation.gates]
min_cosine = 0.999
max_p99_ms = {p99}

[[builds]]
model = "net"
targets = ["cpu"]
"""


@pytest.fixture
def project(tmp_path):
    two_convs(tmp_path / "net.onnx")

    def write(seed=0, p99=1000.0, extra=""):
        (tmp_path / "deploy.toml").write_text(textwrap.dedent(RECIPE.format(seed=seed, p99=p99)) + extra)

    write()
    return tmp_path, write


def build(root, capsys, *args):
    code = main(["build", "-f", str(root / "deploy.toml"), "--json", *args])
    summary = json.loads(capsys.readouterr().out)
    return code, {n["stage"]: n["status"] for n in summary["nodes"]}


def report(root) -> dict:
    return json.loads((root / "build/report.json").read_text())


def test_passing_build_reports_accuracy_timing_and_provenance(project, capsys):
    root, _ = project
    code, stages = build(root, capsys)
    assert code == 0 and set(stages.values()) == {"built"}
    data = report(root)
    jsonschema.validate(
        data, json.loads(resources.files("modelbuild.reports").joinpath("report.schema.json").read_text())
    )
    b = data["builds"][0]
    assert b["passed"] and b["validation"]["ran"]
    assert b["accuracy"]["y"]["cosine"] > 0.9999
    assert b["latency_ms"]["runs"] >= 5 and b["latency_ms"]["median"] > 0
    assert b["provenance"]["model_sha256"] == data["builds"][0]["provenance"]["model_sha256"]
    assert b["provenance"]["host_cpu"] not in (None, "host")
    assert {g["name"] for g in b["gates"]} == {"min_cosine", "max_p99_ms"}
    assert b["scaling"] is None  # one core in this recipe: nothing to scale
    roof = b["roofline"]
    assert roof["peak_flops_per_s"] > 1e9 and roof["peak_bytes_per_s"] > 1e8
    assert [k["ops"][0] for k in roof["kernels"]][:2] == ["conv2d", "conv2d"]  # the two convs are the heaviest
    assert all(k["bound"] in ("compute", "memory") and k["seconds"] > 0 for k in roof["kernels"])
    assert roof["blas_flops_per_s"] > 1e9 and roof["slow_below"] == 0.3  # the compute roof: the FMA loop's
    assert all(k["slow"] == (k["roof_fraction"] < 0.3) and k["shapes"] for k in roof["kernels"])


def test_a_gate_that_must_fail_exits_1_and_shows_in_all_three_reports_and_on_github(project, capsys, monkeypatch):
    root, write = project
    write(p99=1e-6, extra="")
    (root / "deploy.toml").write_text(
        (root / "deploy.toml").read_text().replace("min_cosine = 0.999", "min_cosine = 0.999\nmax_abs_error = 0.0")
    )
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(root / "step-summary.md"))
    code = main(["build", "-f", str(root / "deploy.toml")])
    out = capsys.readouterr().out
    assert code == 1
    line = (root / "deploy.toml").read_text().splitlines().index("max_p99_ms = 1e-06") + 1
    assert (
        f"::error file={root / 'deploy.toml'},line={line},title=modelbuild gate max_p99_ms::net@cpu: max_p99_ms: "
        in out
    )
    assert (root / "step-summary.md").read_text().startswith("# modelbuild report: FAILED")
    gates = {g["name"]: g for g in report(root)["builds"][0]["gates"]}
    assert not gates["max_p99_ms"]["passed"] and gates["max_p99_ms"]["limit"] == 1e-6
    assert not gates["max_abs_error"]["passed"] and gates["max_abs_error"]["value"] > 0
    assert gates["min_cosine"]["passed"]
    markdown = (root / "build/report.md").read_text()
    assert "gate failed" in markdown and "**max_p99_ms**" in markdown and "**max_abs_error**" in markdown
    junit = ET.parse(root / "build/junit.xml").getroot()
    failed = {case.get("name") for case in junit.iter("testcase") if case.find("failure") is not None}
    assert failed == {"max_p99_ms", "max_abs_error"}
    assert junit.get("failures") == "2"


def test_editing_a_latency_gate_the_cached_figures_pass_reruns_nothing_but_the_gate_check(project, capsys):
    root, write = project
    build(root, capsys)
    p99 = report(root)["builds"][0]["latency_ms"]["p99"]
    write(p99=p99 * 2)
    assert build(root, capsys) == (0, dict.fromkeys(["import", "compile", "reference", "validate"], "cached"))


def test_a_timing_gate_the_cached_figures_fail_is_measured_again_a_failed_accuracy_gate_is_not(project, capsys):
    from modelbuild.cli.common import EXIT_STALE

    root, write = project
    write(p99=1e-6)
    assert build(root, capsys)[0] == 1
    recipe = ["-f", str(root / "deploy.toml")]
    assert main(["report", *recipe]) == 1 and "GATE FAILED net@cpu  max_p99_ms" in capsys.readouterr().out
    assert main(["status", "--json", *recipe]) == EXIT_STALE
    reason = "its cached result fails max_p99_ms: run again"
    assert json.loads(capsys.readouterr().out)["stale"] == [
        {
            "node": "validate:net@cpu",
            "reasons": [{"kind": "doubted", "field": "max_p99_ms", "old": None, "new": None, "text": reason}],
        }
    ]
    code = main(["build", *recipe, "--json"])
    nodes = {n["stage"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    # as Bazel reruns a failed test: the timing may have been the machine's, so it is not failed from the cache
    assert code == 1 and {s: n["status"] for s, n in nodes.items()} == {
        "import": "cached",
        "compile": "cached",
        "reference": "cached",
        "validate": "built",
    }
    assert [r["text"] for r in nodes["validate"]["reasons"]] == [reason]
    write(p99=1000.0)
    assert build(root, capsys) == (0, dict.fromkeys(nodes, "cached"))  # the figures pass now: nothing measured
    (root / "deploy.toml").write_text(
        (root / "deploy.toml").read_text().replace("min_cosine = 0.999", "min_cosine = 0.999\nmax_abs_error = 0.0")
    )
    for _ in range(2):  # an accuracy failure is the library's, not the machine's
        assert build(root, capsys) == (1, dict.fromkeys(nodes, "cached"))


def test_against_a_baseline_report_each_outputs_accuracy_is_compared_and_gated_with_nothing_rerun(project, capsys):
    root, write = project
    build(root, capsys)
    baseline = report(root)
    (root / "base.json").write_text(json.dumps(baseline))
    code, _ = build(root, capsys, "--baseline", str(root / "base.json"))  # no baseline section: compared, not gated
    assert code == 0 and report(root)["builds"][0]["vs_baseline"]["report"] == "base.json"
    write(extra="\n[validation.baseline]\nmax_cosine_drop = 0.0\n")  # gates only: CI passes the report
    code, _ = build(root, capsys)
    assert code == 0 and "max_cosine_drop" not in {g["name"] for g in report(root)["builds"][0]["gates"]}

    code, stages = build(root, capsys, "--baseline", str(root / "base.json"))
    ours = report(root)["builds"][0]
    cosine = baseline["builds"][0]["accuracy"]["y"]["cosine"]
    assert code == 0 and set(stages.values()) == {"cached"}
    assert ours["vs_baseline"]["accuracy"]["y"]["cosine"] == [cosine, cosine]
    assert "Against the baseline `base.json`:" in (root / "build/report.md").read_text()
    baseline["builds"][0]["accuracy"]["y"]["cosine"] = 1.0  # the baseline was exact: this build is worse
    (root / "base.json").write_text(json.dumps(baseline))
    code, stages = build(root, capsys, "--baseline", str(root / "base.json"))
    gate = next(g for g in report(root)["builds"][0]["gates"] if g["name"] == "max_cosine_drop")
    assert code == 1 and set(stages.values()) == {"cached"} and not gate["passed"]
    assert gate["value"] == pytest.approx(1.0 - cosine) and "worst output 'y'" in gate["detail"]

    assert main(["build", "-f", str(root / "deploy.toml"), "--baseline", str(root / "gone.json")]) == 2
    assert "no such report" in capsys.readouterr().err


def test_timed_together_the_baseline_library_runs_in_turns_with_the_build_and_the_gate_reads_those_runs(
    project, capsys
):
    import shutil

    root, write = project
    build(root, capsys)
    shutil.copytree(root / "build", root / "base")  # as CI downloads the main branch's build folder
    write(extra='\n[validation.baseline]\nreport = "base/report.json"\ntimed_together = true\nmax_p50_increase = 0.5\n')
    code, stages = build(root, capsys)
    assert code == 0 and stages["validate"] == "built" and stages["compile"] == "cached"
    metrics = json.loads((root / "build/net/cpu/validation.json").read_text())
    assert len(metrics["baseline_latency_ms"]["samples_ms"]) == len(metrics["latency_ms"]["samples_ms"])
    gate = next(g for g in report(root)["builds"][0]["gates"] if g["name"] == "max_p50_increase")
    assert gate["passed"] and "its library timed in turns with this one" in gate["detail"]
    assert report(root)["builds"][0]["vs_baseline"]["timed_together"] is True

    (root / "base/net/cpu/model.so").unlink()
    assert main(["build", "-f", str(root / "deploy.toml")]) == 2
    err = capsys.readouterr().err.strip()
    line = (root / "deploy.toml").read_text().splitlines().index("timed_together = true") + 1
    assert err.count("\n") == 0 and f"deploy.toml:{line}" in err and "base/net/cpu/model.so is not there" in err


def test_editing_the_golden_seed_reruns_reference_and_validation_not_compile(project, capsys):
    root, write = project
    build(root, capsys)
    write(seed=7)
    _, stages = build(root, capsys)
    assert stages == {"import": "cached", "compile": "cached", "reference": "built", "validate": "built"}


def test_report_command_rerenders_from_the_cache_without_running(project, capsys):
    root, write = project
    build(root, capsys)
    for name in ("report.json", "report.md", "junit.xml"):
        (root / "build" / name).unlink()
    write(p99=1e-6)  # a gate edit needs no stage, so report can show its effect
    assert main(["report", "-f", str(root / "deploy.toml")]) == 1
    assert "GATE FAILED net@cpu  max_p99_ms:" in capsys.readouterr().out
    assert all((root / "build" / n).exists() for n in ("report.json", "report.md", "junit.xml"))
    write(seed=3)  # needs a reference run: report refuses rather than run it
    assert main(["report", "-f", str(root / "deploy.toml")]) == 2
    assert "not built yet: reference:net" in capsys.readouterr().err


def test_golden_inputs_from_an_npz_file(project, capsys):
    import numpy as np

    root, write = project
    np.savez(root / "golden.npz", x=np.ones((3, 1, 3, 8, 8), dtype=np.float32))
    write(extra="")
    text = (
        (root / "deploy.toml")
        .read_text()
        .replace("golden = { seed = 0, count = 2 }", 'golden = { source = "npz", path = "golden.npz", count = 3 }')
    )
    (root / "deploy.toml").write_text(text)
    code, _ = build(root, capsys)
    assert code == 0
    assert report(root)["builds"][0]["accuracy"]["y"]["cosine"] > 0.9999


def test_golden_inputs_from_images_with_preprocessing(project, capsys):
    from PIL import Image

    root, write = project
    (root / "imgs").mkdir()
    for i, colour in enumerate([(200, 30, 30), (30, 200, 30), (30, 30, 200)]):
        Image.new("RGB", (32, 24), colour).save(root / "imgs" / f"{i}.png")
    text = (
        (root / "deploy.toml")
        .read_text()
        .replace(
            "golden = { seed = 0, count = 2 }",
            'golden = { source = "images", path = "imgs", count = 2, preprocess = { mean = [0.5, 0.5, 0.5], '
            "std = [0.25, 0.25, 0.25] } }",
        )
    )
    (root / "deploy.toml").write_text(text)
    code, stages = build(root, capsys)
    assert code == 0 and stages["reference"] == "built"
    metrics = json.loads((root / "build/net/cpu/validation.json").read_text())
    assert metrics["samples"] == 2  # the count caps the images read
    assert report(root)["builds"][0]["accuracy"]["y"]["cosine"] > 0.9999
    Image.new("RGB", (32, 24), (0, 0, 0)).save(root / "imgs" / "0.png")  # edit one image: reference reruns
    _, stages = build(root, capsys)
    assert stages["reference"] == "built" and stages["compile"] == "cached"


def test_outputs_and_inputs_are_paired_by_name_in_graph_order(tmp_path, capsys):
    """Names that sort against graph order: the library was fed swapped inputs and its outputs were compared
    with the wrong reference arrays. The model's inputs are static, so the recipe declares none."""
    two_in_two_out(tmp_path / "net.onnx")
    recipe = (
        textwrap.dedent(RECIPE.format(seed=0, p99=1000.0))
        .replace('inputs.x = { shape = [1, 3, 8, 8], dtype = "float32" }\n', "")
        .replace("min_cosine = 0.999", "max_abs_error = 1e-6")
    )
    (tmp_path / "deploy.toml").write_text(recipe)
    code, _ = build(tmp_path, capsys)
    built = report(tmp_path)["builds"][0]
    assert code == 0, built["gates"]
    assert list(built["accuracy"]) == ["z_out", "a_out"]
    assert all(out["max_abs"] < 1e-6 for out in built["accuracy"].values())


def test_timing_in_several_processes_merges_their_runs_and_keeps_which_came_from_which(project, capsys):
    root, _ = project
    recipe = root / "deploy.toml"
    recipe.write_text(
        recipe.read_text().replace("min_seconds = 0.0, roofline = true", "min_seconds = 0.0, processes = 3")
    )
    code, _ = build(root, capsys)
    built = report(root)["builds"][0]
    latency = built["latency_ms"]
    assert code == 0 and len(latency["blocks"]) == 3 and sum(latency["blocks"]) == len(latency["samples_ms"])
    assert latency["runs"] >= 15
    assert 0 <= built["others_cpu"] <= 1  # the busiest of the three processes' machines
