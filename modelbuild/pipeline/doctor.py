"""`modelbuild doctor`: for each target of a recipe, whether it can be built here and where it can be
validated, with the command that installs what is missing.

The assessment is pure (targets, this TVM's capabilities, the tools on the path, which trackers answer);
the probes that gather those facts are small functions beside it, so the tests give facts and read verdicts.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

from modelbuild.host import cgroup, gpus
from modelbuild.recipe.targets import cuda_compiler_here, device_of, runs_on_host, why_not_run_here

# cross toolchains by target triple prefix: (compiler, the Debian package that brings it)
CROSS = {
    "aarch64": ("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu"),
    "arm": ("arm-linux-gnueabihf-gcc", "gcc-arm-linux-gnueabihf"),
    "riscv64": ("riscv64-linux-gnu-gcc", "gcc-riscv64-linux-gnu"),
}


@dataclass(frozen=True)
class TargetCheck:
    target: str
    builds_here: bool
    build_note: str
    validates: str | None  # "here", "on DEVICE via TRACKER", or None
    validate_note: str

    @property
    def ready(self) -> bool:
        return self.builds_here and self.validates is not None


def assess(
    name: str, target: dict, caps: dict, which: Callable[[str], str | None], answers: Callable[[str], bool]
) -> TargetCheck:
    """One target's verdict from the facts: this TVM's capabilities, tools found on the path, trackers
    that answer."""
    kind = target.get("kind")
    builds, build_note = _builds(kind, target, caps, which)
    device = device_of(target)
    if device:
        ok = bool(device["tracker"]) and answers(device["tracker"])
        return TargetCheck(
            name,
            builds,
            build_note,
            f"on {device['key']} via {device['tracker']}" if ok else None,
            ""
            if ok
            else f"the RPC tracker {device['tracker']} does not answer (fix: start it, "
            f"or set MODELBUILD_RPC_TRACKER){_emulator_hint(target, device['key'])}",
        )
    if kind == "cuda":
        found = tuple(gpus.Gpu.described(fields) for fields in caps.get("gpus", ()))
        not_here = gpus.why_not_on_gpu(target, found, caps.get("no_gpu") or "no CUDA GPU here")
        if not_here is None:  # the library carries its kernels: loading it needs no compiler
            return TargetCheck(name, builds, build_note, "here", "")
        return TargetCheck(
            name,
            builds,
            build_note,
            None,
            f"{not_here} (fix: a GPU machine with one, or a device over RPC: rpc = {{ tracker, key }} in the target)",
        )
    not_here = why_not_run_here(target)
    if not_here is None:
        return TargetCheck(name, builds, build_note, "here", _quota_note(target, caps.get("cpu_quota")))
    return TargetCheck(
        name,
        builds,
        build_note,
        None,
        f'{not_here} (fix: a device over RPC: rpc = {{ tracker = "host:port", key = "..." }} '
        f"in the target){_emulator_hint(target, name)}",
    )


def _quota_note(target: dict, quota: float | None) -> str:
    """Where this machine's cgroup may use fewer CPUs than the target runs threads: its timings will stall
    (docs/guide/validation.md: timing on a busy machine)."""
    threads = target.get("num-cores")
    if quota is None or not threads or threads <= quota:
        return ""
    cpus = f"{quota:g} CPU{'' if quota == 1 else 's'}"
    return (
        f"but this cgroup's CPU quota is {cpus} and the target runs {threads} threads: its latency will stall "
        f"on the quota (fix: num-cores = {max(1, int(quota))}, or a runner without the quota)"
    )


def _emulator_hint(target: dict, key: str) -> str:
    """For an Arm64 target with no board at hand: the emulated device that modelbuild's repository ships."""
    if not str(target.get("mtriple", "")).startswith("aarch64"):
        return ""
    return (
        f"; no board? `python scripts/emulated_arm64.py serve --key {key}` in modelbuild's repository "
        "runs an emulated one (accuracy real, latency not gated)"
    )


def _builds(kind, target: dict, caps: dict, which) -> tuple[bool, str]:
    if kind == "llvm":
        if not caps.get("llvm"):
            return False, "this TVM has no LLVM (fix: pip install apache-tvm, the wheel has it)"
        if runs_on_host(target):
            return True, "a .so for this machine"
        arch = str(target.get("mtriple", "")).split("-")[0]
        compiler = target.get("cross-compiler") or CROSS.get(_family(arch), (None, None))[0]
        package = CROSS.get(_family(arch), (None, "a cross gcc"))[1]
        if target.get("cross-compiler") and which(target["cross-compiler"]):
            return True, f"a .so linked by {which(target['cross-compiler'])}"
        hint = f'cross-compiler = "{compiler}" after apt-get install {package}' if compiler else "a cross gcc"
        return True, f"object files only (model.tar); a loadable .so needs {hint}"
    if kind == "cuda":
        if not caps.get("cuda_codegen"):
            return False, "this TVM was built without CUDA"
        compiler = caps.get("cuda_compiler")
        if compiler is None:
            return False, "no CUDA compiler for its kernels (fix: pip install 'modelbuild[cuda]', or nvcc on the path)"
        split = "split between the GPU and the CPU by a cost model; " if target.get("devices") else ""
        return True, (
            f"{split}CUDA C with its cubin for {target.get('arch', 'the GPU')} and PTX, compiled here by "
            f"{compiler['name']} {compiler['version']}: nothing to compile where it loads"
        )
    return True, f"{kind} code by TVM"


def _family(arch: str) -> str:
    return "arm" if arch.startswith("arm") or arch.startswith("thumb") else arch


def probe_capabilities() -> dict:
    """This TVM's abilities, from a subprocess (the command line never imports TVM), this machine's GPUs and
    its cgroup's CPU quota."""
    done = subprocess.run([sys.executable, "-m", "modelbuild.compiler.capabilities"], capture_output=True, text=True)
    # the driver is what a cuda library needs to run; the wheel has CUDA code generation without one
    found, no_gpu = gpus.local_gpus()
    driver = {
        "gpus": [gpu.describe() for gpu in found],
        "no_gpu": no_gpu,
        "cpu_quota": cgroup.cpu_quota(),
        "cuda_compiler": cuda_compiler_here(),
    }
    if done.returncode != 0:
        return {"tvm": None, "error": (done.stderr.strip().splitlines() or ["no output"])[-1], **driver}
    return json.loads(done.stdout) | driver


def tracker_answers(address: str, timeout: float = 3.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
        return True
    except (OSError, ValueError):
        return False


def toolchains(which: Callable[[str], str | None] = shutil.which) -> dict[str, str | None]:
    """The compilers modelbuild can use, and where each is (None: not on the path)."""
    names = ["gcc", *(compiler for compiler, _ in CROSS.values()), "nvcc"]
    return {name: which(name) for name in names}
