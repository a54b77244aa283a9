"""Is a build slower than its baseline, or is the difference noise? A bootstrap over the raw latency samples.

Two timing runs of one library on a shared machine differ by several per cent, more at p99, so comparing
two point estimates against a 10% limit trips on noise and teaches a team to ignore the gate. Instead both
sample sets are resampled with replacement, the statistic (p50, p99 or throughput) is recomputed on each
resample, and the ratio of current over baseline gives a 95% interval. A limit on an increase fails only
when the whole interval lies above it; a limit on a ratio, only when the whole interval lies below it.

Between processes a library's speed moves by more than any limit worth setting (up to 27% on a shared
2-core machine), which no amount of resampling removes. Timed together (the two libraries' runs alternating
in the same processes) the machine's moods fall on both alike: the ratio of their medians stayed within
1.3% over 12 processes whose own medians spread over 12%. Such samples are paired, run i of one beside run
i of the other, and are resampled with the same draws on both sides so the interval keeps that cancelling.
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


def change(
    now_ms: list[float],
    base_ms: list[float],
    name: str,
    *,
    now_blocks: list[int] | None = None,
    base_blocks: list[int] | None = None,
    paired: bool = False,
    seed: int = 0,
) -> Change:
    """The ratio of `name` between two sample sets, with its bootstrap interval (seeded: one report, one
    verdict). Where a side was timed in several processes (`blocks`: how many samples each gave), its
    resamples draw processes first, then runs within them, so the interval also holds the variation between
    processes, which on a shared machine is larger than the variation between runs. `paired` samples were
    timed together, run for run: both sides are drawn with the same indices."""
    rng = np.random.default_rng(seed)
    now, base = np.asarray(now_ms, dtype=np.float64), np.asarray(base_ms, dtype=np.float64)
    if paired:
        if len(now) != len(base) or (now_blocks or []) != (base_blocks or []):
            raise ValueError("paired samples need the same runs per process on both sides")
        drawn = _draws(len(now), now_blocks, rng)
        ratios = statistic(now[drawn], name) / statistic(base[drawn], name)
    else:
        ratios = statistic(now[_draws(len(now), now_blocks, rng)], name) / statistic(
            base[_draws(len(base), base_blocks, rng)], name
        )
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return Change(float(statistic(now, name) / statistic(base, name)), float(low), float(high))


def _draws(n: int, blocks: list[int] | None, rng) -> np.ndarray:
    """RESAMPLES rows of n sample indices drawn with replacement: flat, or by process then by run (each
    row: as many processes as were timed, drawn with replacement, each giving its share of runs)."""
    if not blocks or len(blocks) < 2:
        return rng.integers(0, n, (RESAMPLES, n))
    sizes = np.asarray(blocks)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    processes = rng.integers(0, len(sizes), (RESAMPLES, len(sizes)))[:, np.repeat(np.arange(len(sizes)), sizes)]
    within = (rng.random((RESAMPLES, n)) * sizes[processes]).astype(np.int64)
    return starts[processes] + within
