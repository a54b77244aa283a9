"""`modelbuild search` on the bundled models: the fastest configuration that passes each model's gates on
held-out rendered text, and its latency against the fp32 library, the two timed side by side.

Each model's recipe quantizes from calibration images rendered with one seed (bench/text_images.py: lines for
the classifier, pages for the detector, the models' own preprocessing) and is gated on images of another seed
(200 lines, 16 pages): every held-out sample at cosine >= 0.99 against fp32, and top-1 100% for the classifier
(issue 21's gates). The search raises the layers the sensitivity ranking puts first to int16 or float, with
nearest or GPTQ weight rounding, calibrated by minmax, percentile or entropy, up to --candidates builds. Then
the chosen library and the fp32 library are timed in alternating blocks in this process (2 threads, untuned),
and their ratio printed against the goal.
The store is kept in bench/.search/cache, so a rerun rebuilds only what changed.

With --zoo, the same search on each conv model of the zoo (bench/zoo.py), calibrated and gated as `zoo.py
--int8` does (the int8-ci preset on held-out rendered text, its store in bench/.zoo/cache, so candidates
that build already built there are cached): issue 21's goal that every zoo model gets a passing
configuration faster than its fp32 library.

Usage: python bench/search.py [--only text_cls text_det] [--threads 2] [--seconds 3] [--candidates 30]
                              [--lines 200] [--pages 16]
       python bench/search.py --zoo [--only ZOO_MODEL ...] [--threads 2] [--seconds 3] [--candidates 30]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import text_images  # a sibling script
from zoo import alternate

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "bench" / ".search"
CALIBRATION_SEED, HELD_OUT_SEED = 1, 3  # lines; pages use the next seed of each
OCR_LINE = "{ mean = [0.5, 0.5, 0.5], std = [0.5, 0.5, 0.5] }"
IMAGENET = "{ mean = [0.485, 0.456, 0.406], std = [0.229, 0.224, 0.225] }"
MODELS = {  # file, input shape, preprocessing, the images it reads, extra gates, the goal (x fp32 latency)
    "text_cls": ("text_direction_cls.onnx", [1, 3, 48, 192], OCR_LINE, "lines", ["min_top1_agreement = 1.0"], 0.65),
    "text_det": ("text_det.onnx", [1, 3, 640, 640], IMAGENET, "pages", [], 0.35),
}


def render(kind: str, count: int, calibration: int) -> tuple[Path, Path]:
    """The calibration and held-out folders of one kind of image (rendered once; kept between runs)."""
    write = text_images.write_lines if kind == "lines" else text_images.write_pages
    offset = 0 if kind == "lines" else 1
    folders = WORK / f"{kind}-calibration-{calibration}", WORK / f"{kind}-held-out-{count}"
    for folder, n, seed in (
        (folders[0], calibration, CALIBRATION_SEED + offset),
        (folders[1], count, HELD_OUT_SEED + offset),
    ):
        if not folder.is_dir():
            write(folder, n, seed=seed)
    return folders


def recipe(
    model: str, threads: int, calibration: Path, held_out: Path, count: int, samples: int, candidates: int
) -> str:
    file, shape, preprocess, _, gates, _ = MODELS[model]
    return "\n".join(
        [
            f"[models.{model}]",
            f'path = "{REPO / "models" / file}"',
            f"inputs.x = {{ shape = {shape} }}",
            "",
            "[targets.cpu]",
            'kind = "llvm"',
            'mcpu = "host"',
            f"num-cores = {threads}",
            "",
            "[quantization.int8]",
            f'calibration = {{ source = "images", path = "{calibration}", samples = {samples}, '
            f"preprocess = {preprocess} }}",
            "",
            "[search.fastest]",
            'precisions = ["int16", "float"]',
            'weight_rounding = ["nearest", "gptq"]',
            'calibration_methods = ["minmax", "percentile", "entropy"]',
            f"max_candidates = {candidates}",
            "",
            "[validation]",
            f'golden = {{ source = "images", path = "{held_out}", count = {count}, preprocess = {preprocess} }}',
            "timing = { warmup = 10, min_runs = 50, min_seconds = 0.5 }",
            "",
            "[validation.gates]",
            "min_cosine = 0.99",
            *gates,
            "",
            "[[builds]]",
            f'model = "{model}"',
            'targets = ["cpu"]',
            'quantization = "int8"',
            'search = "fastest"',
            "",
        ]
    )


def search(folder: Path, build: str, cache: Path = WORK / "cache") -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "modelbuild",
            "search",
            build,
            "-f",
            str(folder / "deploy.toml"),
            "--cache-dir",
            str(cache),
            "--json",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    if proc.returncode not in (0, 1):
        raise SystemExit(proc.stdout + proc.stderr)
    return json.loads(proc.stdout)


def timed(folder: Path, model: str, result: dict, seconds: float) -> dict[str, float]:
    """Median seconds of the fp32 library and the chosen one, in alternating blocks."""
    import numpy as np
    import tvm
    from tvm import relax

    shape = MODELS[model][1]
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal(shape).astype("float32"))
    searched = folder / "build" / "search" / f"{model}+int8@cpu"
    functions = {}
    for name, variant in (("fp32", model), ("chosen", f"{model}+{result['chosen']}")):
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(searched / variant / "cpu" / "model.so")), tvm.cpu())
        functions[name] = (lambda f: lambda: f(x))(vm["main"])
    return alternate(functions, seconds)


def zoo_search(only: list[str] | None, threads: int, seconds: float, candidates: int) -> None:
    """--zoo: per conv model of the zoo, the search's choice and its latency over the fp32 library's."""
    import zoo

    models = [m for m in zoo.ZOO if m.int8 and (not only or m.name in only)]
    root = WORK / "zoo"
    images = zoo.rendered_images(root)
    rows = []
    for m in models:
        folder = root / m.name
        folder.mkdir(parents=True, exist_ok=True)
        section = ['precisions = ["int16", "float"]', f"max_candidates = {candidates}"]
        (folder / "deploy.toml").write_text(zoo.int8_recipe([m], threads, images, search=section))
        print(f"searching {m.name} ...", flush=True)
        build = f"{m.name}+{m.name}_int8@cpu"
        result = search(folder, build, cache=zoo.CACHE / "cache")
        chosen = next((c for c in result["candidates"] if c["section"] == result["chosen"]), None)
        times = {}
        if chosen:
            variants = folder / "build" / "search" / build
            times = zoo.time_pair(
                m,
                variants / m.name / "cpu" / "model.so",
                variants / f"{m.name}+{result['chosen']}" / "cpu" / "model.so",
                seconds,
            )
        rows.append((m.name, result, chosen, times))
    print(
        f"\nthreads {threads}; untuned; calibrated on {zoo.CALIBRATION_SAMPLES} rendered samples, gated (int8-ci) "
        f"on {zoo.GOLDEN_SAMPLES} others; medians of alternating blocks\n"
    )
    print("| model | candidates | chosen | worst cosine | fp32 ms | chosen ms | chosen / fp32 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    ratios = []
    for name, result, chosen, times in rows:
        if chosen is None:
            print(f"| {name} | {len(result['candidates'])} | none passed | - | - | - | - |")
            continue
        ratios.append(times["int8"] / times["fp32"])
        print(
            f"| {name} | {len(result['candidates'])} | {chosen['description']} | {chosen['worst_cosine']:.6f} | "
            f"{times['fp32'] * 1e3:.2f} | {times['int8'] * 1e3:.2f} | {ratios[-1]:.2f}x |"
        )
    faster = sum(r < 1 for r in ratios)
    print(
        f"\n{faster} of {len(rows)} models have a passing configuration faster than fp32 (goal: all)"
        + (f"; geometric mean {zoo.geometric_mean(ratios):.2f}x" if ratios else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zoo", action="store_true", help="search each conv model of bench/zoo.py instead")
    parser.add_argument(
        "--only",
        nargs="*",
        help=f"models to search (default: all; {', '.join(MODELS)} or, with --zoo, the zoo's conv models)",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0, help="timing per library")
    parser.add_argument("--candidates", type=int, default=30, help="the search's max_candidates")
    parser.add_argument("--calibration", type=int, default=32, help="rendered calibration samples")
    parser.add_argument("--lines", type=int, default=200, help="held-out lines for the classifier")
    parser.add_argument("--pages", type=int, default=16, help="held-out pages for the detector")
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    if args.zoo:
        import zoo

        conv_models = [m.name for m in zoo.ZOO if m.int8]
        unknown = set(args.only or ()) - set(conv_models)
        if unknown:
            parser.error(
                f"--only: {', '.join(sorted(unknown))} is not one of the zoo's conv models ({', '.join(conv_models)})"
            )
        zoo_search(args.only, args.threads, args.seconds, args.candidates)
        return
    unknown = set(args.only or ()) - set(MODELS)
    if unknown:
        parser.error(f"--only: {', '.join(sorted(unknown))} is not one of {', '.join(MODELS)} (the zoo's need --zoo)")
    rows = []
    for model in args.only or list(MODELS):
        kind = MODELS[model][3]
        count = args.lines if kind == "lines" else args.pages
        calibration, held_out = render(kind, count, args.calibration)
        folder = WORK / model
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "deploy.toml").write_text(
            recipe(model, args.threads, calibration, held_out, count, args.calibration, args.candidates)
        )
        print(f"searching {model} ...", flush=True)
        result = search(folder, f"{model}+int8@cpu")
        chosen = next((c for c in result["candidates"] if c["section"] == result["chosen"]), None)
        times = timed(folder, model, result, args.seconds) if chosen else {}
        rows.append((model, result, chosen, times))
    print(
        f"\nthreads {args.threads}; untuned; calibrated on {args.calibration} rendered samples (seed "
        f"{CALIBRATION_SEED}), gated on others (seed {HELD_OUT_SEED}); medians of alternating blocks\n"
    )
    print("| model | candidates | chosen | worst cosine | fp32 ms | chosen ms | chosen / fp32 | goal |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for model, result, chosen, times in rows:
        goal = MODELS[model][5]
        if chosen is None:
            print(f"| {model} | {len(result['candidates'])} | none passed | - | - | - | - | <= {goal}x |")
            continue
        ratio = times["chosen"] / times["fp32"]
        print(
            f"| {model} | {len(result['candidates'])} | {chosen['description']} | {chosen['worst_cosine']:.6f} | "
            f"{times['fp32'] * 1e3:.2f} | {times['chosen'] * 1e3:.2f} | {ratio:.2f}x | <= {goal}x "
            f"{'met' if ratio <= goal else 'NOT met'} |"
        )


if __name__ == "__main__":
    main()
