"""Where a built library spends its time, kernel by kernel: to compare an int8 build with its fp32 build.

Relax's VirtualMachine has no profiler in TVM 0.27; its instrument hook is called before and after every
call the VM makes, so each kernel's wall time is read around it (the hook's own Python cost is included,
a microsecond or two per call: compare builds, not absolute numbers). Kernels are grouped by kind (VNNI
conv, other conv, matmul, the rest by their first fused op) and summed per inference, medians over runs.

Usage: python bench/kernel_times.py LIBRARY.so [LIBRARY2.so ...] --shape N,C,H,W [--runs N] [--top K] [--threads T]
  e.g. python bench/kernel_times.py build/text_cls/x86/model.so build/text_cls+int8/x86/model.so \
       --shape 1,3,48,192
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import time

import numpy as np


def kind(name: str) -> str:
    if "vnni" in name:
        return "conv (VNNI)"
    if "conv2d_int8" in name:
        return "conv (int8, float accumulation)"
    if "conv2d" in name:
        return "conv"
    if "matmul" in name or "dense" in name:
        return "matmul"
    if name.startswith("vm.builtin") or "alloc" in name:
        return "runtime"
    ops = name.removeprefix("fused_").split("_")
    return re.sub(r"\d+$", "", ops[0])


def kernel_times(path: str, shape: list[int], runs: int) -> dict[str, list[float]]:
    """Per kernel name, its total seconds in each run."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(path), tvm.cpu())
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal(shape).astype("float32"))
    for _ in range(5):
        vm["main"](x)
    per_run: list[collections.Counter] = []
    started: list[float] = []

    def instrument(func, name, before, ret, *args):
        if before:
            started.append(time.perf_counter())
        else:
            per_run[-1][name] += time.perf_counter() - started.pop()
        return 0

    vm.set_instrument(instrument)
    for _ in range(runs):
        per_run.append(collections.Counter())
        vm["main"](x)
    names = set().union(*per_run)
    return {name: [run[name] for run in per_run] for name in names}


def report(path: str, times: dict[str, list[float]], top: int) -> None:
    groups: dict[str, float] = collections.defaultdict(float)
    counts: collections.Counter = collections.Counter()
    for name, seconds in times.items():
        groups[kind(name)] += float(np.median(seconds))
        counts[kind(name)] += 1
    print(f"\n{path}: {sum(groups.values()) * 1e6:.0f} us per inference in kernels and runtime calls")
    for group, seconds in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"  {group:<34} {counts[group]:4d} functions {seconds * 1e6:9.1f} us")
    for name, seconds in sorted(times.items(), key=lambda kv: -np.median(kv[1]))[:top]:
        print(f"    {np.median(seconds) * 1e6:8.1f} us  {name[:110]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("libraries", nargs="+")
    parser.add_argument("--shape", required=True, help="the input's shape, e.g. 1,3,48,192")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--top", type=int, default=8, help="the slowest kernels to list by name")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    shape = [int(v) for v in args.shape.split(",")]
    for path in args.libraries:
        report(path, kernel_times(path, shape, args.runs), args.top)


if __name__ == "__main__":
    main()
