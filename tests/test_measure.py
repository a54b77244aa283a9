"""The timing loop: its minimums, and the bound that keeps a slow library's validation short."""

import pytest

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
    spinners = [subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 1.0: pass"])
                for _ in range(cpus)]
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


V1_STAT = "nr_periods 11\nnr_throttled 11\nthrottled_time 833227229\nnr_bursts 0\nburst_time 0\n"
V2_STAT = "usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\nnr_periods 9\nnr_throttled 4\nthrottled_usec 250000\n"


@pytest.mark.parametrize("membership, stat_file, stat, seconds", [
    ("12:cpu,cpuacct:/ci/job7\n0::/\n", "cpu,cpuacct/ci/job7/cpu.stat", V1_STAT, 0.833227229),  # cgroup v1
    ("1:cpu:/ci/job7\n", "cpu/ci/job7/cpu.stat", V1_STAT, 0.833227229),
    ("0::/ci/job7\n", "ci/job7/cpu.stat", V2_STAT, 0.25),  # cgroup v2
    ("0::/docker/abc\n", "cpu.stat", V2_STAT, 0.25),  # a container's own mount, its path not under it
    ("12:memory:/x\n", "memory/x/cpu.stat", V1_STAT, None),  # no cpu controller
])
def test_the_cgroups_throttled_time_is_read_from_v1_or_v2(tmp_path, membership, stat_file, stat, seconds):
    (tmp_path / "cgroup").write_text(membership)
    (tmp_path / "fs" / stat_file).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "fs" / stat_file).write_text(stat)
    expected = pytest.approx(seconds) if seconds else None
    assert measure.cgroup_throttled(tmp_path / "cgroup", tmp_path / "fs") == expected
    assert measure.cgroup_throttled(tmp_path / "absent", tmp_path / "fs") is None


def test_a_process_held_back_by_a_cpu_quota_shows_throttled_time(tmp_path):
    """A real cgroup with a 20% quota (where this user may make one): a process spinning in it is throttled."""
    import os
    import subprocess
    import sys
    import uuid
    from pathlib import Path

    v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
    name = f"modelbuild-test-{uuid.uuid4().hex[:8]}"
    group = v1 / name if (v1 / "cpu.cfs_quota_us").exists() else v2 / name
    try:
        group.mkdir()
    except OSError as err:
        pytest.skip(f"cannot make a cgroup here ({err.strerror}): the parsing test covers the formats")
    try:
        try:
            if group.parent == v1:
                (group / "cpu.cfs_quota_us").write_text("20000")
            else:
                (group / "cpu.max").write_text("20000 100000")
        except OSError as err:  # cgroup v2 without the cpu controller given to children
            pytest.skip(f"cannot set a CPU quota here ({err.strerror}): the parsing test covers the formats")
        spin = ("import os, sys, time\n"
                f"open({str(group / 'cgroup.procs')!r}, 'w').write(str(os.getpid()))\n"
                "from modelbuild.stages import measure\n"
                "before = measure.cgroup_throttled()\n"
                "t = time.time()\n"
                "while time.time() - t < 0.6: pass\n"
                "print(before, measure.cgroup_throttled())\n")
        done = subprocess.run([sys.executable, "-c", spin], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
        before, after = (float(v) for v in done.stdout.split())
        assert after - before > 0.1, done.stdout  # at 20% of one CPU, most of 0.6 s is spent waiting
    finally:
        group.rmdir()
