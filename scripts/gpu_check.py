"""The checks only a GPU can make, prepared to run in one go (a few minutes) wherever a GPU machine is lent.

On a machine without a GPU (CI, a laptop):
    python scripts/gpu_check.py build OUT
builds the GPU example (recipes/examples/x86-and-gpu.toml) into OUT/build: its cuda library carries its
kernels, compiled here. Copy OUT to the GPU machine (with modelbuild installed there, the `cuda` extra not
needed), then:
    python scripts/gpu_check.py run OUT
1. loads OUT's cuda library through modelbuild.runtime in a process where no CUDA compiler can run (NVRTC's
   binding made unimportable, no nvcc on the path), runs it on random inputs and compares its output with
   onnxruntime's on the CPU (cosine >= 0.9999), and says how its kernels were loaded;
2. builds and validates the same example there with `modelbuild build`, and prints the gates, p50 and p99 of
   its GPU build and of its build split between the GPU and the CPU, beside the CPU build's p50.
Each check prints one line, `PASS name: detail` or `FAIL name: detail`; the exit code is the number failed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "recipes/examples/x86-and-gpu.toml"
MODEL = REPO / "models/text_direction_cls.onnx"
GPU_BUILD = "text_cls/cuda-sm80"
GPU_TARGETS = ("cuda-sm80", "cuda-sm80-with-cpu")  # the GPU alone, and split with the CPU

# run in a fresh process: a cuda library loaded where neither NVRTC nor nvcc can run
LOAD_WITHOUT_A_COMPILER = """
import json, sys
sys.modules["cuda"] = sys.modules["cuda.bindings"] = None  # NVRTC's binding: importing it now fails
import numpy as np, onnxruntime as ort
from modelbuild import cuda_binaries
from modelbuild.runtime import Library
x = np.random.default_rng(0).standard_normal((1, 3, 48, 192)).astype("float32")
ours = np.asarray(Library(sys.argv[1])(x)).ravel()
theirs = ort.InferenceSession(sys.argv[2], providers=["CPUExecutionProvider"]).run(None, {"x": x})[0].ravel()
cosine = float(ours @ theirs / (np.linalg.norm(ours) * np.linalg.norm(theirs)))
print(json.dumps({"cosine": cosine, "loaded": cuda_binaries.loaded}))
"""


def build(out: Path) -> int:
    """The example built here into out/build, its store in out/cache; the exit code of `modelbuild build`."""
    command = ["build", "-f", str(EXAMPLE), "--build-dir", str(out / "build"), "--cache-dir", str(out / "cache")]
    return subprocess.run([sys.executable, "-m", "modelbuild", *command]).returncode


def loads_without_a_compiler(out: Path) -> tuple[bool, str]:
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if not shutil.which("nvcc", path=p))
    env = {**os.environ, "PATH": path, "CUDA_PATH": str(out / "no-cuda-toolkit")}
    done = subprocess.run(
        [sys.executable, "-c", LOAD_WITHOUT_A_COMPILER, str(out / "build" / GPU_BUILD), str(MODEL)],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        return False, (done.stderr.strip().splitlines() or ["no output"])[-1]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    prebuilt = bool(found["loaded"]) and all(said.startswith("prebuilt ") for said in found["loaded"])
    return prebuilt and found["cosine"] >= 0.9999, f"cosine {found['cosine']:.6f}, kernels {found['loaded']}"


def validated_here(out: Path) -> tuple[bool, str]:
    here = out / "on-gpu"
    code = build(here)
    if not (here / "build/report.json").is_file():
        return False, f"modelbuild build exited {code} with no report (its output is above)"
    builds = {b["target"]: b for b in json.loads((here / "build/report.json").read_text())["builds"]}
    passed, details = True, []
    for target in GPU_TARGETS:
        gpu = builds[target]
        if not gpu["validation"].get("ran"):
            passed, details = False, [*details, f"{target} not run: {gpu['validation'].get('reason')}"]
            continue
        latency, machine = gpu["latency_ms"], gpu["provenance"]["machine"]
        cosine = min(output["cosine"] for output in gpu["accuracy"].values())
        details.append(
            f"{target} on {machine.get('gpu')}: gates {'passed' if gpu['passed'] else 'FAILED'}, "
            f"p50 {latency['median']:.3f} ms, p99 {latency['p99']:.3f} ms, cosine {cosine:.6f}, "
            f"kernels {machine.get('cuda_kernels')}"
        )
        passed = passed and bool(gpu["passed"])
    cpu = builds.get("x86", {}).get("latency_ms")
    return passed, "; ".join(details) + (f"; x86 p50 {cpu['median']:.3f} ms" if cpu else "")


def run(out: Path) -> int:
    failed = 0
    for name, check in (("loads-without-a-compiler", loads_without_a_compiler), ("validated-here", validated_here)):
        ok, detail = check(out)
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
        failed += not ok
    return failed


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("build", "run"):
        sys.exit(__doc__)
    sys.exit((build if sys.argv[1] == "build" else run)(Path(sys.argv[2]).resolve()))
