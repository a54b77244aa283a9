"""A cross-built library validated without a board: scripts/emulated_arm64.py's device (Debian's arm64
userland and the aarch64 TVM wheel under qemu-user) registered with a real tracker on 127.0.0.1, the bundled
classifier built for this machine and for a Raspberry Pi 4, in fp32 and int8, in one build."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time

import numpy as np
import pytest

from modelbuild.cli import main
from tests.helpers.paths import REPO
from tests.helpers.processes import EMULATED_ARM64_KEY as KEY
from tests.helpers.processes import descendants, free_port, left_in, serve_emulated_arm64

ELF_MACHINE_AARCH64 = 183  # e_machine in the ELF header


def int8_recipe(root, tracker: str) -> None:
    lines = REPO / "recipes/examples/text-lines"
    preprocess = "preprocess = { mean = [0.5, 0.5, 0.5], std = [0.5, 0.5, 0.5] }"
    (root / "deploy.toml").write_text(
        textwrap.dedent(f"""\
        include = ["{REPO}/recipes/targets/x86-server.toml", "{REPO}/recipes/targets/arm64-dotprod.toml"]

        [targets.arm64-dotprod]
        cross-compiler = "aarch64-linux-gnu-gcc"
        # the emulated device (qemu -cpu max) has the dot-product instructions, so it stands in for an N1
        rpc = {{ tracker = "{tracker}", key = "{KEY}", timeout = 120 }}

        [models.text_cls]
        path = "{REPO}/models/text_direction_cls.onnx"
        inputs.x = {{ shape = [1, 3, 48, 192] }}

        # as recipes/examples/int8.toml calibrates: with the same store, its x86 build is that recipe's
        [quantization.int8.calibration]
        method = "minmax"
        samples = 16
        source = "images"
        path = "{lines}/calibration"
        {preprocess}

        [validation]
        golden = {{ source = "images", path = "{lines}/golden", count = 4, {preprocess} }}
        timing = {{ warmup = 1, min_runs = 3, min_seconds = 0.0 }}

        [validation.gates]
        min_cosine = 0.99
        max_p99_ms = 50  # on this machine; under emulation a run takes hundreds of ms, and no latency gate applies

        [[builds]]
        model = "text_cls"
        targets = ["x86", "arm64-dotprod"]
        quantization = "int8"
        """)
    )


def assert_validated_on_the_emulated_device(library, build: dict, out: str) -> None:
    assert library.suffix == ".so" and library.read_bytes()[18] == ELF_MACHINE_AARCH64
    assert build["validation"]["ran"] and build["latency_ms"]["runs"] >= 3
    machine = build["provenance"]["machine"]
    assert (machine["device"], machine["via"], machine["machine"]) == (KEY, "rpc", "aarch64")
    assert machine["emulated"].startswith("qemu-aarch64") and machine["threads"] == 1  # serve's default
    gates = {g["name"]: g for g in build["gates"]}
    assert gates["min_cosine"]["applicable"] and gates["min_cosine"]["passed"]
    assert all(not gates[g]["applicable"] for g in ("max_p99_ms", "min_throughput") if g in gates)
    assert f"{build['name']}  p50" in out and "(emulated device)" in out


def test_the_shipped_x86_and_rpi4_recipe_validates_its_pi_build_on_the_emulated_device(
    arm64_tracker, tmp_path, capsys, monkeypatch, classifier_store
):
    monkeypatch.setenv("MODELBUILD_RPC_TRACKER", arm64_tracker)  # as CI points a recipe at its device farm
    code = main(
        [
            "build",
            "-f",
            str(REPO / "recipes/examples/x86-and-rpi4.toml"),
            "--cache-dir",
            str(classifier_store),
            "--build-dir",
            str(tmp_path / "build"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.loads((tmp_path / "build/report.json").read_text())
    builds = {b["name"]: b for b in report["builds"]}
    assert report["passed"] and set(builds) == {"text_cls@x86", "text_cls@rpi4"}
    assert_validated_on_the_emulated_device(tmp_path / "build/text_cls/rpi4/model.so", builds["text_cls@rpi4"], out)
    assert builds["text_cls@x86"]["passed"] and builds["text_cls@x86"]["provenance"]["machine"].get("via") is None

    # the two libraries' outputs side by side, within the float-ci preset's tolerances
    from modelbuild.measurement import device

    inputs = np.random.default_rng(0).uniform(-1, 1, (4, 1, 3, 48, 192)).astype("float32")  # as preprocessed
    run_pi, _, described = device.load(
        str(tmp_path / "build/text_cls/rpi4/model.so"), {"tracker": arm64_tracker, "key": KEY, "timeout": 120}
    )
    run_x86 = host_runner(tmp_path / "build/text_cls/x86/model.so")
    assert described["machine"] == "aarch64"
    for x in inputs:
        (on_pi,), (on_x86,) = run_pi([x]), run_x86([x])
        assert np.abs(on_pi - on_x86).max() <= 1e-4
        assert np.dot(on_pi.ravel(), on_x86.ravel()) / (np.linalg.norm(on_pi) * np.linalg.norm(on_x86)) >= 0.9999


def test_the_int8_arm_library_computes_with_sdot_and_agrees_with_onnxruntimes_qdq_model_as_the_x86_one_does(
    arm64_tracker, tmp_path, capsys, classifier_store
):
    int8_recipe(tmp_path, arm64_tracker)
    code = main(["build", "-f", str(tmp_path / "deploy.toml"), "--cache-dir", str(classifier_store)])
    out = capsys.readouterr().out
    assert code == 0, out
    builds = {b["name"]: b for b in json.loads((tmp_path / "build/report.json").read_text())["builds"]}
    arm = builds["text_cls+int8@arm64-dotprod"]
    library = tmp_path / arm["artifact"]
    assert_validated_on_the_emulated_device(library, arm, out)
    assert sdot_instructions(library) > 100  # the convs' packed kernels (sdot_conv.py), not the generic loop
    for figure in ("cosine", "max_abs"):
        (x86,) = (o[figure] for o in builds["text_cls+int8@x86"]["accuracy_vs_qdq"].values())
        (on_arm,) = (o[figure] for o in arm["accuracy_vs_qdq"].values())
        assert on_arm == pytest.approx(x86, abs=1e-5)


def sdot_instructions(library) -> int:
    listing = subprocess.run(
        ["aarch64-linux-gnu-objdump", "-d", str(library)], capture_output=True, text=True, check=True
    ).stdout
    return sum(1 for line in listing.splitlines() if "\tsdot\t" in line)


def host_runner(library):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(str(library)), tvm.cpu())
    return lambda arrays: [vm["main"](*[tvm.runtime.tensor(a) for a in arrays]).numpy()]


def test_tuning_the_pi_target_measures_every_candidate_on_the_emulated_device(
    arm64_tracker, tmp_path, stage_tmpdir, capsys
):
    from tests.helpers.onnx_models import two_convs

    two_convs(tmp_path / "net.onnx")
    (tmp_path / "deploy.toml").write_text(
        textwrap.dedent(f"""\
        include = ["{REPO}/recipes/targets/rpi4.toml"]

        [targets.rpi4]
        cross-compiler = "aarch64-linux-gnu-gcc"  # links each candidate: the device has no compiler
        rpc = {{ tracker = "{arm64_tracker}", key = "{KEY}", timeout = 120 }}

        [models.net]
        path = "net.onnx"
        inputs.x = {{ shape = [1, 3, 8, 8], dtype = "float32" }}

        [tuning.quick]
        trials_per_task = 2
        tasks = 1  # the heaviest; every task's default schedule is still timed, there
        strategy = "replay-trace"
        cost_model = "random"
        number = 1
        min_repeat_ms = 0

        [validation]
        enabled = false

        [[builds]]
        model = "net"
        targets = ["rpi4"]
        tuning = "quick"
        """)
    )
    code = main(["build", "-f", str(tmp_path / "deploy.toml")])
    out = capsys.readouterr().out
    assert code == 0, out
    tuning = json.loads((tmp_path / "build/report.json").read_text())["builds"][0]["tuning"]
    assert tuning["trials_measured_now"] == 2
    assert tuning["seconds_now"]["runner_waits"] > 0  # the search waited on the device's measurements
    database = next((tmp_path / ".cache/tuning").rglob("database_tuning_record.json"))
    seconds = [json.loads(line)[1][1] for line in database.read_text().splitlines()]
    # an aarch64 candidate runs nowhere on this machine: each time is the device's (a failure records 1e10)
    assert seconds and all(s and s[0] < 1 for s in seconds)
    defaults = json.loads(next((tmp_path / ".cache/tuning").rglob("defaults.json")).read_text())
    assert all(entry["seconds"] for entry in defaults.values())  # the default schedule, timed there too
    assert left_in(stage_tmpdir) == []  # every library sent to the device, candidate or default, is gone


def test_timed_together_the_baseline_library_runs_in_turns_with_the_build_on_the_device(
    arm64_tracker, tmp_path, capsys
):
    import shutil

    from tests.helpers.onnx_models import two_convs

    two_convs(tmp_path / "net.onnx")

    def write(baseline: str = "") -> None:
        (tmp_path / "deploy.toml").write_text(
            textwrap.dedent(f"""\
            include = ["{REPO}/recipes/targets/rpi4.toml"]

            [targets.rpi4]
            cross-compiler = "aarch64-linux-gnu-gcc"
            rpc = {{ tracker = "{arm64_tracker}", key = "{KEY}", timeout = 120 }}

            [models.net]
            path = "net.onnx"
            inputs.x = {{ shape = [1, 3, 8, 8], dtype = "float32" }}

            [validation]
            golden = {{ source = "generate", count = 2 }}
            timing = {{ warmup = 1, min_runs = 5, min_seconds = 0.0 }}

            [[builds]]
            model = "net"
            targets = ["rpi4"]
            """)
            + baseline
        )

    write()
    assert main(["build", "-f", str(tmp_path / "deploy.toml")]) == 0, capsys.readouterr().out
    shutil.copytree(tmp_path / "build", tmp_path / "base")  # as CI downloads the main branch's build folder
    write('\n[validation.baseline]\nreport = "base/report.json"\ntimed_together = true\nmax_p50_increase = 0.5\n')
    code = main(["build", "-f", str(tmp_path / "deploy.toml")])
    out = capsys.readouterr().out
    assert code == 0, out
    metrics = json.loads((tmp_path / "build/net/rpi4/validation.json").read_text())
    assert metrics["machine"]["via"] == "rpc"
    runs = len(metrics["latency_ms"]["samples_ms"])
    assert runs >= 5 and len(metrics["baseline_latency_ms"]["samples_ms"]) == runs  # in turns, on the device
    (build,) = json.loads((tmp_path / "build/report.json").read_text())["builds"]
    assert build["vs_baseline"]["timed_together"] is True
    gate = next(g for g in build["gates"] if g["name"] == "max_p50_increase")
    assert not gate["applicable"] and "emulated" in gate["detail"]  # timed there, but never gated


def test_a_stopped_device_leaves_no_process_behind():
    # the tracker serves from a TVM popen_worker that outlived a terminated `serve` (orphans under pid 1)
    server = serve_emulated_arm64("leaves-nothing", f"127.0.0.1:{free_port()}")
    time.sleep(2)
    started = descendants(server.pid)
    assert any(b"popen_worker" in open(f"/proc/{pid}/cmdline", "rb").read() for pid in started), started
    server.terminate()
    server.wait(timeout=30)
    deadline = time.monotonic() + 10
    while (alive := [pid for pid in started if os.path.exists(f"/proc/{pid}")]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alive == []


def test_the_device_runs_tvms_runtime_alone_as_a_board_would(arm64_tracker):
    (device,) = [pid for pid in os.listdir("/proc") if pid.isdigit() and device_of(pid, arm64_tracker)]
    command = open(f"/proc/{device}/cmdline", "rb").read().decode().split("\0")
    root = command[command.index("-L") + 1]
    maps = open(f"/proc/{device}/maps").read()  # qemu-user maps the guest's libraries as files of its own
    assert "libtvm_runtime.so" in maps and "libtvm_runtime_extra.so" in maps  # the runner's random fill
    assert "libtvm_compiler.so" not in maps
    assert not os.path.exists(f"{root}/site/tvm/lib/libtvm_compiler.so")  # nor on its disk: 240 MB


def device_of(pid: str, tracker: str) -> bool:
    try:
        command = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:  # gone since listed
        return False
    return b"qemu" in command[0] and b"device" in command and tracker.encode() in command
