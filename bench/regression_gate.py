"""The baseline gate on the bundled classifier: how often it flags a library that did not change, and how
often it catches one that did.

Builds the bundled recipe, then times its library in fresh processes exactly as the validate stage does
(measure.py, the float-ci timing: 10 warm-up runs, at least 100 runs and 1 s), `--processes` of them a side,
merged as `timing.processes` merges them, in pairs, two ways:
- apart: the baseline's processes, then the build's (a baseline report from an earlier run);
- together (`baseline.timed_together`): in each process the two libraries run in turns (measure.py
  --baseline), as the validate stage times them when the baseline's library is at hand.
In each pair, the same library is compared with itself (a copy, loaded separately), and then its own samples
made 15% slower: a known shift on the machine's real noise. (num-cores 2 -> 1 is no slowdown for this small
model on a 2-core machine: measured below.) Each pair goes through the recipe's gate code (validation/gates.py)
with `max_p50_increase` and `max_p99_increase` set to the limits below. Goals (issue 20): unchanged pairs
flagged in fewer than 1 in 20, the slowdown caught in more than 19 in 20.

Usage: python bench/regression_gate.py [--pairs 20] [--processes 5] [--p50-limit 0.10] [--p99-limit 0.25]
                                      [--modes apart,together]
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from modelbuild.engine.store import Store  # noqa: E402  (after the path is set)
from modelbuild.recipe.schema import ValidationSpec  # noqa: E402
from modelbuild.validation.gates import evaluate  # noqa: E402
from modelbuild.validation.measured import Measured  # noqa: E402
from modelbuild.validation.metrics import merge_blocks  # noqa: E402

TIMING = {"warmup": 10, "min_runs": 100, "min_seconds": 1.0}
SLOWDOWN = 1.15


def build() -> Path:
    subprocess.run([sys.executable, "-m", "modelbuild"], cwd=REPO, check=True, capture_output=True)
    return REPO / "build/text_cls/x86"


def timed(library: Path, golden: Path, signature: Path, threads: int, tmp: Path, baseline: Path | None = None) -> dict:
    out = tmp / "measured.json"
    env = {**os.environ, "TVM_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "modelbuild.measurement.measure",
            str(library),
            str(golden),
            str(signature),
            json.dumps(TIMING),
            str(out),
            *(["--baseline", str(baseline)] if baseline else []),
        ],
        env=env,
        check=True,
        capture_output=True,
        cwd=REPO,
    )
    return json.loads(out.read_text())


def merged(blocks: list[dict]) -> dict:
    return merge_blocks(blocks) if len(blocks) > 1 else blocks[0]


def flagged(spec: ValidationSpec, now: dict, base: dict, together: bool) -> bool:
    measured = Measured(ran=True, latency_ms=now, baseline_latency_ms=base if together else None)
    return not all(g.passed for g in evaluate(spec, measured, {"latency_ms": base}))


def slower(timing: dict) -> dict:
    """Every run 15% slower, process by process (its blocks stay as they were)."""
    return {
        **timing,
        **{k: timing[k] * SLOWDOWN for k in ("median", "p99", "mean")},
        "samples_ms": [ms * SLOWDOWN for ms in timing["samples_ms"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--p50-limit", type=float, default=0.10)
    parser.add_argument("--p99-limit", type=float, default=0.25)
    parser.add_argument("--modes", default="apart,together")
    args = parser.parse_args()
    modes = args.modes.split(",")
    spec = ValidationSpec.model_validate(
        {"baseline": {"report": "unused", "max_p50_increase": args.p50_limit, "max_p99_increase": args.p99_limit}}
    )
    folder = build()
    # the golden inputs and signature the validate stage read: from the store, by the report's stage keys
    store = Store(REPO / ".cache")
    stages = json.loads((REPO / "build/report.json").read_text())["builds"][0]["stages"]
    golden = store.object_path(store.read_entry(stages["reference"]["key"]).outputs["golden.npz"])
    signature = store.object_path(store.read_entry(stages["import"]["key"]).outputs["signature.json"])
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sig = tmp / "signature.json"
        sig.write_bytes(signature.read_bytes())
        library, copy = folder / "model.so", tmp / "baseline.so"
        shutil.copyfile(library, copy)  # a second file: loaded as a library of its own, as a baseline's is
        counts = {mode: [0, 0] for mode in modes}
        one_thread = []
        for i in range(args.pairs):
            sides = {}
            if "apart" in modes:
                base, again = (
                    merged([timed(library, golden, sig, 2, tmp)["latency_ms"] for _ in range(args.processes)])
                    for _ in range(2)
                )
                sides["apart"] = (again, base)
            if "together" in modes:
                runs = [timed(library, golden, sig, 2, tmp, baseline=copy) for _ in range(args.processes)]
                sides["together"] = (
                    merged([r["latency_ms"] for r in runs]),
                    merged([r["baseline_latency_ms"] for r in runs]),
                )
            for mode, (ours, theirs) in sides.items():
                counts[mode][0] += flagged(spec, ours, theirs, mode == "together")
                counts[mode][1] += flagged(spec, slower(ours), theirs, mode == "together")
            if i < 3:
                one_thread.append(
                    timed(library, golden, sig, 1, tmp)["latency_ms"]["median"]
                    / next(iter(sides.values()))[1]["median"]
                )
            print(
                f"pair {i + 1}: "
                + "; ".join(
                    f"{mode} p50 {theirs['median']:.3f} -> {ours['median']:.3f} ms"
                    for mode, (ours, theirs) in sides.items()
                ),
                flush=True,
            )
    print(
        f"{args.processes} processes a side; limits: p50 +{args.p50_limit:.0%}, p99 +{args.p99_limit:.0%}; 1 thread "
        "against 2: " + ", ".join(f"{r:.2f}x" for r in one_thread)
    )
    for mode, (same, caught) in counts.items():
        print(
            f"{mode}: unchanged library flagged in {same} of {args.pairs} pairs (goal: fewer than 1 in 20); "
            f"slowdown caught in {caught} of {args.pairs} (goal: more than 19 in 20)"
        )


if __name__ == "__main__":
    main()
