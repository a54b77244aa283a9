"""Accuracy and timing statistics: pure numpy, so they are tested against hand-computed values."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SAMPLES_KEPT = 2000
REL_FLOOR = 1e-3
PERCENTILE_METHOD = "nearest-rank: the smallest value with at least p% of samples at or below it"
_TINY = 1e-12


def nearest_rank(values, p: float) -> float:
    """The p-th percentile by nearest rank: sorted(values)[ceil(p/100 * n) - 1]."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return float(ordered[rank - 1])


def time_calls(
    call: Callable[[], object],
    *,
    warmup: int,
    min_runs: int,
    min_seconds: float,
    max_seconds: float = float("inf"),
    **_,
) -> list[float]:
    """Seconds of each timed call: warm up, then call until both min_runs and min_seconds are met, or
    max_seconds have passed."""
    for _ in range(warmup):
        call()
    latencies: list[float] = []
    total = 0.0
    while (len(latencies) < min_runs or total < min_seconds) and total < max_seconds:
        started = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - started)
        total += latencies[-1]
    return latencies


def timing_summary(seconds: list[float]) -> dict:
    """Latency statistics in milliseconds, and throughput as runs per second of total time."""
    ms = np.asarray(seconds, dtype=np.float64) * 1000
    mean = float(ms.mean())
    std = float(ms.std(ddof=1)) if len(ms) > 1 else 0.0
    return {
        "runs": len(ms),
        "min": float(ms.min()),
        "mean": mean,
        "median": nearest_rank(ms, 50),
        "p90": nearest_rank(ms, 90),
        "p99": nearest_rank(ms, 99),
        "p99.9": nearest_rank(ms, 99.9),
        "max": float(ms.max()),
        "std": std,
        "cv": std / mean if mean else 0.0,
        "throughput": len(ms) / float(np.sum(seconds)),
        "percentile_method": PERCENTILE_METHOD,
        # the runs, in order, to 0.1 us: what a later build's baseline gates bootstrap over and the HTML
        # report draws; every run up to SAMPLES_KEPT, else an evenly strided subset (a tiny model times
        # 10^4 runs, and the report is rewritten by every no-op build)
        "samples_ms": [round(float(x), 4) for x in ms[:: max(1, math.ceil(len(ms) / SAMPLES_KEPT))]],
    }


def merge_blocks(blocks: list[dict]) -> dict:
    """One timing summary over several processes' runs (timing_summary() of each): the statistics over all
    their kept samples, and `blocks`, how many of `samples_ms` each process gave, for the bootstrap."""
    samples = [ms for block in blocks for ms in block["samples_ms"]]
    merged = timing_summary([ms / 1000 for ms in samples])
    merged["runs"] = sum(block["runs"] for block in blocks)
    merged["samples_ms"] = samples
    merged["blocks"] = [len(block["samples_ms"]) for block in blocks]
    return merged


def in_turns(
    ours, theirs, *, min_runs: int, min_seconds: float, max_seconds: float = float("inf")
) -> tuple[list[float], list[float]]:
    """Seconds of runs of two libraries timed in turns, one run each, the order swapped every round, until
    the first has min_runs and min_seconds, or both together max_seconds: the same moments of the machine
    fall on both, so their ratio keeps what their own medians lose to it. `ours()` and `theirs()` run once
    and return the seconds that run took (a host clock, or a device's own timer)."""
    times: tuple[list[float], list[float]] = ([], [])
    total = 0.0
    while (len(times[0]) < min_runs or sum(times[0]) < min_seconds) and total < max_seconds:
        for once, runs in ((ours, times[0]), (theirs, times[1]))[:: 1 if len(times[0]) % 2 == 0 else -1]:
            runs.append(once())
            total += runs[-1]
    return times


@dataclass(frozen=True)
class CpuClock:
    """Seconds of CPU time at one moment: what the CPUs this process may run on had spent busy (from
    /proc/stat, stolen time included), what this process had used, and the wall clock."""

    cpus_busy: float
    own: float
    wall: float
    cpus: int
    throttled: float | None = None  # seconds this process's cgroup was held back by its CPU quota; None: unknown


def throttled_share(before: CpuClock, after: CpuClock) -> float | None:
    """The share of its CPUs' time between two clocks that a CPU quota (Docker's --cpus, a CI runner's limit)
    withheld from this process's cgroup, 0 to 1; None where the kernel does not say. The kernel sums the
    throttled time over the CPUs, as others_share counts. A quota is not other processes: /proc/stat shows
    idle CPUs while the library waits for its next period. On 2 cores under a 1-CPU quota, the bundled
    classifier's 2-thread library kept its p50 (1.0 ms) but its p99 went from 1.1 to 51 ms: its spinning
    workers spent the quota, then every thread waited out the 100 ms period."""
    if before.throttled is None or after.throttled is None or after.wall <= before.wall:
        return None
    capacity = (after.wall - before.wall) * after.cpus
    return min(1.0, max(0.0, (after.throttled - before.throttled) / capacity))


def others_share(before: CpuClock, after: CpuClock) -> float:
    """The share of this process's CPUs that other processes (or the hypervisor) used between two clocks,
    0 to 1. A TVM library's parallel kernels wait for each worker thread, so when others keep the cores
    busy a descheduled worker stalls every kernel: on 2 cores with 2 busy processes, the bundled classifier
    ran 33 ms instead of 0.9."""
    capacity = (after.wall - before.wall) * after.cpus
    if capacity <= 0:
        return 0.0
    others = (after.cpus_busy - before.cpus_busy) - (after.own - before.own)
    return min(1.0, max(0.0, others / capacity))


def amdahl_fraction(threads: list[int], seconds: list[float]) -> float | None:
    """The parallel fraction f that best fits S_p = 1 / ((1 - f) + f / p) to measured latencies.

    With T_p / T_1 = (1 - f) + f / p = 1 - f (1 - 1/p), least squares over p > 1 gives
    f = sum((1 - T_p/T_1)(1 - 1/p)) / sum((1 - 1/p)^2), clamped to [0, 1] (noise on a serial library can
    fit a slightly negative f). None when only one thread count was measured.
    """
    base = dict(zip(threads, seconds)).get(1)
    points = [(p, t) for p, t in zip(threads, seconds) if p > 1]
    if base is None or not points:
        return None
    num = sum((1 - t / base) * (1 - 1 / p) for p, t in points)
    den = sum((1 - 1 / p) ** 2 for p, _ in points)
    return min(1.0, max(0.0, num / den))


NOISY_CV = 0.25  # a scaling point whose runs vary more than this says nothing about the cores


def scaling_summary(threads: list[int], medians_ms: list[float], cvs: list[float] | None = None) -> dict:
    """Latency per thread count, the speed-up over one thread, and Amdahl's parallel fraction; `noisy` when
    some thread count's runs varied too much for the fit to mean anything (a shared machine)."""
    one = dict(zip(threads, medians_ms)).get(1)
    return {
        "threads": threads,
        "median_ms": medians_ms,
        "speedup": [one / m if one else None for m in medians_ms],
        "parallel_fraction": amdahl_fraction(threads, medians_ms),
        "cv": cvs,
        "noisy": bool(cvs) and max(cvs) > NOISY_CV,
    }


def compare(actual: np.ndarray, expected: np.ndarray) -> dict:
    """How far `actual` is from the reference `expected`, element-wise and as whole tensors."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape:
        raise ValueError(f"shape {a.shape} differs from the reference's {e.shape}")
    finite = np.isfinite(a) & np.isfinite(e)
    abs_err = np.abs(a - e)[finite]
    magnitude = np.abs(e[finite])
    # relative to the reference, but never to less than a thousandth of its largest value: an error of 1e-6 on
    # a value of 2e-8 is not "50x off" in any sense a gate should act on
    floor = max(_TINY, REL_FLOOR * float(magnitude.max(initial=0.0)))
    rel_err = abs_err / np.maximum(magnitude, floor)
    return {
        "max_abs": _max(abs_err),
        "mean_abs": _mean(abs_err),
        "p99_abs": _p99(abs_err),
        "max_rel": _max(rel_err),
        "mean_rel": _mean(rel_err),
        "p99_rel": _p99(rel_err),
        "cosine": cosine(a[finite], e[finite]),
        "sqnr_db": sqnr_db(a[finite], e[finite]),
        "nan": int(np.isnan(a).sum()),
        "inf": int(np.isinf(a).sum()),
        # the smallest tolerances under which np.allclose-style checks would pass (rtol without the floor)
        "min_atol": _max(abs_err),
        "min_rtol": _max(abs_err / np.maximum(magnitude, _TINY)),
    }


def cosine(a: np.ndarray, e: np.ndarray) -> float:
    na, ne = float(np.linalg.norm(a)), float(np.linalg.norm(e))
    if na < _TINY and ne < _TINY:
        return 1.0
    if na < _TINY or ne < _TINY:
        return 0.0
    return float(np.dot(a.ravel(), e.ravel()) / (na * ne))


SQNR_CAP_DB = 999.0  # identical outputs have infinite SQNR, which strict JSON cannot hold


def sqnr_db(a: np.ndarray, e: np.ndarray) -> float:
    """Signal-to-quantisation-noise ratio 10 log10(sum e^2 / sum (a - e)^2), capped at 999 dB."""
    noise = float(np.sum((a - e) ** 2))
    signal = float(np.sum(e**2))
    if noise == 0:
        return SQNR_CAP_DB
    return min(SQNR_CAP_DB, 10 * math.log10(max(signal, _TINY) / noise))


def looks_like_class_scores(shape: tuple) -> bool:
    """A [batch, classes] output with more than one class."""
    return len(shape) == 2 and shape[1] > 1


def topk_agreement(actual: np.ndarray, expected: np.ndarray, k: int = 1) -> float:
    """The fraction of rows whose reference top-1 class is in the actual top-k."""
    a = np.asarray(actual).reshape(-1, actual.shape[-1])
    e = np.asarray(expected).reshape(-1, expected.shape[-1])
    top_ref = np.argmax(e, axis=1)
    top_k = np.argsort(-a, axis=1)[:, :k]
    return float(np.mean([ref in row for ref, row in zip(top_ref, top_k)]))


def _max(x):
    return float(x.max()) if x.size else 0.0


def _mean(x):
    return float(x.mean()) if x.size else 0.0


def _p99(x):
    return nearest_rank(x, 99) if x.size else 0.0
