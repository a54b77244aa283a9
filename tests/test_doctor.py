"""`modelbuild doctor`: each target's verdict from the facts (this TVM, the tools on the path, trackers that
answer), and the command on a real recipe with the real TVM."""

from __future__ import annotations

import json
import socket

from modelbuild.cli import main
from modelbuild.pipeline.doctor import assess, tracker_answers
from tests.helpers.paths import REPO

CAPS = {
    "tvm": "0.27.0",
    "llvm": True,
    "llvm_version": 22,
    "cuda_codegen": True,
    "gpus": [],
    "no_gpu": "no CUDA driver on this machine (libcuda.so.1 not found)",
    "cuda_compiler": {"name": "nvrtc", "version": "12.9.86"},
}
NOTHING = {}.get  # no tool on the path


def test_a_host_target_builds_and_validates_here():
    check = assess("x86", {"kind": "llvm", "mcpu": "host"}, CAPS, NOTHING, lambda _: False)
    assert check.ready and check.validates == "here" and check.build_note == "a .so for this machine"


def test_a_cpu_quota_below_the_targets_threads_is_said_with_the_fix():
    x86 = {"kind": "llvm", "mcpu": "host", "num-cores": 2}
    quota = assess("x86", x86, CAPS | {"cpu_quota": 1.0}, NOTHING, lambda _: False)
    assert (
        quota.ready
        and quota.validates == "here"
        and quota.validate_note
        == (
            "but this cgroup's CPU quota is 1 CPU and the target runs 2 threads: its latency will stall on the quota "
            "(fix: num-cores = 1, or a runner without the quota)"
        )
    )
    assert assess("x86", x86, CAPS | {"cpu_quota": 2.0}, NOTHING, lambda _: False).validate_note == ""
    assert assess("x86", x86, CAPS | {"cpu_quota": None}, NOTHING, lambda _: False).validate_note == ""


def test_a_cross_target_says_which_package_brings_its_linker_and_where_it_could_be_validated():
    pi = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}
    check = assess("rpi4", pi, CAPS, NOTHING, lambda _: False)
    assert check.builds_here and not check.ready
    assert 'cross-compiler = "aarch64-linux-gnu-gcc" after apt-get install gcc-aarch64-linux-gnu' in check.build_note
    assert "a device over RPC" in check.validate_note
    linked = assess(
        "rpi4",
        pi | {"cross-compiler": "aarch64-linux-gnu-gcc"},
        CAPS,
        {"aarch64-linux-gnu-gcc": "/usr/bin/aarch64-linux-gnu-gcc"}.get,
        lambda _: False,
    )
    assert linked.build_note == "a .so linked by /usr/bin/aarch64-linux-gnu-gcc"


def test_a_target_with_a_device_is_ready_when_its_tracker_answers():
    board = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "rpc": {"tracker": "farm:9190", "key": "rpi4"}}
    assert (
        assess("rpi4", board, CAPS, NOTHING, lambda address: address == "farm:9190").validates
        == "on rpi4 via farm:9190"
    )
    down = assess("rpi4", board, CAPS, NOTHING, lambda _: False)
    assert down.validates is None and "farm:9190 does not answer" in down.validate_note
    assert "no board? `python scripts/emulated_arm64.py serve --key rpi4`" in down.validate_note
    gpu = {"kind": "cuda", "rpc": {"tracker": "farm:9190", "key": "a100"}}
    assert "emulated" not in assess("gpu", gpu, CAPS, NOTHING, lambda _: False).validate_note


def test_a_gpu_target_builds_where_a_cuda_compiler_is_and_validates_where_a_gpu_as_new_is():
    sm80 = {"kind": "cuda", "arch": "sm_80"}
    check = assess("gpu", sm80, CAPS, NOTHING, lambda _: False)
    assert check.builds_here and check.build_note == (
        "CUDA C with its cubin for sm_80 and PTX, compiled here by nvrtc 12.9.86: nothing to compile where it loads"
    )
    assert not check.ready and check.validate_note.startswith("no CUDA driver on this machine (libcuda.so.1 not")
    h200 = {"gpu": "NVIDIA H200", "compute_capability": "9.0", "cuda_driver": "13.0"}
    on_gpu = assess("gpu", sm80, CAPS | {"gpus": [h200]}, NOTHING, lambda _: False)
    assert on_gpu.ready and on_gpu.validates == "here" and on_gpu.validate_note == ""
    too_old = assess("gpu", {"kind": "cuda", "arch": "sm_100"}, CAPS | {"gpus": [h200]}, NOTHING, lambda _: False)
    assert not too_old.ready and "built for sm_100; this machine's GPU (NVIDIA H200) is sm_90" in too_old.validate_note
    assert not assess("gpu", {"kind": "cuda"}, CAPS | {"cuda_codegen": False}, NOTHING, lambda _: False).builds_here
    split = assess("gpu", {**sm80, "devices": ["cuda", "llvm"]}, CAPS, NOTHING, lambda _: False)
    assert split.build_note.startswith("split between the GPU and the CPU by a cost model; CUDA C with its cubin")
    no_compiler = assess("gpu", sm80, CAPS | {"cuda_compiler": None}, NOTHING, lambda _: False)
    assert not no_compiler.builds_here and no_compiler.build_note == (
        "no CUDA compiler for its kernels (fix: pip install 'modelbuild[cuda]', or nvcc on the path)"
    )


def test_a_tracker_answers_only_when_something_listens():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        assert tracker_answers(address)
    assert not tracker_answers(address, timeout=1)


def test_doctor_on_the_shipped_two_target_recipe(tvm, capsys):
    code = main(["doctor", "--json", "-f", str(REPO / "recipes/examples/x86-and-rpi4.toml")])
    report = json.loads(capsys.readouterr().out)
    assert report["tvm"]["tvm"].startswith("0.27") and report["tvm"]["llvm"]
    ready = {t["target"]: t["ready"] for t in report["targets"]}
    assert ready["x86"] and code == (0 if all(ready.values()) else 1)
