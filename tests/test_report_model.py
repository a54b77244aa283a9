"""The report model's pure parts: comparing a quantized build with its float twin, and its JSON form."""

import json
from importlib import resources

import jsonschema
import pytest

from modelbuild.reports import junit, markdown
from modelbuild.reports.model import BuildReport, Report, StageRun, Validation, VsFloat, compare_with_float
from modelbuild.validation.gates import GateResult

LATENCY = {
    "runs": 50,
    "min": 0.9,
    "mean": 1.0,
    "median": 1.0,
    "p90": 1.1,
    "p99": 1.2,
    "p99.9": 1.3,
    "max": 1.3,
    "std": 0.05,
    "cv": 0.05,
    "throughput": 1000.0,
    "percentile_method": "linear",
}


def build(name, median):
    return BuildReport(name, latency_ms={"median": median} if median else None)


def test_a_quantized_build_is_compared_with_the_float_build_of_the_same_model_and_target():
    builds = [build("cls@x86", 2.0), build("cls+int8@x86", 0.5), build("cls+int8@pi", None), build("det+int8@x86", 1.0)]
    compare_with_float(builds)
    assert builds[1].vs_float == VsFloat("cls@x86", 2.0, 0.25)
    assert builds[0].vs_float is None  # a float build has nothing to compare with
    assert builds[2].vs_float is None  # not timed (a cross target)
    assert builds[3].vs_float is None  # no float build of det in the recipe


def test_a_float_library_timed_beside_the_build_gives_its_ratio_whatever_the_float_build_measured():
    from modelbuild.reports.model import _timed_beside_float
    from modelbuild.validation.measured import Measured

    together = _timed_beside_float(
        "cls+int8@x86", Measured(ran=True, latency_ms={"median": 0.5}, float_latency_ms={"median": 1.25})
    )
    assert together == VsFloat("cls@x86", 1.25, 0.4, timed_together=True)
    builds = [build("cls@x86", 2.0), BuildReport("cls+int8@x86", latency_ms={"median": 0.5}, vs_float=together)]
    compare_with_float(builds)
    assert builds[1].vs_float == together  # not the float build's own timing, from another process (0.25x)


def finished(passed: bool) -> BuildReport:
    return BuildReport(
        "cls@x86",
        model="cls",
        target="x86",
        artifact="build/cls/x86/model.so",
        stages={
            "import": StageRun("cached", 0.01, "k1", built_seconds=2.5),
            "validate": StageRun("built", 3.0, "k2", log=None if passed else "build/logs/validate.log"),
        },
        validation=Validation(ran=True),
        latency_ms=LATENCY,
        throughput=1000.0,
        cold_ms=4.0,
        peak_rss_bytes=2**27,
        gates=[GateResult("max_p99_ms", 1.2, 5.0 if passed else 1.0, passed)],
        passed=passed,
        provenance={
            "model_sha256": "ab" * 32,
            "recipe": {},
            "target": {"kind": "llvm"},
            "tools": {"tvm": "0.27"},
            "seeds": {"golden": 0},
        },
    )


def test_the_json_form_meets_the_published_schema_and_leaves_out_what_a_stage_did_not_have():
    report = Report(
        passed=False,
        recipe="deploy.toml",
        builds=[finished(False), finished(True)],
        cache={
            "hits": 1,
            "misses": 1,
            "hit_rate": 0.5,
            "mean_hit_seconds": 0.01,
            "mean_miss_seconds": 3.0,
            "mean_access_seconds": 1.5,
        },
    )
    data = json.loads(json.dumps(report.to_json(), allow_nan=False))
    schema = json.loads(resources.files("modelbuild.reports").joinpath("report.schema.json").read_text())
    jsonschema.validate(data, schema)
    stages = data["builds"][0]["stages"]
    assert stages["import"] == {"status": "cached", "seconds": 0.01, "key": "k1", "built_seconds": 2.5}
    assert stages["validate"]["log"] == "build/logs/validate.log" and "error" not in stages["validate"]
    assert data["builds"][0]["gates"][0] == {
        "name": "max_p99_ms",
        "value": 1.2,
        "limit": 1.0,
        "passed": False,
        "detail": "",
        "applicable": True,
    }
    assert list(data) == ["schema", "passed", "recipe", "builds", "cache"]
    assert list(data["builds"][0])[:4] == ["name", "model", "target", "artifact"]
    # the same model renders as Markdown and JUnit: one failed gate, shown in both
    assert "**max_p99_ms** 1.2 (limit 1)" in markdown.render(report)
    assert 'failures="1"' in junit.render(report) and "cached; built in 2.50 s" in markdown.render(report)


def test_kernels_are_compared_with_the_baselines_by_the_first_layer_they_compute_not_their_name():
    from modelbuild.reports.model import kernel_changes

    base = [
        {"kernel": "fused_conv2d3_add1", "layers": ["stem_conv", "stem_add"], "seconds": 1e-4},
        {"kernel": "fused_matmul", "layers": ["fc"], "seconds": 2e-5},
    ]
    now = [
        {"kernel": "fused_conv2d4_add1_relu", "layers": ["stem_conv", "stem_add", "stem_relu"], "seconds": 1.5e-4},
        {"kernel": "softmax", "layers": ["prob"], "seconds": 1e-6},
    ]  # a kernel the baseline did not time
    assert kernel_changes(now, base) == [
        {
            "kernel": "fused_conv2d4_add1_relu",
            "layers": ["stem_conv", "stem_add", "stem_relu"],
            "us": [pytest.approx(100.0), pytest.approx(150.0)],
        }
    ]
    assert kernel_changes(now, None) == [] and kernel_changes(None, base) == []


def test_junit_shows_a_gate_that_does_not_apply_as_skipped_with_why_not_as_passed_or_failed():
    gates = [
        GateResult("min_cosine", 0.99999, 0.999, True),
        GateResult("max_p99_ms", None, 20, True, "timed on an emulated device (qemu)", applicable=False),
    ]
    xml = junit.render(
        Report(
            passed=True,
            recipe="deploy.toml",
            cache={},
            builds=[BuildReport("cls@rpi4", validation=Validation(ran=True), gates=gates, passed=True)],
        )
    )
    assert 'failures="0"' in xml and xml.count("<skipped") == 1
    assert '<skipped message="timed on an emulated device (qemu)" />' in xml
