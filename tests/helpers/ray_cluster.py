"""A real Ray cluster on 127.0.0.1: a head and worker nodes, each a process group of its own
(scripts/ray_node.py), started and stopped by the tests and bench/cluster.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.paths import REPO
from tests.helpers.processes import descendants, free_port

SCRIPT = REPO / "scripts" / "ray_node.py"
START_SECONDS = 60.0


@dataclass
class RayCluster:
    port: int
    client_port: int
    temp_dir: Path
    head: subprocess.Popen | None = None
    nodes: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def address(self) -> str:
        """What --executor takes: the head's Ray Client address."""
        return f"ray://127.0.0.1:{self.client_port}"

    @classmethod
    def start(cls) -> RayCluster:
        # a short folder: Ray keeps unix sockets in it, whose paths may not be longer than 107 bytes
        cluster = cls(free_port(), free_port(), Path(tempfile.mkdtemp(prefix="mbray-", dir="/tmp")))
        cluster.head = _start(
            ["--head", "--port", str(cluster.port), "--client-port", str(cluster.client_port)]
            + ["--temp-dir", str(cluster.temp_dir)],
            cluster.temp_dir / "head.log",
        )
        return cluster

    def add_node(self, name: str, cpus: int = 1, cores: str | None = None) -> subprocess.Popen:
        """A worker node offering `cpus` CPUs and a resource `name`, pinned to `cores` where given; nodes
        start one at a time (two starting at once on one machine race for the session's files)."""
        command = ["--address", f"127.0.0.1:{self.port}", "--cpus", str(cpus), "--name", name]
        self.nodes[name] = _start(command + (["--cores", cores] if cores else []), self.temp_dir / f"{name}.log")
        return self.nodes[name]

    def kill_node(self, name: str) -> None:
        """SIGKILL to every process of the node, as a machine that loses power: nothing cleans up."""
        _kill(self.nodes.pop(name), signal.SIGKILL)

    def stop(self) -> None:
        for name in list(self.nodes):
            _kill(self.nodes.pop(name), signal.SIGKILL)
        if self.head is not None:
            _kill(self.head, signal.SIGKILL)
            self.head = None
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _start(arguments: list[str], log: Path) -> subprocess.Popen:
    # the workers import the tests' stand-in stages by module name, from the repository
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, str(SCRIPT), *arguments],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_SECONDS
    while "ready" not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            _kill(process, signal.SIGKILL)
            raise RuntimeError(f"a Ray node did not start: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    return process


def _kill(process: subprocess.Popen, sig: int) -> None:
    """The node's process group and anything of it that left the group (Ray's reaper starts a session)."""
    try:
        below = descendants(process.pid)
    except FileNotFoundError:
        below = []
    for target in (lambda: os.killpg(process.pid, sig), *(lambda pid=pid: os.kill(pid, sig) for pid in below)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass
    process.wait(timeout=30)
