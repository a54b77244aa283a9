"""Latencies as a shared machine gives them, for the tests of gates and reports."""

from __future__ import annotations

import numpy as np


def latencies(seed: int, scale: float = 1.0, runs: int = 200) -> list[float]:
    """Seconds as a shared machine gives them: lognormal around 2 ms, and 3% of runs hit by a 2-4x stall."""
    rng = np.random.default_rng(seed)
    ms = 2.0 * scale * rng.lognormal(0.0, 0.1, runs)
    stalls = rng.random(runs) < 0.03
    ms[stalls] *= rng.uniform(2, 4, stalls.sum())
    return list(ms / 1000)
