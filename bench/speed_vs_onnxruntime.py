"""Latency of modelbuild's libraries against onnxruntime's CPU provider, on both bundled models.

Builds each model with modelbuild (the fused default, the stock unfused build, and, with --trials or
--records, a tuned build), then times every library and an onnxruntime session with the same thread count,
alternating blocks of runs in one process so that machine noise hits all alike. Prints medians and the ratio of each
to onnxruntime (goals from issue 6: untuned <= 3x, tuned <= 1.0x).

Usage: python bench/speed_vs_onnxruntime.py [--threads 2] [--trials N] [--tasks K] [--records FILE]
       [--export FILE] [--seconds S]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import alternate  # a sibling script: one way to time two runtimes side by side

REPO = Path(__file__).resolve().parents[1]
MODELS = {
    "text_cls": ("text_direction_cls.onnx", [1, 3, 48, 192]),
    "text_det": ("text_det.onnx", [1, 3, 640, 640]),
}


def recipe(threads: int, tuned: str | None) -> str:
    lines = []
    for name, (file, shape) in MODELS.items():
        lines += [f"[models.{name}]", f'path = "{REPO / "models" / file}"', f"inputs.x = {{ shape = {shape} }}", ""]
    lines += [
        "[targets.cpu]",
        'kind = "llvm"',
        'mcpu = "host"',
        f"num-cores = {threads}",
        "",
        "[validation]",
        "enabled = false",
        "",
    ]
    if tuned:
        lines += ["[tuning.bench]", tuned, ""]
    for name in MODELS:
        lines += ["[[builds]]", f'model = "{name}"', 'targets = ["cpu"]', ""]
    return "\n".join(lines)


def build(folder: Path, text: str, variant: str, fuse: bool, tuning: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if not fuse:  # the stock build: what tvm.compile gives, unfused and unscheduled
        text = text.replace('targets = ["cpu"]', 'targets = ["cpu"]\nfuse = false\nschedule = "none"')
    if tuning:
        text = text.replace('targets = ["cpu"]', 'targets = ["cpu"]\ntuning = "bench"')
    (folder / "deploy.toml").write_text(text)
    print(f"building {variant} ...", flush=True)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "modelbuild",
            "-f",
            str(folder / "deploy.toml"),
            "-j",
            "1",
            "--cache-dir",
            str(folder.parent / "cache"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stdout + proc.stderr)


def export(folder: Path, path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "modelbuild",
            "tune",
            "export",
            str(path),
            "-f",
            str(folder / "deploy.toml"),
            "--cache-dir",
            str(folder.parent / "cache"),
        ],
        check=True,
    )


def tuning_line(folder: Path, model: str) -> str:
    """What the tuned build's report says of its tuning: the budget behind the tuned latency."""
    report = json.loads((folder / "build/report.json").read_text())
    t = next(b["tuning"] for b in report["builds"] if b["model"] == model)
    return (
        f"tuned schedules on {t['tuned_tasks']} of {t['tasks']} kernels; {t['trials_total']} trials in the "
        f"database for this model, {t['trials_measured_now']} measured by this build"
    )


def runners(folders: dict[str, Path], model: str, threads: int):
    import numpy as np
    import onnxruntime as ort
    import tvm
    from tvm import relax

    file, shape = MODELS[model]
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(REPO / "models" / file), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    out = {"onnxruntime": lambda: session.run(None, {name: x})}
    for variant, folder in folders.items():
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(folder / f"build/{model}/cpu/model.so")), tvm.cpu())
        xt = tvm.runtime.tensor(x)
        out[variant] = lambda vm=vm, xt=xt: vm["main"](xt)
    return out


def measure(fns: dict, seconds: float) -> dict[str, float]:
    """Median seconds of each function, in alternating blocks of runs (zoo.alternate: a block after a pause,
    so neither runtime's spinning threads slow the other)."""
    return alternate(fns, seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trials", type=int, help="tune with this many trials per task")
    parser.add_argument("--tasks", type=int, help="with --trials: search only the N slowest tasks per model")
    parser.add_argument("--records", type=Path, help="a `modelbuild tune export` file to build with (0 trials)")
    parser.add_argument("--export", type=Path, help="with --trials: write the tuning records here, to commit")
    parser.add_argument("--seconds", type=float, default=3.0, help="time spent on each library per model")
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    tuned = None
    if args.records or args.trials:  # records alone: zero trials, what a fresh clone with committed records does
        tuned = "\n".join(
            [
                *([f'records = "{args.records.resolve()}"'] if args.records else []),
                f"trials_per_task = {args.trials or 0}",
                *([f"tasks = {args.tasks}"] if args.tasks else []),
            ]
        )
    with tempfile.TemporaryDirectory(prefix="modelbuild-bench-") as tmp:
        root = Path(tmp)
        folders = {
            "modelbuild default (untuned)": (root / "fused", True, False),
            "stock tvm.compile": (root / "stock", False, False),
        }
        if tuned:
            budget = ", ".join(
                [
                    *(["records"] if args.records else []),
                    *([f"{args.trials} trials/task"] if args.trials else []),
                    *([f"{args.tasks} slowest tasks"] if args.tasks else []),
                ]
            )
            folders[f"modelbuild tuned ({budget})"] = (root / "tuned", True, True)
        text = recipe(args.threads, tuned)
        for variant, (folder, fuse, tuning) in folders.items():
            build(folder, text, variant, fuse, tuning)
        if args.export and tuned:
            export(root / "tuned", args.export.resolve())
        print(f"\nthreads {args.threads}; medians of alternating runs; ratio = latency / onnxruntime's")
        for model in MODELS:
            results = measure(runners({k: v[0] for k, v in folders.items()}, model, args.threads), args.seconds)
            base = results["onnxruntime"]
            print(f"\n{model}")
            for variant, seconds in results.items():
                print(f"  {variant:<40} {seconds * 1000:10.2f} ms   {seconds / base:6.2f}x")
            if tuned:
                print(f"  {tuning_line(root / 'tuned', model)}")
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
