"""Is a build slower than its baseline, or is the difference noise? A bootstrap over the raw latency samples.

Two timing runs of one library on a shared machine differ by several per cent, more at p99, so comparing
two point estimates against a 10% limit trips on noise and teaches a team to ignore the gate. Instead both
sample sets are resampled with replacement, the statistic (p50, p99 or throughput) is recomputed on each
resample, and the ratio of current over baseline gives a 95% interval. A limit on an increase fails only
when the whole interval lies above it; a limit on a ratio, only when the whole interval lies below it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Change:
    """current / baseline for one statistic: the point estimate and its bootstrap interval."""

    ratio: float
    low: float
    high: float


def statistic(samples: np.ndarray, name: str) -> np.ndarray:
    """Along the last axis: 'median' and 'p99' by nearest rank (as the report's own percentiles), or
    'throughput' (runs per second of the total time, from milliseconds)."""
    if name == "throughput":
        return 1000.0 / samples.mean(axis=-1)
    q = {"median": 50, "p99": 99}[name]
    return np.percentile(samples, q, axis=-1, method="inverted_cdf")


def change(now_ms: list[float], base_ms: list[float], name: str, *, seed: int = 0) -> Change:
    """The ratio of `name` between two sample sets, with its bootstrap interval (seeded: one report, one
    verdict)."""
    rng = np.random.default_rng(seed)
    now, base = np.asarray(now_ms, dtype=np.float64), np.asarray(base_ms, dtype=np.float64)
    ratios = (statistic(now[rng.integers(0, len(now), (RESAMPLES, len(now)))], name)
              / statistic(base[rng.integers(0, len(base), (RESAMPLES, len(base)))], name))
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return Change(float(statistic(now, name) / statistic(base, name)), float(low), float(high))
