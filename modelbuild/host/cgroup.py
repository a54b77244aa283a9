"""This process's cgroup CPU controller: its quota and how long it has been throttled by it.

A CPU quota (a container's --cpus, a CI runner's limit) stalls a TVM library with more threads than the quota
allows CPUs: its spinning workers spend the quota early in each period and every thread waits out the rest
(docs/guide/validation.md: timing on a busy machine). cgroup v1 and v2 both, as Linux mounts them at
/sys/fs/cgroup; where the path /proc/self/cgroup names is not under the mount (a container without its own
cgroup namespace), the mount's own root is the container's.
"""

from __future__ import annotations

from pathlib import Path

MEMBERSHIP = Path("/proc/self/cgroup")
ROOT = Path("/sys/fs/cgroup")


def _folders(membership: Path, root: Path) -> list[tuple[Path, int]]:
    """(a folder that may hold this process's cpu controller files, the cgroup version), most specific first."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return []
    folders = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):  # v1: "4:cpu,cpuacct:/docker/..."
            for mount in (root / controllers, root / "cpu", root / "cpu,cpuacct"):
                folders += [(mount / path.lstrip("/"), 1), (mount, 1)]
        elif controllers == "":  # v2: "0::/user.slice/..."
            folders += [(root / path.lstrip("/"), 2), (root, 2)]
    return folders


def throttled_seconds(membership: Path = MEMBERSHIP, root: Path = ROOT) -> float | None:
    """Seconds this process's cgroup has been throttled by its CPU quota, ever, summed over the CPUs; None
    where no cpu controller says (not Linux, none mounted). v1 counts nanoseconds (throttled_time), v2
    microseconds (throttled_usec)."""
    for folder, version in _folders(membership, root):
        field, unit = ("throttled_time", 1e-9) if version == 1 else ("throttled_usec", 1e-6)
        try:
            fields = dict(
                line.split() for line in (folder / "cpu.stat").read_text().splitlines() if len(line.split()) == 2
            )
        except OSError:
            continue
        if field in fields:
            return int(fields[field]) * unit
    return None


def cpu_quota(membership: Path = MEMBERSHIP, root: Path = ROOT) -> float | None:
    """How many CPUs' worth of time this process's cgroup may use (1.5 for --cpus=1.5); None without a quota
    (v1 cfs_quota_us -1, v2 cpu.max "max") or where no cpu controller says."""
    for folder, version in _folders(membership, root):
        try:
            if version == 1:
                quota, period = ((folder / f"cpu.cfs_{name}_us").read_text().strip() for name in ("quota", "period"))
            else:
                quota, period = (folder / "cpu.max").read_text().split()
        except (OSError, ValueError):
            continue
        return None if quota in ("max", "-1") else int(quota) / int(period)
    return None
