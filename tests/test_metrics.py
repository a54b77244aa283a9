import math

import numpy as np
import pytest

from modelbuild.validation import metrics


def test_nearest_rank_percentiles_on_a_known_list():
    values = [15, 20, 35, 40, 50]  # the textbook example for nearest rank
    assert metrics.nearest_rank(values, 5) == 15
    assert metrics.nearest_rank(values, 30) == 20
    assert metrics.nearest_rank(values, 40) == 20
    assert metrics.nearest_rank(values, 50) == 35
    assert metrics.nearest_rank(values, 100) == 50
    hundred = list(range(1, 101))
    assert metrics.nearest_rank(hundred, 99) == 99 and metrics.nearest_rank(hundred, 99.9) == 100


def test_timing_summary_in_milliseconds():
    summary = metrics.timing_summary([0.001, 0.002, 0.003, 0.004])
    assert summary["runs"] == 4
    assert summary["min"] == pytest.approx(1.0) and summary["max"] == pytest.approx(4.0)
    assert summary["mean"] == pytest.approx(2.5) and summary["median"] == pytest.approx(2.0)
    assert summary["std"] == pytest.approx(np.std([1, 2, 3, 4], ddof=1))
    assert summary["cv"] == pytest.approx(summary["std"] / 2.5)
    assert summary["throughput"] == pytest.approx(4 / 0.010)


def test_compare_against_hand_computed_values():
    expected = np.array([1.0, -2.0, 4.0, 0.5])
    actual = np.array([1.1, -2.0, 3.0, 0.5])
    stats = metrics.compare(actual, expected)
    assert stats["max_abs"] == pytest.approx(1.0)
    assert stats["mean_abs"] == pytest.approx((0.1 + 0 + 1.0 + 0) / 4)
    assert stats["max_rel"] == pytest.approx(0.25)  # |3 - 4| / 4
    assert stats["mean_rel"] == pytest.approx((0.1 + 0 + 0.25 + 0) / 4)
    dot, na, ne = 1.1 + 4.0 + 12.0 + 0.25, math.sqrt(1.21 + 4 + 9 + 0.25), math.sqrt(1 + 4 + 16 + 0.25)
    assert stats["cosine"] == pytest.approx(dot / (na * ne))
    assert stats["sqnr_db"] == pytest.approx(10 * math.log10(21.25 / 1.01))
    assert stats["nan"] == 0 and stats["inf"] == 0
    assert stats["min_atol"] == stats["max_abs"]


def test_identical_outputs_and_non_finite_values():
    x = np.array([1.0, 2.0])
    assert metrics.compare(x, x)["sqnr_db"] == metrics.SQNR_CAP_DB
    assert metrics.compare(x, x)["cosine"] == pytest.approx(1.0)
    stats = metrics.compare(np.array([np.nan, np.inf, 1.0]), np.array([1.0, 1.0, 1.0]))
    assert stats["nan"] == 1 and stats["inf"] == 1 and stats["max_abs"] == 0.0


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError):
        metrics.compare(np.zeros(3), np.zeros(4))


def test_top_k_agreement():
    expected = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5]])
    actual = np.array([[0.2, 0.7, 0.1], [0.1, 0.8, 0.1], [0.1, 0.2, 0.7]])
    assert metrics.topk_agreement(actual, expected, k=1) == pytest.approx(2 / 3)
    assert metrics.topk_agreement(actual, expected, k=2) == pytest.approx(1.0)
    assert metrics.looks_like_class_scores((1, 2)) and not metrics.looks_like_class_scores((1, 1, 8, 8))


def test_amdahl_fraction_recovers_f_from_exact_latencies():
    for f in (0.0, 0.5, 0.9, 1.0):
        threads = [1, 2, 4]
        seconds = [(1 - f) + f / p for p in threads]
        assert metrics.amdahl_fraction(threads, seconds) == pytest.approx(f)
    assert metrics.amdahl_fraction([1], [1.0]) is None
    assert metrics.amdahl_fraction([1, 2], [1.0, 1.05]) == 0.0  # slower with more threads: serial, not negative


def test_scaling_summary():
    summary = metrics.scaling_summary([1, 2], [4.0, 2.5])
    assert summary["speedup"] == [1.0, 1.6]
    assert summary["parallel_fraction"] == pytest.approx((1 - 2.5 / 4) / 0.5)  # T2/T1 = 1 - f/2


def test_the_report_keeps_every_run_up_to_its_cap_and_an_even_stride_beyond():
    from modelbuild.validation.metrics import SAMPLES_KEPT, timing_summary

    few = timing_summary([0.001 * (1 + i % 7) for i in range(300)])
    assert len(few["samples_ms"]) == 300 and few["samples_ms"][:3] == [1.0, 2.0, 3.0]
    many = timing_summary([0.001 * (1 + i % 7) for i in range(10_001)])
    assert len(many["samples_ms"]) <= SAMPLES_KEPT and many["samples_ms"][:2] == [1.0, 7.0]  # runs 0, 6, 12, ...


def test_in_turns_alternates_the_order_every_round_until_the_first_has_its_runs_and_seconds():
    order: list[str] = []

    def once(name: str, seconds: float):
        return lambda: order.append(name) or seconds

    ours, theirs = metrics.in_turns(once("ours", 0.1), once("theirs", 0.3), min_runs=3, min_seconds=0.0)
    assert order == ["ours", "theirs", "theirs", "ours", "ours", "theirs"]
    assert (ours, theirs) == ([0.1] * 3, [0.3] * 3)
    ours, _ = metrics.in_turns(once("ours", 0.1), once("theirs", 0.3), min_runs=1, min_seconds=0.45)
    assert len(ours) == 5  # 0.1 each: five runs before 0.45 s of this library's own time


def test_in_turns_stops_at_the_bound_on_both_libraries_together():
    ours, theirs = metrics.in_turns(lambda: 1.0, lambda: 2.0, min_runs=100, min_seconds=0.0, max_seconds=5.0)
    assert (len(ours), len(theirs)) == (2, 2)  # 1 + 2 + 2 + 1 = 6 s: the round that crossed 5 s is the last


def test_others_share_is_the_cpu_time_others_used_of_what_this_process_could_have():
    before = metrics.CpuClock(cpus_busy=100.0, own=10.0, wall=50.0, cpus=2)
    # 2 s on 2 CPUs: 4 CPU-seconds; 3 were busy, 1 of them this process's
    assert metrics.others_share(before, metrics.CpuClock(103.0, 11.0, 52.0, 2)) == pytest.approx(0.5)
    assert metrics.others_share(before, metrics.CpuClock(100.5, 11.0, 52.0, 2)) == 0.0  # counters' ticks lag
    assert metrics.others_share(before, metrics.CpuClock(110.0, 10.0, 52.0, 2)) == 1.0
    assert metrics.others_share(before, metrics.CpuClock(100.0, 10.0, 50.0, 2)) == 0.0  # no time passed


def test_throttled_share_is_the_time_a_cpu_quota_held_the_cgroup_back():
    before = metrics.CpuClock(100.0, 10.0, 50.0, 2, throttled=3.0)
    # 1 s of the 2 CPUs' 4 s withheld: the kernel sums throttled time over the CPUs
    assert metrics.throttled_share(before, metrics.CpuClock(101.0, 11.0, 52.0, 2, throttled=4.0)) == pytest.approx(0.25)
    assert metrics.throttled_share(before, metrics.CpuClock(101.0, 11.0, 52.0, 2, throttled=3.0)) == 0.0
    assert metrics.throttled_share(before, metrics.CpuClock(101.0, 11.0, 52.0, 2, throttled=9.0)) == 1.0
    assert metrics.throttled_share(before, metrics.CpuClock(101.0, 11.0, 52.0, 2)) is None  # no cgroup said
    assert metrics.throttled_share(before, metrics.CpuClock(101.0, 11.0, 50.0, 2, throttled=3.5)) is None


# the timing loop: its minimums, and the bound that keeps a slow library's validation short
def test_timing_stops_at_max_seconds_before_min_runs_on_a_slow_library(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(metrics.time, "perf_counter", lambda: now[0])

    def slow_run():  # each inference takes 2 s on the fake clock
        now[0] += 2.0

    latencies = metrics.time_calls(slow_run, warmup=1, min_runs=100, min_seconds=0.0, max_seconds=10.0)
    assert latencies == [2.0] * 5


def test_timing_meets_both_minimums_when_there_is_time():
    latencies = metrics.time_calls(lambda: None, warmup=0, min_runs=7, min_seconds=0.0, max_seconds=60.0)
    assert len(latencies) == 7
