from dataclasses import replace

from modelbuild.recipe.load import overridden
from modelbuild.recipe.schema import ValidationSpec
from modelbuild.validation.gates import evaluate
from modelbuild.validation.measured import Measured

METRICS = Measured(
    ran=True,
    accuracy={
        "y": {"max_abs": 0.01, "max_rel": 0.02, "cosine": 0.999, "sqnr_db": 40.0},
        "scores": {"max_abs": 0.001, "max_rel": 0.01, "cosine": 0.9999, "sqnr_db": 50.0, "top1_agreement": 0.75},
    },
    latency_ms={"median": 2.0, "p99": 3.0, "throughput": 400.0},
)


def spec(**data) -> ValidationSpec:
    return ValidationSpec.model_validate(data)


def by_name(results):
    return {g.name: g for g in results}


def test_each_gate_reads_the_worst_output_and_compares_with_its_limit():
    gates = by_name(
        evaluate(
            spec(
                gates={
                    "max_abs_error": 0.005,
                    "min_cosine": 0.99,
                    "min_top1_agreement": 0.9,
                    "max_p99_ms": 5,
                    "min_throughput": 500,
                }
            ),
            METRICS,
        )
    )
    assert (gates["max_abs_error"].value, gates["max_abs_error"].passed) == (0.01, False)
    assert "worst output y" in gates["max_abs_error"].detail
    assert (gates["min_cosine"].value, gates["min_cosine"].passed) == (0.999, True)
    assert (gates["min_top1_agreement"].value, gates["min_top1_agreement"].passed) == (0.75, False)
    assert gates["max_p99_ms"].passed and not gates["min_throughput"].passed
    assert gates["max_abs_error"].describe() == "max_abs_error: 0.01 > 0.005 (worst output y)"


def test_no_gates_configured_means_no_results():
    assert evaluate(spec(), METRICS) == []


def test_a_build_not_run_here_passes_or_fails_by_the_recipe():
    missing = Measured(ran=False, reason="built for aarch64-linux-gnu")
    passing = evaluate(spec(gates={"max_p99_ms": 1}), missing)
    assert [(g.name, g.passed) for g in passing] == [("runs_here", True)]
    assert "aarch64" in passing[0].detail
    failing = evaluate(spec(not_run_here="fail"), missing)
    assert not failing[0].passed


def test_baseline_gates_compare_with_an_earlier_report():
    baseline = {"latency_ms": {"median": 1.9, "p99": 2.5, "throughput": 420.0}}
    gates = by_name(
        evaluate(
            spec(baseline={"report": "b.json", "max_p99_increase": 0.10, "min_throughput_ratio": 0.9}),
            METRICS,
            baseline,
        )
    )
    assert gates["max_p99_increase"].value == 3.0 / 2.5 - 1 and not gates["max_p99_increase"].passed
    assert gates["min_throughput_ratio"].passed


def test_a_baseline_without_this_build_fails_the_gate_and_says_why():
    gates = evaluate(spec(baseline={"report": "b.json", "max_p50_increase": 0.1}), METRICS, {})
    assert not gates[0].passed and "no timing" in gates[0].detail


def test_with_no_baseline_report_this_time_the_baseline_gates_are_not_checked():
    assert evaluate(spec(baseline={"max_p50_increase": 0.1, "max_cosine_drop": 0.0}), METRICS, None) == []


def test_accuracy_against_the_baseline_is_bounded_per_output_and_names_the_worst():
    baseline = {
        "accuracy": {
            "y": {"max_abs": 0.01, "cosine": 0.9995, "sqnr_db": 41.0},
            "scores": {"max_abs": 0.001, "cosine": 0.9999, "sqnr_db": 50.0},
            "gone": {"cosine": 0.2},
        }
    }  # an output the build no longer has is not compared
    gates = by_name(
        evaluate(
            spec(baseline={"report": "b.json", "max_cosine_drop": 0.0004, "max_sqnr_drop_db": 0.5}), METRICS, baseline
        )
    )
    cosine, sqnr = gates["max_cosine_drop"], gates["max_sqnr_drop_db"]
    assert abs(cosine.value - 0.0005) < 1e-12 and not cosine.passed
    assert cosine.detail == "worst output 'y': 0.9995 in the baseline, 0.999 now"
    assert (sqnr.value, sqnr.passed) == (1.0, False)
    loose = by_name(
        evaluate(
            spec(baseline={"report": "b.json", "max_cosine_drop": 0.001, "max_sqnr_drop_db": 2}), METRICS, baseline
        )
    )
    assert loose["max_cosine_drop"].passed and loose["max_sqnr_drop_db"].passed


def test_an_exact_output_on_both_sides_has_not_dropped_and_a_baseline_without_accuracy_fails_the_gate():
    exact = replace(METRICS, accuracy={"y": {"max_abs": 0.0, "cosine": 1.0, "sqnr_db": float("inf")}})
    gate = evaluate(
        spec(baseline={"report": "b.json", "max_sqnr_drop_db": 0.1}),
        exact,
        {"accuracy": {"y": {"max_abs": 0.0, "cosine": 1.0, "sqnr_db": float("inf")}}},
    )[0]
    assert (gate.value, gate.passed) == (0.0, True)
    missing = evaluate(spec(baseline={"report": "b.json", "max_cosine_drop": 0.1}), METRICS, {"latency_ms": {}})[0]
    assert not missing.passed and "no cosine" in missing.detail


def test_per_build_overrides_replace_only_what_they_set():
    base = spec(gates={"max_p99_ms": 5, "min_cosine": 0.99}, timing={"min_runs": 7})
    override = ValidationSpec.model_validate({"gates": {"max_p99_ms": 1}})
    merged = overridden(base, override)
    assert merged.gates.max_p99_ms == 1 and merged.gates.min_cosine == 0.99 and merged.timing.min_runs == 7


def test_top1_on_a_model_without_class_scores_is_not_applicable_rather_than_failed():
    detector = replace(METRICS, accuracy={"boxes": {"max_abs": 2e-3, "cosine": 1.0, "sqnr_db": 90.0}})
    gate = by_name(evaluate(spec(gates={"min_top1_agreement": 1.0}), detector))["min_top1_agreement"]
    assert gate.passed and not gate.applicable
    assert gate.describe() == (
        "min_top1_agreement: not applicable (no output is [batch, classes] scores: top-1 is "
        "measured on classifiers' scores only (not on maps, boxes or an embedding's "
        "features))"
    )


def test_a_gate_on_a_library_that_produced_no_accuracy_still_fails():
    gate = by_name(evaluate(spec(gates={"min_cosine": 0.9}), replace(METRICS, accuracy={})))["min_cosine"]
    assert not gate.passed and gate.applicable


def test_metrics_with_a_field_the_readers_do_not_know_fail_loudly():
    import pytest

    assert Measured.from_json({"ran": False, "reason": "no device"}).reason == "no device"
    with pytest.raises(TypeError):
        Measured.from_json({"ran": True, "latency": {}})  # a renamed field is not silently None


EMULATED = replace(
    METRICS,
    machine={
        "device": "rpi4",
        "tracker": "127.0.0.1:9190",
        "via": "rpc",
        "machine": "aarch64",
        "emulated": "qemu-aarch64 7.2 -cpu max",
    },
)


def test_on_an_emulated_device_accuracy_is_gated_and_latency_is_not_applicable():
    gates = by_name(evaluate(spec(gates={"min_cosine": 0.9999, "max_p99_ms": 1, "min_throughput": 10}), EMULATED))
    assert not gates["min_cosine"].passed and gates["min_cosine"].applicable  # accuracy there is real
    for name in ("max_p99_ms", "min_throughput"):  # 3.0 ms > 1 would fail on hardware
        assert gates[name].passed and not gates[name].applicable and gates[name].verdict == "n/a"
        assert (
            gates[name].describe()
            == f"{name}: not applicable (timed on an emulated device (qemu-aarch64 7.2 -cpu max))"
        )
    on_a_board = by_name(evaluate(spec(gates={"max_p99_ms": 1}), replace(EMULATED, machine={"via": "rpc"})))
    assert on_a_board["max_p99_ms"].verdict == "FAIL"


def test_against_a_baseline_an_emulated_device_compares_accuracy_not_latency():
    baseline = {"latency_ms": {"median": 0.5, "p99": 0.6, "throughput": 2000.0}, "accuracy": {"y": {"cosine": 0.9999}}}
    gates = by_name(
        evaluate(
            spec(baseline={"report": "b.json", "max_p99_increase": 0.1, "max_cosine_drop": 1e-5}), EMULATED, baseline
        )
    )
    assert not gates["max_p99_increase"].applicable and gates["max_p99_increase"].passed
    assert gates["max_cosine_drop"].applicable and not gates["max_cosine_drop"].passed


def test_a_latency_gate_timed_while_other_processes_kept_the_cpus_busy_says_so():
    limits = spec(gates={"max_p50_ms": 1, "max_p99_ms": 1, "min_throughput": 500, "max_abs_error": 0.005})
    busy = by_name(evaluate(limits, replace(METRICS, others_cpu=0.61)))
    assert busy["max_p99_ms"].describe() == "max_p99_ms: 3 > 1 (timed while other processes used 61% of the CPUs)"
    assert all("61%" in busy[name].detail for name in ("max_p50_ms", "min_throughput"))
    assert "other processes" not in busy["max_abs_error"].detail
    quiet = by_name(evaluate(limits, replace(METRICS, others_cpu=0.05)))
    assert quiet["max_p99_ms"].detail == "" and quiet["max_p99_ms"].describe() == "max_p99_ms: 3 > 1"
    throttled = by_name(evaluate(limits, replace(METRICS, others_cpu=0.61, throttled=0.4)))
    assert throttled["max_p99_ms"].detail == (
        "timed while other processes used 61% of the CPUs and a CPU quota withheld 40% of its CPUs' time"
    )
    assert by_name(evaluate(limits, replace(METRICS, throttled=0.005)))["max_p99_ms"].detail == ""
