"""Where a built library spends its time, kernel by kernel: to compare an int8 build with its fp32 build.

Libraries are compiled with the VM's instructions as native code (EXEC_MODE "compiled"), which has no hook
to time a kernel from inside a run (a bytecode build with the VM's instrument hook is no substitute: waking
the thread pool after every Python callback made the detector's kernels sum to 2.5x its real latency). So
every kernel of the library is timed alone, as the roofline times the heaviest ones: its argument shapes and
call counts come from lowering the stage's input IR (the import or quantize stage's ir.json, found in the
cache by node name) with modelbuild's own pipeline, which names the kernels as the compile stage did; a
reshape that the library runs as a view of its input is no kernel and is not timed.
Kernels are grouped by kind (AMX or VNNI conv, other conv, matmul, the rest by their first fused op) and
summed per inference; a kernel alone runs with warm caches, so the sum is a little under the library's
latency.

With --pair and two builds, a float one then an int8 one, every conv of the second is printed beside the
fastest conv of the first with the same geometry (channels, sizes, kernel; a depthwise conv by its kernel
rows and groups of four kernel columns, all the int8 kernel's packed taps say: 5x5 and 7x7 look alike), both
per inference: which int8 kernels gain least over float.

Usage: python bench/kernel_times.py --build LIBRARY NODE [--build LIBRARY NODE ...] [--cache .cache]
                                    [--top K] [--threads T] [--pair]
  e.g. python bench/kernel_times.py --build build/text_det/cpu/model.so import:text_det \
       --build build/text_det+int8/cpu/model.so quantize:text_det+int8@cpu
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # modelbuild, when run from a checkout


def kind(name: str) -> str:
    if "conv2d_amx" in name:
        return "conv (AMX)"
    if "vnni" in name:
        return "matmul (VNNI)" if "matmul" in name else "conv (VNNI)"
    if "avx2" in name:
        return "matmul (AVX2)" if "matmul" in name else "conv (AVX2)"
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


def stage_ir(cache: Path, node: str) -> Path:
    """The ir.json that the latest cached run of an import or quantize node wrote: a store keeps every
    version of a node, and an older one names other kernels than the library just built."""
    runs = [
        action
        for entry in (cache / "actions").glob("*/*.json")
        if (action := json.loads(entry.read_text())).get("node") == node and "ir.json" in action.get("outputs", {})
    ]
    if not runs:
        raise SystemExit(
            f"{cache}: no cached ir.json for node {node!r}; build it first (names as in `modelbuild status`)"
        )
    digest = max(runs, key=lambda action: action.get("created", 0))["outputs"]["ir.json"]
    return next((cache / "objects").glob(f"{digest[:2]}/{digest}*"))


def kernels_of(ir: Path) -> tuple[collections.Counter, dict[str, list]]:
    """Calls per inference and argument shapes of every kernel, lowered as the compile stage lowers it for
    this machine (fused, channels-last where it helps, the default schedule)."""
    import tvm
    from tvm.target import codegen

    from modelbuild.compiler import lowering
    from modelbuild.recipe.targets import host_extensions, host_features

    module = tvm.ir.load_json(ir.read_text())
    cpu = codegen.llvm_get_system_cpu()
    # as `mcpu = "host"` resolves: with the AMX extensions LLVM's CPU name may leave out and without the
    # vector extensions a VM hides, else the int8 convs lower to kernels whose names the library does not have
    target = tvm.target.Target({"kind": "llvm", "mcpu": cpu, "mattr": host_extensions(cpu, host_features())})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, target, fuse=True, layout="auto", schedule=True)
    calls = collections.Counter(call.kernel for call in lowering.launched_kernel_calls(phases.fused))
    # every PrimFunc's parameters carry their shape and dtype (lowering's own table leaves out the kernels
    # TVM cannot estimate FLOPs for, which are the int8 ones)
    args = {
        gv.name_hint: [[[int(d) for d in p.shape], str(p.dtype)] for p in func.params]
        for gv, func in phases.fused.functions.items()
        if isinstance(func, tvm.tirx.PrimFunc)
    }
    return calls, args


def kernel_times(library: str, ir: Path) -> dict[str, float]:
    """Per kernel name, its seconds per inference (one call's median time the calls it gets)."""
    return timed_kernels(library, ir)[0]


def timed_kernels(library: str, ir: Path):
    """(per kernel name its seconds per inference, its calls per inference, its argument shapes)."""
    import tvm

    from modelbuild.measurement.measure import time_kernel

    calls, args = kernels_of(ir)
    module = tvm.runtime.load_module(library).imports[0]
    times = {}
    for name, count in calls.items():
        seconds = time_kernel(module, {"kernel": name, "args": args[name]}) if name in args else None
        if seconds is None:
            print(f"  (not timed: {name})")
            continue
        times[name] = seconds * count
    return times, calls, args


def conv_geometry(name: str, args: list) -> tuple | None:
    """(in channels, height, width, out channels, out height, out width, kernel h, kernel w) of a conv kernel,
    float (NHWC with HWIO weights, or NCHW with OIHW) or packed int8 ([O/lanes, C/group, KH, KW, lanes, group]
    weights); ("depthwise", channels, height, width, out height, out width, kernel h, groups of 4 kernel columns)
    for a depthwise one (the int8 kernel's packed taps say no more); else None."""
    if "conv2d" not in name or len(args) < 3:
        return None
    data, weight, out = args[0][0], args[1][0], args[-1][0]
    if len(data) != 4 or len(out) != 4:
        return None
    if "vnni_depthwise" in name:  # weights [C, KH, groups of 4 taps, 4]
        if len(weight) != 4:
            return None
        return ("depthwise", data[1], data[2], data[3], out[2], out[3], weight[1], weight[2])
    if "vnni" in name or "avx2" in name or "conv2d_amx" in name:
        if len(weight) not in (6, 7):  # [O/lanes, C/group, KH, KW, lanes, group]; AMX's groups a step more
            return None
        return pointwise_by_pixels((data[1], data[2], data[3], out[1], out[2], out[3], weight[2], weight[3]))
    if len(weight) != 4:
        return None
    if out[3] == weight[3]:  # NHWC, HWIO
        channels, height, width, kernel, per_group = data[3], data[1], data[2], weight[:2], weight[2]
        out_channels, out_size = out[3], out[1:3]
    else:  # NCHW, OIHW
        channels, height, width, kernel, per_group = data[1], data[2], data[3], weight[2:], weight[1]
        out_channels, out_size = out[1], out[2:]
    if per_group == 1 and channels == out_channels > 1:
        return ("depthwise", channels, height, width, *out_size, kernel[0], -(-kernel[1] // 4))
    return pointwise_by_pixels((channels, height, width, out_channels, *out_size, *kernel))


def pointwise_by_pixels(geometry: tuple) -> tuple:
    """A 1x1 conv of stride 1 by its pixel count rather than its rows: an int8 one may compute the same
    pixels as other rows (compiler/passes/pixel_rows.py), 50 x 38 as 2 x 950."""
    channels, height, width, out_channels, out_h, out_w, kh, kw = geometry
    if (kh, kw) == (1, 1) and (height, width) == (out_h, out_w):
        return (channels, height * width, out_channels, "1x1 pixels")
    return geometry


def report_pairs(float_build, int8_build, top: int) -> None:
    """Each int8 conv beside the fastest float conv of its geometry, per inference at the int8 kernel's
    call count."""
    (float_times, float_calls, float_args), (int8_times, int8_calls, int8_args) = float_build, int8_build
    fastest: dict[tuple, float] = {}
    for name, seconds in float_times.items():
        geometry = conv_geometry(name, float_args[name])
        if geometry is not None:
            per_call = seconds / float_calls[name]
            fastest[geometry] = min(per_call, fastest.get(geometry, per_call))
    rows = []
    for name, seconds in int8_times.items():
        geometry = conv_geometry(name, int8_args[name])
        if geometry is not None:
            sibling = fastest.get(geometry)
            rows.append((seconds, None if sibling is None else sibling * int8_calls[name], geometry, name))
    paired = [row for row in rows if row[1] is not None]
    print(
        f"\nconvs paired by geometry: int8 {sum(r[0] for r in paired) * 1e6:.0f} us, float "
        f"{sum(r[1] for r in paired) * 1e6:.0f} us ({len(paired)} of {len(rows)} int8 convs)"
    )
    for seconds, sibling, geometry, name in sorted(rows, key=lambda row: -row[0])[:top]:
        against = f"{sibling * 1e6:8.1f} us  {seconds / sibling:4.2f}x" if sibling else f"{'-':>11}  {'-':>5}"
        print(f"    {seconds * 1e6:8.1f} us {against}  {geometry}  {name[:60]}")


def report(library: str, times: dict[str, float], top: int) -> None:
    groups: dict[str, float] = collections.defaultdict(float)
    counts: collections.Counter = collections.Counter()
    for name, seconds in times.items():
        groups[kind(name)] += seconds
        counts[kind(name)] += 1
    print(f"\n{library}: {sum(groups.values()) * 1e6:.0f} us per inference in its kernels, each timed alone")
    for group, seconds in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"  {group:<34} {counts[group]:4d} functions {seconds * 1e6:9.1f} us")
    for name, seconds in sorted(times.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {seconds * 1e6:8.1f} us  {name[:110]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--build",
        nargs=2,
        action="append",
        required=True,
        metavar=("LIBRARY", "NODE"),
        help="a library and the import or quantize node it was compiled from",
    )
    parser.add_argument("--cache", type=Path, default=Path(".cache"))
    parser.add_argument("--top", type=int, default=8, help="the slowest kernels to list by name")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pair", action="store_true", help="two builds, float then int8: convs side by side")
    args = parser.parse_args()
    if args.pair and len(args.build) != 2:
        parser.error("--pair takes two --build: the float one, then the int8 one")
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    builds = []
    for library, node in args.build:
        builds.append(timed_kernels(library, stage_ir(args.cache, node)))
        report(library, builds[-1][0], args.top)
    if args.pair:
        report_pairs(*builds, args.top)


if __name__ == "__main__":
    main()
