"""The cgroup CPU controller as validation reads it: the throttled time and the quota, in v1 and v2."""

from __future__ import annotations

import pytest

from modelbuild.host.cgroup import cpu_quota, throttled_seconds

V1_STAT = "nr_periods 11\nnr_throttled 11\nthrottled_time 833227229\nnr_bursts 0\nburst_time 0\n"
V2_STAT = "usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\nnr_periods 9\nnr_throttled 4\nthrottled_usec 250000\n"


@pytest.mark.parametrize(
    "membership, stat_file, stat, seconds",
    [
        ("12:cpu,cpuacct:/ci/job7\n0::/\n", "cpu,cpuacct/ci/job7/cpu.stat", V1_STAT, 0.833227229),  # cgroup v1
        ("1:cpu:/ci/job7\n", "cpu/ci/job7/cpu.stat", V1_STAT, 0.833227229),
        ("0::/ci/job7\n", "ci/job7/cpu.stat", V2_STAT, 0.25),  # cgroup v2
        ("0::/docker/abc\n", "cpu.stat", V2_STAT, 0.25),  # a container's own mount, its path not under it
        ("12:memory:/x\n", "memory/x/cpu.stat", V1_STAT, None),  # no cpu controller
    ],
)
def test_the_cgroups_throttled_time_is_read_from_v1_or_v2(tmp_path, membership, stat_file, stat, seconds):
    (tmp_path / "cgroup").write_text(membership)
    (tmp_path / "fs" / stat_file).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "fs" / stat_file).write_text(stat)
    expected = pytest.approx(seconds) if seconds else None
    assert throttled_seconds(tmp_path / "cgroup", tmp_path / "fs") == expected
    assert throttled_seconds(tmp_path / "absent", tmp_path / "fs") is None


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
        spin = (
            "import os, sys, time\n"
            f"open({str(group / 'cgroup.procs')!r}, 'w').write(str(os.getpid()))\n"
            "from modelbuild.host.cgroup import throttled_seconds\n"
            "before = throttled_seconds()\n"
            "t = time.time()\n"
            "while time.time() - t < 0.6: pass\n"
            "print(before, throttled_seconds())\n"
            # back to the parent before exiting, so the group is empty when it is removed
            f"open({str(group.parent / 'cgroup.procs')!r}, 'w').write(str(os.getpid()))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", spin],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
        )
        before, after = (float(v) for v in done.stdout.split())
        assert after - before > 0.1, done.stdout  # at 20% of one CPU, most of 0.6 s is spent waiting
    finally:
        group.rmdir()


@pytest.mark.parametrize(
    "membership, files, quota",
    [
        (
            "4:cpu,cpuacct:/ci/job7\n",
            {"cpu,cpuacct/ci/job7/cpu.cfs_quota_us": "150000", "cpu,cpuacct/ci/job7/cpu.cfs_period_us": "100000"},
            1.5,
        ),
        ("1:cpu:/\n", {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),  # no quota
        ("0::/ci/job7\n", {"ci/job7/cpu.max": "100000 100000\n"}, 1.0),
        ("0::/docker/abc\n", {"cpu.max": "200000 100000\n"}, 2.0),  # a container's own mount
        ("0::/\n", {"cpu.max": "max 100000\n"}, None),
        ("12:memory:/x\n", {}, None),
    ],
)
def test_the_cpu_quota_in_cpus(tmp_path, membership, files, quota):
    (tmp_path / "cgroup").write_text(membership)
    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text)
    assert cpu_quota(tmp_path / "cgroup", tmp_path / "fs") == quota
