"""Servers and processes the tests start on 127.0.0.1, and how they look at what a build left behind."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.paths import REPO


def left_in(folder: Path) -> list[str]:
    """What a build left in its TMPDIR, but onnxruntime's `.ses` (one file of a fixed name, its session id,
    rewritten by every session)."""
    return sorted(p.name for p in folder.iterdir() if p.name != ".ses")


def free_port() -> int:
    """A TCP port nothing listens on now, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_group(command: list[str]) -> subprocess.Popen:
    """A server in a process group of its own, quiet; end it with `stop_group`. TVM's tracker and RPC server
    serve from popen_worker children, which outlive a killed parent (orphans under pid 1 after every run)."""
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        for child in open(f"/proc/{pid}/task/{task}/children").read().split():
            found += [int(child), *descendants(int(child))]
    return found


def stop_group(process: subprocess.Popen, timeout: float = 10) -> None:
    """End the group `start_group` started: SIGTERM (a server may clean up), SIGKILL after `timeout`."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 30) -> None:
    """Until a server started as `process` accepts connections on 127.0.0.1:port; fails if it exits first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline and process.poll() is None, f"nothing came to listen on {port}"
            time.sleep(0.1)


EMULATED_ARM64_KEY = "rpi4"
EMULATED_ARM64_NEEDS = ("qemu-aarch64-static", "aarch64-linux-gnu-gcc", "apt-get", "dpkg")


def serve_emulated_arm64(key: str, tracker: str) -> subprocess.Popen:
    """scripts/emulated_arm64.py serving device `key` and a tracker at `tracker` (127.0.0.1:PORT), once the
    tracker answers (the device registers about 10 s later); skips where the emulator's tools are missing."""
    missing = [tool for tool in EMULATED_ARM64_NEEDS if shutil.which(tool) is None]
    if missing:  # .ci/run installs them
        pytest.skip(f"needs {', '.join(missing)} (Debian: apt-get install qemu-user-static gcc-aarch64-linux-gnu)")
    import sys

    server = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "scripts/emulated_arm64.py"),
            "serve",
            "--key",
            key,
            "--tracker",
            tracker,
            "--port",
            str(free_port()),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    # the first run downloads the environment (about 200 MB) before it starts the tracker
    wait_for_port(int(tracker.rpartition(":")[2]), server, timeout=600)
    return server


def run_on_read_only(folder: Path, command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run `command` with `folder` read-only: by permissions for a normal user; for root, whom permissions do
    not stop, by a read-only bind mount in a private mount namespace (skipped where the machine refuses one)."""
    if os.getuid() != 0:
        folders = [folder, *(p for p in folder.rglob("*") if p.is_dir())]
        for each in folders:
            each.chmod(0o555)
        try:
            return subprocess.run(command, capture_output=True, text=True, **kwargs)
        finally:
            for each in folders:
                each.chmod(0o755)
    if shutil.which("unshare") is None:
        pytest.skip("running as root without unshare(1): cannot make a read-only folder")
    script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, str(folder), *command], capture_output=True, text=True, **kwargs
    )
    if done.returncode != 0 and "mount" in done.stderr:
        pytest.skip(f"root, but this machine refuses a private read-only mount: {done.stderr.strip()}")
    return done
