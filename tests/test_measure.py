"""The measuring script: the CPU clocks it reads beside the timing."""

import pytest

from modelbuild.measurement import measure


def test_other_processes_busy_on_every_cpu_show_in_the_share_and_this_process_does_not():
    import os
    import subprocess
    import sys
    import time

    from modelbuild.validation import metrics

    cpus = len(os.sched_getaffinity(0))
    before = measure.cpu_clock()
    started = time.monotonic()
    while time.monotonic() - started < 0.5:  # this process busy: its own time, not others'
        pass
    busy_self = metrics.others_share(before, measure.cpu_clock())
    before = measure.cpu_clock()
    spinners = [
        subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 1.0: pass"])
        for _ in range(cpus)
    ]
    for spinner in spinners:  # blocked in wait(): the CPUs are theirs from start to exit
        spinner.wait()
    busy_others = metrics.others_share(before, measure.cpu_clock())
    assert busy_others > 0.6, busy_others  # every CPU taken by another process (less the ticks' granularity)
    assert busy_others > busy_self + 0.3, (busy_self, busy_others)


def test_the_cpu_clock_counts_busy_and_stolen_ticks_of_this_process_cpus_only(tmp_path):
    import os

    allowed = sorted(os.sched_getaffinity(0))
    # user nice system idle iowait irq softirq steal guest guest_nice
    lines = ["cpu  1 1 1 1 1 1 1 1 0 0"] + [f"cpu{i} 10 1 5 1000 50 2 3 4 7 0" for i in allowed]
    lines.append(f"cpu{max(allowed) + 1} 999 999 999 0 0 0 0 0 0 0")  # not this process's: left out
    stat = tmp_path / "stat"
    stat.write_text("\n".join(lines + ["intr 12345", "ctxt 99"]) + "\n")
    clock = measure.cpu_clock(stat)
    assert clock.cpus == len(allowed)
    assert clock.cpus_busy == pytest.approx(len(allowed) * 25 / os.sysconf("SC_CLK_TCK"))  # idle and iowait not
    assert measure.cpu_clock(tmp_path / "absent") is None


def test_top1_is_measured_on_class_scores_and_not_on_an_embeddings_features():
    import numpy as np

    expected = np.random.default_rng(0).standard_normal((4, 1, 16)).astype(np.float32)
    actual = expected + 0.01
    assert {"top1_agreement", "top5_agreement"} <= set(measure._accuracy(actual, expected))
    features = measure._accuracy(actual, expected, scores=False)
    assert "top1_agreement" not in features and features["cosine"] > 0.99
