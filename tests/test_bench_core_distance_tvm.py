"""bench/core_distance.py's probe: each task writes its half, then reads its own half or the other task's."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def core_distance():
    spec = importlib.util.spec_from_file_location("core_distance", REPO / "bench" / "core_distance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_task_reads_its_own_half_or_the_other_tasks():
    import tvm

    probe = core_distance()
    write, own, other = probe.kernels()
    buf = tvm.runtime.tensor(np.zeros(2 * probe.HALF, "float32"))
    sums = tvm.runtime.tensor(np.zeros((2, probe.LANES), "float32"))
    write(buf, tvm.runtime.tensor(np.array([1, 3], "float32")))
    assert (buf.numpy()[: probe.HALF] == 1).all() and (buf.numpy()[probe.HALF :] == 3).all()
    per_lane = probe.HALF // probe.LANES
    own(buf, sums)
    assert (sums.numpy() == np.array([[per_lane], [3 * per_lane]], "float32")).all()
    other(buf, sums)
    assert (sums.numpy() == np.array([[3 * per_lane], [per_lane]], "float32")).all()


def test_the_line_names_the_spell_and_the_ratio():
    line = core_distance().describe(rounds=5)
    match = re.match(r"cores (near|far apart): 2 MB another core wrote read in (\d+\.\d\d)x the time", line)
    assert match and float(match.group(2)) > 0


def test_a_spell_is_far_past_the_threshold_and_a_row_says_where_its_timing_began_and_ended():
    import sys

    probe = core_distance()
    assert probe.spell_of(probe.FAR + 0.01) == "far" and probe.spell_of(probe.FAR) == "near"
    assert probe.spell(rounds=5) in ("near", "far")
    sys.path.insert(0, str(REPO / "bench"))
    import zoo

    assert zoo.spans("near", "near") == "near" and zoo.spans("far", "near") == "far -> near"
