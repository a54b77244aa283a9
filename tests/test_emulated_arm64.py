"""scripts/emulated_arm64.py's pieces that need no emulator: the device's environment and its arguments (the
device itself, under qemu, is tests/test_emulated_arm64_tvm.py's)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.helpers.paths import REPO


def script():
    spec = importlib.util.spec_from_file_location("emulated_arm64", REPO / "scripts/emulated_arm64.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_device_runs_its_kernels_on_the_threads_it_was_served_with():
    environment = script().device_environment(
        {"PATH": "/bin"}, Path("/arm64"), "qemu-aarch64 8.2 -cpu max", "max", threads=1
    )
    assert environment["TVM_NUM_THREADS"] == "1"  # TVM's pool would take every core of this machine
    assert environment["PATH"] == "/bin" and environment["PYTHONPATH"] == "/arm64/site"
    assert environment["QEMU_CPU"] == "max" and environment["MODELBUILD_EMULATOR"] == "qemu-aarch64 8.2 -cpu max"


def test_serving_on_no_threads_is_refused_before_anything_is_prepared(capsys, tmp_path):
    with pytest.raises(SystemExit) as stopped:
        script().main(["serve", "--key", "rpi4", "--threads", "0", "--root", str(tmp_path / "root")])
    assert stopped.value.code == 2
    assert "--threads 0: a device runs on at least one thread" in capsys.readouterr().err
    assert not (tmp_path / "root").exists()
