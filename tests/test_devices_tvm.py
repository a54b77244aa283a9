"""Validating on a device through TVM's RPC tracker: a real tracker and a real RPC server on 127.0.0.1 (this
machine is the device), and each way reaching a device can fail, none past its timeout."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time

import pytest

from modelbuild.cli import main
from tests.helpers.onnx_models import two_convs
from tests.helpers.processes import descendants, free_port, start_group, stop_group, wait_for_port

KEY = "host-board"


@pytest.fixture(scope="module")
def tracker():
    """TVM's tracker and one RPC server registered under KEY, both on 127.0.0.1; yields 'host:port'."""
    port, server_port = free_port(), free_port()
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
    wait_for_port(port, processes[0])
    processes.append(
        start_group(
            [
                sys.executable,
                "-m",
                "tvm.exec.rpc_server",
                "--host",
                "127.0.0.1",
                "--port",
                str(server_port),
                "--port-end",
                str(server_port + 1),
                "--tracker",
                f"127.0.0.1:{port}",
                "--key",
                KEY,
            ]
        )
    )
    from tvm import rpc

    deadline = time.monotonic() + 30
    while KEY not in rpc.connect_tracker("127.0.0.1", port).text_summary():
        assert time.monotonic() < deadline, "the RPC server never registered with the tracker"
        time.sleep(0.2)
    yield f"127.0.0.1:{port}"
    for process in processes:
        stop_group(process)


def recipe(root, rpc: str, trials: int | None = None) -> None:
    root.mkdir(parents=True, exist_ok=True)
    two_convs(root / "net.onnx")
    tuning = (
        ""
        if trials is None
        else textwrap.dedent(f"""\
        [tuning.quick]
        trials_per_task = {trials}
        cost_model = "random"
        number = 1
        min_repeat_ms = 0
        """)
    )
    (root / "deploy.toml").write_text(
        textwrap.dedent(f"""\
        [models.net]
        path = "net.onnx"
        inputs.x = {{ shape = [1, 3, 8, 8], dtype = "float32" }}

        [targets.board]
        kind = "llvm"
        mcpu = "host"
        rpc = {rpc}
        {"num-cores = 2  # MetaSchedule tunes for a known core count" if tuning else ""}

        [validation]
        golden = {{ count = 2 }}
        timing = {{ warmup = 2, min_runs = 10, min_seconds = 0.0 }}

        [validation.gates]
        min_cosine = 0.9999

        [[builds]]
        model = "net"
        targets = ["board"]
        """)
        + (f'tuning = "quick"\n\n{tuning}' if tuning else "")
    )


def test_a_library_is_validated_on_the_device_the_tracker_gives_and_the_report_says_which(tracker, tmp_path, capsys):
    recipe(tmp_path, f'{{ tracker = "{tracker}", key = "{KEY}" }}')
    code = main(["build", "-f", str(tmp_path / "deploy.toml")])
    out = capsys.readouterr().out
    assert code == 0, out
    build = json.loads((tmp_path / "build/report.json").read_text())["builds"][0]
    assert build["validation"]["ran"] and build["accuracy"]["y"]["cosine"] > 0.9999
    assert build["latency_ms"]["runs"] >= 10 and build["latency_ms"]["median"] > 0
    assert build["provenance"]["machine"] == {"device": KEY, "tracker": tracker, "via": "rpc"}


def test_an_unreachable_tracker_is_one_line_with_exit_4_within_its_timeout(tmp_path, capsys):
    recipe(tmp_path, f'{{ tracker = "127.0.0.1:{free_port()}", key = "{KEY}" }}')
    started = time.monotonic()
    code = main(["build", "-f", str(tmp_path / "deploy.toml")])
    out = capsys.readouterr().out
    assert code == 4 and time.monotonic() - started < 60
    assert "cannot reach the RPC tracker at 127.0.0.1:" in out
    assert not list((tmp_path / ".cache").glob("actions/*/*.json")) or all(
        "validate" not in p.read_text() for p in (tmp_path / ".cache").glob("actions/*/*.json")
    )


def test_a_key_no_device_has_registered_says_which_keys_there_are(tracker, tmp_path, capsys):
    recipe(tmp_path, f'{{ tracker = "{tracker}", key = "rpi5", timeout = 5 }}')
    started = time.monotonic()
    code = main(["build", "-f", str(tmp_path / "deploy.toml")])
    out = capsys.readouterr().out
    assert code == 4 and time.monotonic() - started < 60
    assert f"no device with key 'rpi5' at the RPC tracker {tracker} (its keys: {KEY})" in out


def test_a_busy_device_is_waited_for_until_the_timeout_then_one_line(tracker, tmp_path, capsys):
    from tvm import rpc

    host, port = tracker.split(":")
    held = rpc.connect_tracker(host, int(port)).request(KEY, session_timeout=120)  # the only board, taken
    try:
        recipe(tmp_path, f'{{ tracker = "{tracker}", key = "{KEY}", timeout = 3 }}')
        started = time.monotonic()
        code = main(["build", "-f", str(tmp_path / "deploy.toml")])
        out = capsys.readouterr().out
        assert code == 4 and time.monotonic() - started < 60
        assert f"no {KEY} device came free within 3 s" in out
    finally:
        del held


def test_tuning_for_a_key_no_device_registered_stops_before_measuring_anything(tracker, tmp_path, capsys):
    # measuring on a device for real: tests/test_emulated_arm64_tvm.py, where no candidate could run here
    recipe(tmp_path, f'{{ tracker = "{tracker}", key = "rpi5", timeout = 5 }}', trials=2)
    started = time.monotonic()
    code = main(["build", "-f", str(tmp_path / "deploy.toml")])
    out = capsys.readouterr().out
    assert code == 4 and time.monotonic() - started < 60, out
    assert f"FAILED tune:net@board: no device with key 'rpi5' at the RPC tracker {tracker}" in out
    assert not list((tmp_path / ".cache/tuning").rglob("database_tuning_record.json")) or not any(
        p.read_text() for p in (tmp_path / ".cache/tuning").rglob("database_tuning_record.json")
    )


def test_a_stopped_tracker_leaves_no_process_behind():
    # it serves from a TVM popen_worker, which outlived a killed tracker (orphans under pid 1 after each run)
    port = free_port()
    tracker = start_group(
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
    wait_for_port(port, tracker)
    started = descendants(tracker.pid)
    assert any(b"popen_worker" in open(f"/proc/{pid}/cmdline", "rb").read() for pid in started), started
    stop_group(tracker)
    deadline = time.monotonic() + 10
    while (alive := [pid for pid in started if os.path.exists(f"/proc/{pid}")]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alive == []
