"""The baseline gates' bootstrap on synthetic latencies of known distributions: how often a real shift is
caught and how often noise is flagged, over many seeds."""

from __future__ import annotations

import numpy as np
import pytest

from modelbuild.recipe.schema import ValidationSpec
from modelbuild.validation import metrics
from modelbuild.validation.gates import evaluate
from modelbuild.validation.measured import Measured
from modelbuild.validation.regression import change
from tests.helpers.timings import latencies

SEEDS = range(50)


def flagged(gate: dict, now: list[float], base: list[float]) -> bool:
    spec = ValidationSpec.model_validate({"baseline": {"report": "b.json", **gate}})
    result = evaluate(
        spec, Measured(ran=True, latency_ms=metrics.timing_summary(now)), {"latency_ms": metrics.timing_summary(base)}
    )
    return not result[0].passed


@pytest.mark.parametrize(
    "gate, shift, runs, seeds",
    [
        ({"max_p50_increase": 0.05}, 1.10, 200, 50),
        ({"min_throughput_ratio": 0.90}, 1.25, 200, 50),  # a mean: the stalls make it noisier than the median
        # p99 sits among the stalls: seeing a 50% shift through them takes thousands of runs (1000 runs catch 84%)
        pytest.param({"max_p99_increase": 0.10}, 1.50, 2000, 20, marks=pytest.mark.slow),
    ],
)
def test_a_real_slowdown_is_caught_and_two_draws_of_one_distribution_are_not_flagged(gate, shift, runs, seeds):
    pairs = [
        (latencies(2 * s, runs=runs), latencies(2 * s + 1, runs=runs), latencies(2 * s + 1, shift, runs))
        for s in range(seeds)
    ]
    caught = np.mean([flagged(gate, slower, base) for base, _, slower in pairs])
    noise = np.mean([flagged(gate, same, base) for base, same, _ in pairs])
    assert caught >= 0.95, f"caught {caught:.0%} of {shift - 1:.0%} slowdowns"
    assert noise <= 0.05, f"flagged {noise:.0%} of runs with no change"


def test_comparing_point_estimates_instead_would_flag_the_noise():
    """Why the bootstrap: the same noise, judged by p99 alone against a 10% limit, trips often."""
    trips = np.mean(
        [
            metrics.timing_summary(latencies(2 * s + 1))["p99"] / metrics.timing_summary(latencies(2 * s))["p99"] > 1.10
            for s in SEEDS
        ]
    )
    assert trips > 0.2


def test_the_interval_holds_the_true_ratio_and_the_detail_says_the_verdict():
    c = change([x * 1000 for x in latencies(1, 1.2)], [x * 1000 for x in latencies(0)], "median")
    assert c.low < 1.2 < c.high and c.low < c.ratio < c.high
    spec = ValidationSpec.model_validate({"baseline": {"report": "b.json", "max_p50_increase": 0.10}})
    noisy = evaluate(
        spec,
        Measured(ran=True, latency_ms=metrics.timing_summary(latencies(3, 1.1))),
        {"latency_ms": metrics.timing_summary(latencies(2))},
    )[0]
    assert noisy.passed and noisy.detail.endswith("within noise") and "95% interval +" in noisy.detail


def test_a_baseline_without_samples_is_compared_by_its_point_estimates_and_says_so():
    spec = ValidationSpec.model_validate({"baseline": {"report": "b.json", "max_p50_increase": 0.10}})
    old = {"latency_ms": {"median": 1.0, "p99": 1.5, "throughput": 900.0}}
    gate = evaluate(spec, Measured(ran=True, latency_ms=metrics.timing_summary(latencies(0))), old)[0]
    assert not gate.passed and "point estimates (no samples to bootstrap)" in gate.detail


def processes(seed: int, count: int, shift: float = 1.0) -> dict:
    """`count` timing runs as separate processes give them: each process at its own speed (lognormal, 8%), its
    runs with the noise of latencies(), merged as the validate stage merges timing.processes > 1."""
    speeds = np.random.default_rng(10_000 + seed).lognormal(0, 0.08, count)
    blocks = [
        metrics.timing_summary([x * speed for x in latencies(seed * 100 + i, shift)]) for i, speed in enumerate(speeds)
    ]
    return metrics.merge_blocks(blocks) if count > 1 else blocks[0]


def flagged_latency(gate: dict, now: dict, base: dict) -> bool:
    spec = ValidationSpec.model_validate({"baseline": {"report": "b.json", **gate}})
    return not evaluate(spec, Measured(ran=True, latency_ms=now), {"latency_ms": base})[0].passed


@pytest.mark.slow
def test_timing_in_several_processes_lets_the_interval_hold_the_variation_between_processes():
    gate, seeds = {"max_p50_increase": 0.10}, range(30)
    one = np.mean([flagged_latency(gate, processes(2 * s + 1, 1), processes(2 * s, 1)) for s in seeds])
    five = np.mean([flagged_latency(gate, processes(2 * s + 1, 5), processes(2 * s, 5)) for s in seeds])
    caught = np.mean([flagged_latency(gate, processes(2 * s + 1, 5, 1.4), processes(2 * s, 5)) for s in seeds])
    assert one > 0.05, f"one process a side: the runs alone understate the noise, flagging {one:.0%}"
    assert five <= 0.05 and caught >= 0.95, (five, caught)


def together(seed: int, count: int, shift: float = 1.0, runs: int = 100) -> tuple[dict, dict]:
    """(this build, its baseline) timed in turns in `count` processes: each process at its own speed (8%), each
    round's two runs under the same passing load of the machine (5%), and each run with latencies()'s own noise
    and stalls. Merged as the validate stage merges them."""
    rng = np.random.default_rng(20_000 + seed)
    ours, theirs = [], []
    for i, speed in enumerate(rng.lognormal(0, 0.08, count)):
        load = speed * rng.lognormal(0, 0.05, runs)
        ours.append(metrics.timing_summary(list(np.asarray(latencies(seed * 100 + i, shift, runs)) * load)))
        theirs.append(metrics.timing_summary(list(np.asarray(latencies(seed * 100 + 50 + i, 1.0, runs)) * load)))
    return metrics.merge_blocks(ours), metrics.merge_blocks(theirs)


def flagged_together(gate: dict, now: dict, base: dict) -> bool:
    spec = ValidationSpec.model_validate({"baseline": {"report": "b.json", "timed_together": True, **gate}})
    return not evaluate(spec, Measured(ran=True, latency_ms=now, baseline_latency_ms=base), {})[0].passed


def test_timed_together_a_15_percent_slowdown_is_caught_past_a_10_percent_limit_and_noise_is_not():
    gate, seeds = {"max_p50_increase": 0.10}, range(20)
    same = [together(s, 5) for s in seeds]
    slower = [together(s, 5, 1.15) for s in seeds]
    flagged = sum(flagged_together(gate, now, base) for now, base in same)
    caught = sum(flagged_together(gate, now, base) for now, base in slower)
    assert flagged == 0 and caught >= 19, (flagged, caught)
    # the same runs judged as separate timings lose the shift in the processes' own speeds
    apart = sum(flagged_latency(gate, now, base) for now, base in slower)
    assert apart < caught, apart


def test_paired_samples_must_line_up_run_for_run():
    now, base = together(0, 2)
    with pytest.raises(ValueError, match="same runs per process"):
        change(
            now["samples_ms"],
            base["samples_ms"][:-1],
            "median",
            now_blocks=now["blocks"],
            base_blocks=base["blocks"],
            paired=True,
        )
