"""Candidates as recipe sections, built candidates as outcomes, and what a search writes: no TVM."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from modelbuild.recipe.schema import QuantizationSpec, SearchSpec
from modelbuild.reports.model import BuildReport, StageRun
from modelbuild.search import candidates, outputs
from modelbuild.search.runner import SearchResult
from modelbuild.search.strategy import Candidate, Outcome, Settings
from modelbuild.validation.gates import GateResult

BASE = QuantizationSpec(
    int16_nodes=["stem"],
    exclude_nodes=["head"],
    int16_most_sensitive=2,
    calibration={"source": "npz", "path": "calib.npz", "samples": 16},
)
NEAREST = Settings("nearest", "minmax", 16)


def test_the_space_defaults_to_the_quantization_sections_own_settings():
    space = candidates.space_of(SearchSpec(), BASE)
    assert space.precisions == ("int16", "float") and space.settings == (NEAREST,)
    space = candidates.space_of(SearchSpec(weight_rounding=["gptq", "nearest"], calibration_samples=[8]), BASE)
    assert space.settings == (Settings("gptq", "minmax", 8), Settings("nearest", "minmax", 8))


def test_a_candidate_raises_its_layers_on_top_of_the_sections_own_choices():
    int16 = candidates.quantization_of(BASE, Candidate(Settings("gptq", "percentile", 8), ("a", "stem"), "int16"))
    assert int16.int16_nodes == ["stem", "a"] and int16.exclude_nodes == ["head"]
    assert int16.weight_rounding == "gptq" and int16.int16_most_sensitive == 0
    assert (int16.calibration.method, int16.calibration.samples, int16.calibration.path) == (
        "percentile",
        8,
        "calib.npz",
    )
    floats = candidates.quantization_of(BASE, Candidate(NEAREST, ("stem", "b"), "float"))
    assert floats.exclude_nodes == ["head", "stem", "b"] and floats.int16_nodes == []  # float wins over int16
    assert BASE.int16_nodes == ["stem"]  # the section itself is left as it was


def test_section_names_are_stable_and_differ_between_candidates():
    a, b = Candidate(NEAREST, ("x",), "int16"), Candidate(NEAREST, ("x",), "float")
    assert candidates.section_name("int8", a) == candidates.section_name("int8", Candidate(NEAREST, ("x",), "int16"))
    assert candidates.section_name("int8", a) != candidates.section_name("int8", b)
    assert candidates.section_name("int8", a).startswith("int8-")


def report(gates, *, cosine=0.999, failed_stage=None, sensitivity=None) -> BuildReport:
    stages = {
        "quantize": StageRun("built", 1.0, "k"),
        "validate": StageRun("failed" if failed_stage else "built", 1.0, "k", error=failed_stage),
    }
    quantization = {"sensitivity": {"layers": sensitivity}} if sensitivity else None
    return BuildReport(
        name="m+q@cpu",
        stages=stages,
        gates=gates,
        accuracy={"y": {"cosine": cosine}},
        latency_ms={"median": 2.0, "p99": 3.0},
        artifact_bytes=1000,
        quantization=quantization,
    )


def test_a_candidate_passes_on_its_accuracy_gates_alone():
    gates = [
        GateResult("min_cosine", 0.995, 0.99, True),
        GateResult("max_p50_ms", 2.0, 1.0, False),
        GateResult("min_top1_agreement", None, 1.0, True, "no output is [batch, classes]", applicable=False),
    ]
    outcome = candidates.outcome_of(report(gates), "p50")
    assert outcome.passed and outcome.objective == 2.0 and outcome.accuracy == 0.999
    assert outcome.margin == pytest.approx(0.5)  # half the room under the cosine limit is left
    assert candidates.outcome_of(report(gates), "size").objective == 1000


def test_a_rejected_candidate_says_why_and_a_failed_stage_is_a_rejection():
    rows = [{"node": "a", "error_power": 1.0}, {"node": "b", "error_power": 3.0}]
    outcome = candidates.outcome_of(report([GateResult("min_cosine", 0.98, 0.99, False)], sensitivity=rows), "p99")
    assert not outcome.passed and outcome.why == "min_cosine: 0.98 < 0.99" and outcome.margin < 0
    assert outcome.ranking == ("b", "a")
    failed = candidates.outcome_of(report([], failed_stage="validate crashed"), "p50")
    assert not failed.passed and failed.objective is None and "validate crashed" in failed.why


def test_a_candidate_timed_beside_the_float_library_carries_that_ratio_for_its_median():
    from dataclasses import replace

    from modelbuild.reports.model import VsFloat

    built = replace(
        report([GateResult("min_cosine", 0.995, 0.99, True)]), vs_float=VsFloat("m@cpu", 5.0, 0.4, timed_together=True)
    )
    assert candidates.outcome_of(built, "p50").vs_float == 0.4
    assert candidates.outcome_of(built, "p99").vs_float is None  # a median's ratio says nothing of the p99
    apart = replace(built, vs_float=VsFloat("m@cpu", 5.0, 0.4))  # two processes' timings: no pairing
    assert candidates.outcome_of(apart, "p50").vs_float is None


def test_with_no_accuracy_gate_nothing_passes():
    outcome = candidates.outcome_of(report([GateResult("max_p50_ms", 2.0, 5.0, True)]), "p50")
    assert not outcome.passed


def searched(tmp_path: Path) -> SearchResult:
    result = SearchResult("m+int8@cpu", "fast", "p50", tmp_path / "search")
    plain, raised = Candidate(NEAREST), Candidate(NEAREST, ("conv|1",), "int16")
    result.trials = {
        plain: Outcome(False, 1.0, -2.0, accuracy=0.97, why="min_cosine: 0.97 < 0.99"),
        raised: Outcome(True, 1.4, 0.3, accuracy=0.995),
    }
    result.names = {plain: "int8-aaaa", raised: "int8-bbbb"}
    result.float_build = BuildReport(name="m@cpu", latency_ms={"median": 2.8, "p99": 3.0})
    return result


def test_the_snippet_is_a_section_the_recipe_schema_reads_back_as_the_chosen_configuration(tmp_path):
    result = searched(tmp_path)
    text = outputs.snippet(result, BASE)
    assert "0.50x the float build" in text
    section = tomllib.loads(text)["quantization"]["int8-searched"]
    chosen = QuantizationSpec.model_validate(section)
    assert (
        chosen.model_dump() == candidates.quantization_of(BASE, Candidate(NEAREST, ("conv|1",), "int16")).model_dump()
    )


def test_the_search_report_lists_every_candidate_with_its_verdict_and_the_frontier(tmp_path):
    result = searched(tmp_path)
    paths = outputs.write(result, BASE)
    assert [p.name for p in paths] == ["int8-searched.toml", "search.json", "search.md", "search.html"]
    data = json.loads((tmp_path / "search/search.json").read_text())
    assert data["chosen"] == "int8-bbbb" and data["float_build"]["objective"] == 2.8
    assert [c["passed"] for c in data["candidates"]] == [False, True]
    assert data["candidates"][0]["rejected_because"] == "min_cosine: 0.97 < 0.99"
    assert data["candidates"][1]["vs_float"] == pytest.approx(0.5)
    markdown = (tmp_path / "search/search.md").read_text()
    assert (
        "| 2 | int16: conv\\|1 (nearest rounding, minmax on 16 samples) | 1.400 | 0.50x | 0.995000 "
        "| passed (frontier) |" in markdown
    )
    html = (tmp_path / "search/search.html").read_text()
    assert html.count("<circle") == 2 and 'class="chart scatter"' in html and "conv|1" in html


def test_a_search_with_no_passing_candidate_writes_no_snippet(tmp_path):
    result = searched(tmp_path)
    result.trials = {
        c: Outcome(False, o.objective, -1.0, accuracy=o.accuracy, why="x") for c, o in result.trials.items()
    }
    paths = outputs.write(result, BASE)
    assert [p.name for p in paths] == ["search.json", "search.md", "search.html"]
    assert "No candidate passed" in (tmp_path / "search/search.md").read_text()


def test_paired_candidates_are_reported_and_charted_by_their_ratios_to_the_float_library(tmp_path):
    result = searched(tmp_path)
    plain, raised = result.trials
    # the raised candidate's process ran slow (1.4 ms against 1.0), but beside the float library it is faster
    result.trials = {
        plain: Outcome(False, 1.0, -2.0, accuracy=0.97, why="x", vs_float=0.45),
        raised: Outcome(True, 1.4, 0.3, accuracy=0.995, vs_float=0.40),
    }
    outputs.write(result, BASE)
    data = json.loads((tmp_path / "search/search.json").read_text())
    assert [c["vs_float"] for c in data["candidates"]] == [0.45, 0.40]  # not 1.0 / 2.8 and 1.4 / 2.8
    assert [c["on_frontier"] for c in data["candidates"]] == [False, True]  # faster and more accurate
    assert "the float library&#x27;s, timed in turns" in (tmp_path / "search/search.html").read_text()
