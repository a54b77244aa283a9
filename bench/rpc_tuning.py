"""Tuning an Arm target on several devices at once: MetaSchedule's RPC runner measures one candidate at a
time on each device of the target's key, so where measuring dominates, N boards tune about N times as fast.

Shown with emulated devices (scripts/emulated_arm64.py): one tracker on 127.0.0.1, one device registered
as `pi-one` and two as `pi-two`. The same tuning (a small generated model for a Raspberry Pi 4 target, every
task searched, a fresh cache each time) runs against each key in turn, alternating, and the tune stage's
seconds are compared: goal, two devices at about half the time of one.

Measuring dominates on a board when each candidate is timed long enough to be trusted there (the default
here: at least 1 s each, `min_repeat_ms = 1000`) and candidates are cheap to propose (`replay-trace`). With
the evolutionary search and no minimum (`--strategy evolutionary --min-repeat-ms 0`), this 2-core machine
spends its time proposing and compiling candidates, which more devices do not shorten. The emulators and
the compiler share these 2 cores too, where real boards bring their own; each emulated board runs its
kernels on one thread (the script's default), as a board of one core would: with TVM's pool taking every
core in each emulator, two devices read 1.40x where one thread each reads 1.85x. Each run
prints where the stage's seconds went (the report's `tuning.seconds_now`): timing the default schedules,
and of the search the waits on the builder and on the devices; the rest is proposing candidates here.

Usage: python bench/rpc_tuning.py [--trials 16] [--rounds 2] [--min-repeat-ms 1000] [--strategy replay-trace]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers.onnx_models import two_convs  # noqa: E402
from tests.helpers.processes import free_port, start_group, stop_group, wait_for_port  # noqa: E402  (after the path is set)

KEYS = {"pi-one": 1, "pi-two": 2}


def start_devices(tracker: str) -> list[subprocess.Popen]:
    devices = [
        start_group(
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
            ]
        )
        for key, count in KEYS.items()
        for _ in range(count)
    ]
    from tvm import rpc

    host, _, port = tracker.rpartition(":")
    deadline = time.monotonic() + 300
    while True:
        summary = rpc.connect_tracker(host, int(port)).summary()
        registered = [s["key"] for s in summary.get("server_info", [])]
        if all(registered.count(f"server:{k}") == n for k, n in KEYS.items()):
            return devices
        if time.monotonic() > deadline:
            raise SystemExit(f"the emulated devices did not all register: {registered}")
        time.sleep(1)


def tune_seconds(key: str, tracker: str, trials: int, min_repeat_ms: int, strategy: str) -> tuple[float, dict]:
    """The tune stage's seconds, and where they went (the report's tuning.seconds_now)."""
    with tempfile.TemporaryDirectory(prefix="rpc-tuning-") as folder:
        root = Path(folder)
        two_convs(root / "net.onnx")
        (root / "deploy.toml").write_text(f"""
include = ["{REPO}/recipes/targets/rpi4.toml"]
[targets.rpi4]
cross-compiler = "aarch64-linux-gnu-gcc"
rpc = {{ tracker = "{tracker}", key = "{key}", timeout = 300 }}

[models.net]
path = "net.onnx"
inputs.x = {{ shape = [1, 3, 8, 8], dtype = "float32" }}

[tuning.quick]
trials_per_task = {trials}
cost_model = "random"
strategy = "{strategy}"
number = 1
min_repeat_ms = {min_repeat_ms}

[validation]
enabled = false

[[builds]]
model = "net"
targets = ["rpi4"]
tuning = "quick"
""")
        done = subprocess.run(
            [sys.executable, "-m", "modelbuild", "-f", str(root / "deploy.toml"), "--json"],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        if done.returncode != 0:
            raise SystemExit(f"the build failed: {done.stdout[-1500:]}{done.stderr[-1500:]}")
        report = json.loads((root / "build/report.json").read_text())["builds"][0]
        measured = report["tuning"]["trials_measured_now"]
        assert measured == 4 * trials, f"{measured} trials measured, expected {4 * trials}"
        return report["stages"]["tune"]["seconds"], report["tuning"]["seconds_now"]


def breakdown(parts: dict) -> str:
    host = parts["search"] - parts["builder"] - parts["runner_waits"]
    return (
        f"defaults {parts['defaults']:.1f} s, search {parts['search']:.1f} s: waiting on the builder "
        f"{parts['builder']:.1f} s, on the devices {parts['runner_waits']:.1f} s, the rest {host:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=16, help="per task (the model has 4 tasks)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--min-repeat-ms", type=int, default=1000, help="each candidate timed at least this long")
    parser.add_argument("--strategy", default="replay-trace", choices=["replay-trace", "evolutionary"])
    args = parser.parse_args()
    port = free_port()
    tracker = f"127.0.0.1:{port}"
    processes = [
        start_group(
            [
                sys.executable,
                "-m",
                "tvm.exec.rpc_tracker",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--port-end",
                str(port + 1),
            ]
        )
    ]
    try:
        wait_for_port(port, processes[0])  # before the devices: each would start a tracker of its own
        processes += start_devices(tracker)
        seconds: dict[str, list[float]] = {key: [] for key in KEYS}
        for round_ in range(args.rounds):
            for key in KEYS if round_ % 2 == 0 else reversed(KEYS):  # alternate which goes first
                stage, parts = tune_seconds(key, tracker, args.trials, args.min_repeat_ms, args.strategy)
                seconds[key].append(stage)
                print(
                    f"round {round_ + 1}: {key} ({KEYS[key]} device(s)): tune {stage:.1f} s ({breakdown(parts)})",
                    flush=True,
                )
        one, two = (statistics.median(seconds[k]) for k in KEYS)
        print(
            f"\n{4 * args.trials} trials ({args.strategy}, min_repeat_ms {args.min_repeat_ms}), median of "
            f"{args.rounds}: one device {one:.1f} s, two devices {two:.1f} s: "
            f"{one / two:.2f}x faster with two (goal: about 2x)"
        )
    finally:
        for process in processes:
            stop_group(process)


if __name__ == "__main__":
    main()
