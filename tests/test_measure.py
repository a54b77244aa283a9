"""The timing loop: its minimums, and the bound that keeps a slow library's validation short."""

from modelbuild.stages import measure


def test_timing_stops_at_max_seconds_before_min_runs_on_a_slow_library(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(measure.time, "perf_counter", lambda: now[0])

    def slow_run(arrays):  # each inference takes 2 s on the fake clock
        now[0] += 2.0

    latencies = measure._time(slow_run, [], warmup=1, min_runs=100, min_seconds=0.0, max_seconds=10.0)
    assert latencies == [2.0] * 5


def test_timing_meets_both_minimums_when_there_is_time():
    latencies = measure._time(lambda arrays: None, [], warmup=0, min_runs=7, min_seconds=0.0, max_seconds=60.0)
    assert len(latencies) == 7
