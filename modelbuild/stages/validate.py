"""The validate stage: run the built library on the golden inputs and time it, in a fresh process.

The measurement runs in a subprocess of its own (measure.py) so that its peak resident memory and its
threads are its alone, not those of a worker that ran other stages before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from modelbuild.errors import StageEnvironmentError, StageError, last_line
from modelbuild.measurement.device import DEVICE_UNAVAILABLE
from modelbuild.recipe.params import ValidateParams
from modelbuild.stages import contracts
from modelbuild.stages.contracts import Role
from modelbuild.validation import metrics


def run(*, inputs: dict[str, Path], params: dict, out: Path) -> None:
    """Write metrics.json: accuracy per output, timing, artifact size, peak memory, machine; or why not run."""
    p: ValidateParams = contracts.read_params(contracts.VALIDATE, params)
    if not p.runs_here:
        _write(out, {"ran": False, "reason": p.reason})
        return
    timing = p.timing.model_dump(exclude={"threads", "scaling", "roofline", "beside_float"})  # what measure.py times by
    # a device's threads and peaks are its own, and a GPU's kernels are not the CPU's: the scaling curve and
    # the roofline are measured for this CPU only
    on_cpu = not (p.device or p.gpu)
    measured = _measure(
        inputs,
        timing,
        p.threads,
        out,
        roofline=p.timing.roofline and on_cpu,
        device=p.device,
        gpu=p.gpu,
        split=_split(inputs) if p.devices else "",
    )
    if p.timing.processes > 1:  # more processes, timing only: the variation between them is part of the noise
        again = [
            _measure(
                inputs,
                {**timing, "latency_only": True},
                p.threads,
                out,
                device=p.device,
                gpu=p.gpu,
                split=_split(inputs) if p.devices else "",
            )
            for _ in range(p.timing.processes - 1)
        ]
        for timed in TIMED:
            if timed in measured:
                measured[timed] = metrics.merge_blocks([measured[timed], *(a[timed] for a in again)])
        for busy in ("others_cpu", "throttled"):  # the worst process's: its runs are in the merged samples
            shares = [m[busy] for m in (measured, *again) if m.get(busy) is not None]
            measured[busy] = max(shares, default=None)
    measured.update(ran=True, artifact_bytes=inputs[Role.LIBRARY].stat().st_size, threads=p.threads)
    if p.timing.scaling and p.threads > 1 and on_cpu:
        measured["scaling"] = _scaling(inputs, p.timing.max_seconds, p.threads, out)
    _write(out, measured)


# this library's runs, and the other library's timed in turns with it: the baseline's (baseline.timed_together)
# or the float build's (timing.beside_float)
TIMED = ("latency_ms", "baseline_latency_ms", "float_latency_ms")

# Each thread count of the scaling curve gets a short run: it shows the shape, not a gate-grade figure.
SCALING_TIMING = {"warmup": 3, "min_runs": 20, "min_seconds": 0.2, "latency_only": True}


def _scaling(inputs: dict[str, Path], max_seconds: float, threads: int, out: Path) -> dict:
    counts = list(range(1, threads + 1))
    # the whole curve shares the recipe's time bound
    bounded = {**SCALING_TIMING, "max_seconds": max_seconds / len(counts)}
    runs = [_measure(inputs, bounded, p, out, scaling=True)["latency_ms"] for p in counts]
    return metrics.scaling_summary(counts, [r["median"] for r in runs], [r["cv"] for r in runs])


def _measure(
    inputs: dict[str, Path],
    timing: dict,
    threads: int,
    out: Path,
    roofline: bool = False,
    device: dict | None = None,
    scaling: bool = False,
    gpu: bool = False,
    split: str = "",
) -> dict:
    """Run measure.py in a fresh process with `threads` runtime threads (on `device` over RPC where given, on
    this machine's first GPU with `gpu`); its JSON result."""
    result = out / "measured.json"
    beside = inputs.get(Role.BASELINE_LIBRARY) or inputs.get(Role.FLOAT_LIBRARY)  # the plan gives one at most
    env = {**os.environ, "TVM_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "modelbuild.measurement.measure",
            str(inputs[Role.LIBRARY]),
            str(inputs[Role.GOLDEN]),
            str(inputs[Role.SIGNATURE]),
            json.dumps(timing),
            str(result),
            *(["--analysis", str(inputs[Role.ANALYSIS])] if roofline and Role.ANALYSIS in inputs else []),
            *(
                ["--qdq", str(inputs[Role.GOLDEN_QDQ])]
                if Role.GOLDEN_QDQ in inputs and not timing.get("latency_only")
                else []
            ),
            *(["--device", json.dumps(device)] if device else []),
            *(["--gpu"] if gpu else []),
            *(["--split", split] if gpu and split else []),
            *(["--baseline", str(beside)] if beside and not scaling else []),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    sys.stdout.write(proc.stdout), sys.stderr.write(proc.stderr)
    if proc.returncode == DEVICE_UNAVAILABLE:  # measure.py's own one-line reason: the environment's, not ours
        raise StageEnvironmentError(last_line(proc.stderr or "the device could not be reached"))
    if proc.returncode != 0:
        raise StageError(
            f"running the library failed (exit {proc.returncode}): {last_line(proc.stderr or 'no output')}"
        )
    measured = json.loads(result.read_text())
    result.unlink()
    if Role.FLOAT_LIBRARY in inputs and "baseline_latency_ms" in measured:
        measured["float_latency_ms"] = measured.pop("baseline_latency_ms")
    return measured


def _split(inputs: dict[str, Path]) -> str:
    """A split library's devices in its VM's order, as the compile stage placed its weights (analysis.json)."""
    placement = json.loads(inputs[Role.ANALYSIS].read_text()).get("placement") or {}
    return ",".join(placement.get("vm_devices") or ["cuda", "llvm"])


def _write(out: Path, metrics: dict) -> None:
    # keys unsorted: accuracy lists the outputs in the model's graph order, as the report shows them
    (out / contracts.METRICS).write_text(json.dumps(metrics, indent=1))
