"""Runs a TVM library on golden inputs and times it; called by the validate stage as a fresh process.

usage: python -m modelbuild.measurement.measure LIBRARY GOLDEN.npz SIGNATURE.json TIMING_JSON OUT.json
                                         [--analysis ANALYSIS.json] [--qdq GOLDEN_QDQ.npz]
                                         [--device DEVICE_JSON | --gpu] [--baseline BASELINE_LIBRARY]
"""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from modelbuild import cuda_binaries, signature
from modelbuild.compiler import analysis  # the roofline of the kernels it times
from modelbuild.errors import last_line
from modelbuild.host.cgroup import cpu_quota, throttled_seconds
from modelbuild.host.gpus import NVRTC_PACKAGES
from modelbuild.host.nvrtc import toolkit_environment
from modelbuild.measurement import device as remote
from modelbuild.measurement import peak
from modelbuild.recipe.targets import host_machine, validating_machine
from modelbuild.validation import metrics
from modelbuild.validation.golden import feedback as fed_back_inputs


def main(
    library: str,
    golden_path: str,
    signature_path: str,
    timing_json: str,
    out_path: str,
    analysis_path: str = "",
    qdq_path: str = "",
    device_json: str = "",
    baseline: str = "",
    gpu: bool = False,
    split: str = "",
) -> None:
    timing = json.loads(timing_json)
    tensors = signature.read(Path(signature_path))
    golden = dict(np.load(golden_path))
    input_names, output_names = list(tensors.inputs), list(tensors.outputs)  # the library's argument order
    count = len(golden[f"in.{input_names[0]}"])

    import tvm  # noqa: F401  (importing the Python package is not part of loading the library)

    device = json.loads(device_json) if device_json else None
    started = time.perf_counter()
    if device:
        run, timer, described = remote.load(library, device, baseline or None)
    elif gpu:
        (run, timer), described = _on_gpu(library, baseline or None, split), {}
    else:
        run, timer, described = _load(library), None, {}
    first = run(inputs_of(golden, input_names, 0))
    cold_ms = (time.perf_counter() - started) * 1000

    actual = outputs_over_stream(run, golden, tensors, count, first)
    scores = {name: not spec.get("features") for name, spec in tensors.outputs.items()}
    accuracy = {name: _accuracy(np.stack(actual[name]), golden[f"out.{name}"], scores[name]) for name in output_names}
    if qdq_path:  # an int8 build: also against onnxruntime's own quantized model on the same inputs
        qdq = dict(np.load(qdq_path))
        accuracy_vs_qdq = {
            name: _accuracy(np.stack(actual[name]), qdq[f"out.{name}"], scores[name]) for name in output_names
        }

    arrays = inputs_of(golden, input_names, 0)
    together = None
    clock = cpu_clock()
    if baseline:  # on a device or a GPU, the timer runs the two in turns there
        latencies, together = (
            timer(arrays, **timing) if timer else _time_together(run, _load(baseline), arrays, **timing)
        )
    else:
        latencies = timer(arrays, **timing) if timer else metrics.time_calls(lambda: run(arrays), **timing)
    after = cpu_clock() if clock and not device else None  # a device's CPUs are not this machine's
    others = metrics.others_share(clock, after) if after else None
    throttled = metrics.throttled_share(clock, after) if after else None
    kernels = json.loads(Path(analysis_path).read_text()).get("kernels") if analysis_path else None
    result = {
        "roofline": _roofline(library, kernels) if kernels else None,
        "accuracy": accuracy,
        **({"accuracy_vs_qdq": accuracy_vs_qdq} if qdq_path else {}),
        "cold_ms": cold_ms,
        "latency_ms": metrics.timing_summary(latencies),
        **({"baseline_latency_ms": metrics.timing_summary(together)} if together else {}),
        "others_cpu": others,
        "throttled": throttled,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "machine": (
            {"device": device["key"], "tracker": device["tracker"], "via": "rpc", **described}
            if device
            else _this_machine(gpu)
        ),
        "samples": count,
    }
    Path(out_path).write_text(json.dumps(result))


def inputs_of(golden: dict, names: list[str], i: int) -> list[np.ndarray]:
    """Golden sample i's inputs in argument order; `...` keeps a scalar input a 0-d array (golden.sample)."""
    return [golden[f"in.{n}"][i, ...] for n in names]


def outputs_over_stream(run, golden: dict, tensors, count: int, first: list | None = None) -> dict[str, list]:
    """The library's outputs on every golden sample, in order. An input with feedback (a streaming state)
    is fed the library's own previous output, not the golden one: the stream runs as onnxruntime's did,
    so a state drifting from onnxruntime's shows in the later samples' accuracy."""
    names, outputs = list(tensors.inputs), list(tensors.outputs)
    fed_back = fed_back_inputs(tensors.inputs)
    actual: dict[str, list] = {name: [] for name in outputs}
    for i in range(count):
        arguments = inputs_of(golden, names, i)
        if i:
            arguments = [np.asarray(actual[fed_back[n]][-1]) if n in fed_back else a for n, a in zip(names, arguments)]
        results = first if i == 0 and first is not None else run(arguments)
        for name, value in zip(outputs, results):
            actual[name].append(value)
    return actual


def _load(library: str):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(library), tvm.cpu())
    main_fn = vm["main"]

    def run(arrays):
        result = main_fn(*[tvm.runtime.tensor(a) for a in arrays])
        values = [result] if hasattr(result, "numpy") else list(result)
        return [v.numpy() for v in values]

    return run


def _this_machine(gpu: bool) -> dict:
    """The CPU (and the GPU it ran on) as reports show them, with the cgroup's CPU quota where there is one:
    a quota below the library's threads stalls it (host/cgroup.py)."""
    quota = cpu_quota()
    machine = validating_machine({"kind": "cuda"}) if gpu else host_machine()
    if gpu:  # how the library's kernels reached the GPU: carried by it, or compiled here
        machine = {**machine, "cuda_kernels": cuda_binaries.loaded[0] if cuda_binaries.loaded else None}
    return {**machine, "cpu_quota": quota} if quota is not None else machine


def _on_gpu(library: str, baseline: str | None, split: str = ""):
    """(run, timer) for a cuda library on this machine's first GPU (with `split`, "cuda,llvm" or "llvm,cuda"
    in the VM's order, on it and this CPU, its inputs given on the CPU): loaded with the kernels it carries
    (cuda_binaries), its CUDA C compiled here by NVRTC only where it carries none; the timer is the GPU's own
    clock (with a baseline, the two timed in turns)."""
    import tvm
    from tvm import relax

    os.environ.update(toolkit_environment(dict(os.environ), sys.path, shutil.which("nvcc")))
    cuda_binaries.install_loader()
    dev = tvm.cuda(0)
    devices = [dev if kind == "cuda" else tvm.cpu() for kind in split.split(",")] if split else dev
    try:
        vm, other = (
            relax.VirtualMachine(tvm.runtime.load_module(path), devices) if path else None
            for path in (library, baseline)
        )
    except Exception as err:  # noqa: BLE001  (TVM raises its own types; the NVRTC one names its package)
        said = last_line(err)
        if "cuda-bindings" in str(err) or "nvrtc" in said.lower() or "Cannot find CUDA" in str(err):
            raise remote.DeviceUnavailable(
                f"the GPU cannot load the cuda library: {said} (fix: {NVRTC_PACKAGES})"
            ) from None
        raise
    inputs_on = tvm.cpu() if split else dev
    timer, together = remote.clocked_on_device(vm, dev, other=other, inputs_on=inputs_on)
    return remote.vm_runner(vm, inputs_on), together or timer


def cpu_clock(stat: Path = Path("/proc/stat")) -> metrics.CpuClock | None:
    """Now, for metrics.others_share and throttled_share; None where the kernel's CPU counters cannot be read
    (not Linux)."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    allowed = {f"cpu{i}" for i in os.sched_getaffinity(0)}
    busy = 0
    for fields in (line.split() for line in lines):
        if fields and fields[0] in allowed:
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
            busy += user + nice + system + irq + softirq + steal  # guest time is in user already
    times = os.times()
    ticks = os.sysconf("SC_CLK_TCK")
    return metrics.CpuClock(
        cpus_busy=busy / ticks,
        own=times.user + times.system,
        wall=time.monotonic(),
        cpus=len(allowed),
        throttled=throttled_seconds(),
    )


def _roofline(library: str, kernels: list[dict]) -> dict:
    """Time the heaviest kernels one by one, and the machine's peaks on the library's threads, for a
    roofline: its compute roof the FMA loop's, its memory roof a large copy's, and BLAS's sgemm beside them."""
    import tvm

    module = tvm.runtime.load_module(library).imports[0]  # the kernels live in the library's host module
    seconds = {k["kernel"]: time_kernel(module, k) for k in kernels}
    threads = int(os.environ.get("TVM_NUM_THREADS") or os.cpu_count() or 1)
    roof = analysis.roofline(
        kernels, {k: s for k, s in seconds.items() if s}, peak.fma_flops(threads), peak.copy_bytes()
    )
    return {**roof, "blas_flops_per_s": peak.sgemm_flops()}


def time_kernel(module, kernel: dict) -> float | None:
    """Seconds of one call of a kernel of the library's host module, on random inputs of its argument shapes
    (an entry of analysis.json's "kernels"); None where the library names it differently."""
    import tvm

    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(_argument(shape, dtype, rng)) for shape, dtype in kernel["args"]]
    try:
        timer = module.time_evaluator(kernel["kernel"], tvm.cpu(), number=5, repeat=5, min_repeat_ms=20)
        return float(np.median(timer(*args).results))
    except Exception:  # a kernel the library names differently is left off the roofline, not fatal
        return None


def _argument(shape: list[int], dtype: str, rng) -> np.ndarray:
    """A value a kernel can be timed on: floats at random; integers zero (indices in bounds), but ones where
    the argument has one element: a constant divisor is its kernel's argument (YOLOv10's `// 80` for labels),
    and an integer division by zero kills the process (SIGFPE), which no except clause catches."""
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    return np.ones(shape, dtype) if math.prod(shape) == 1 else np.zeros(shape, dtype)


def _seconds(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _accuracy(actual: np.ndarray, expected: np.ndarray, scores: bool = True) -> dict:
    """The comparison's figures; top-1 and top-5 for class scores (not for an embedding's features)."""
    stats = metrics.compare(actual, expected)
    per_sample = expected.shape[1:]
    if scores and metrics.looks_like_class_scores(per_sample):
        stats["top1_agreement"] = metrics.topk_agreement(actual, expected, k=1)
        if per_sample[-1] > 5:
            stats["top5_agreement"] = metrics.topk_agreement(actual, expected, k=5)
    return stats


def _time_together(
    run, baseline, arrays, *, warmup: int, min_runs: int, min_seconds: float, max_seconds: float = float("inf"), **_
) -> tuple[list[float], list[float]]:
    """This library and the baseline's timed in turns (metrics.in_turns) after warming up both."""
    for _ in range(warmup):
        run(arrays), baseline(arrays)
    return metrics.in_turns(
        lambda: _seconds(lambda: run(arrays)),
        lambda: _seconds(lambda: baseline(arrays)),
        min_runs=min_runs,
        min_seconds=min_seconds,
        max_seconds=max_seconds,
    )


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    for name in ("library", "golden", "signature", "timing", "out"):
        parser.add_argument(name)
    parser.add_argument("--analysis", default="")
    parser.add_argument("--qdq", default="")
    parser.add_argument("--device", default="")
    parser.add_argument("--baseline", default="")
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--split", default="")  # with --gpu: a split library's devices, "cuda,llvm" in the VM's order
    a = parser.parse_args()
    try:
        main(a.library, a.golden, a.signature, a.timing, a.out, a.analysis, a.qdq, a.device, a.baseline, a.gpu, a.split)
    except remote.DeviceUnavailable as err:
        # the last line of stderr is what the validate stage reports (this process is its subprocess)
        sys.stderr.write(f"{err}\n")
        sys.exit(remote.DEVICE_UNAVAILABLE)
