"""The baseline gate on the bundled classifier: how often it flags a library that did not change, and how
often it catches one that did.

Builds the bundled recipe, then times its library in fresh processes exactly as the validate stage does
(measure.py, the float-ci timing: 10 warm-up runs, at least 100 runs and 1 s), each side of a pair in
`--processes` fresh processes merged as `timing.processes` merges them, in pairs:
- the same library twice: the second against the first as its baseline;
- the second run's own samples made 15% slower, against the same baseline: a known shift on the machine's
  real noise. (num-cores 2 -> 1 is no slowdown for this small model on a 2-core machine: measured below.)
Each pair goes through the recipe's gate code (validation/gates.py) with `max_p50_increase` and
`max_p99_increase` set to the limits below. Goals (issue 20): unchanged pairs flagged in fewer than 1 in 20,
the slowdown caught in more than 19 in 20.

Usage: python bench/regression_gate.py [--pairs 20] [--processes 5] [--p50-limit 0.10] [--p99-limit 0.25]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from modelbuild.build.store import Store  # noqa: E402  (after the path is set)
from modelbuild.recipe.schema import ValidationSpec  # noqa: E402
from modelbuild.validation.gates import evaluate  # noqa: E402
from modelbuild.validation.measured import Measured  # noqa: E402
from modelbuild.validation.metrics import merge_blocks  # noqa: E402

TIMING = {"warmup": 10, "min_runs": 100, "min_seconds": 1.0}
SLOWDOWN = 1.15


def build() -> Path:
    subprocess.run([sys.executable, "-m", "modelbuild"], cwd=REPO, check=True, capture_output=True)
    return REPO / "build/text_cls/x86"


def timed(library: Path, golden: Path, signature: Path, threads: int, tmp: Path) -> dict:
    out = tmp / "measured.json"
    env = {**os.environ, "TVM_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    subprocess.run([sys.executable, "-m", "modelbuild.stages.measure", str(library), str(golden), str(signature),
                    json.dumps(TIMING), str(out)], env=env, check=True, capture_output=True, cwd=REPO)
    return json.loads(out.read_text())["latency_ms"]


def merged(blocks: list[dict]) -> dict:
    return merge_blocks(blocks) if len(blocks) > 1 else blocks[0]


def flagged(spec: ValidationSpec, now: dict, base: dict) -> bool:
    return not all(g.passed for g in evaluate(spec, Measured(ran=True, latency_ms=now), {"latency_ms": base}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--p50-limit", type=float, default=0.10)
    parser.add_argument("--p99-limit", type=float, default=0.25)
    args = parser.parse_args()
    spec = ValidationSpec.model_validate({"baseline": {"report": "unused", "max_p50_increase": args.p50_limit,
                                                       "max_p99_increase": args.p99_limit}})
    folder = build()
    # the golden inputs and signature the validate stage read: from the store, by the report's stage keys
    store = Store(REPO / ".cache")
    stages = json.loads((REPO / "build/report.json").read_text())["builds"][0]["stages"]
    golden = store.object_path(store.read_entry(stages["reference"]["key"]).outputs["golden.npz"])
    signature = store.object_path(store.read_entry(stages["import"]["key"]).outputs["signature.json"])
    with tempfile.TemporaryDirectory() as tmp:
        sig = Path(tmp) / "signature.json"
        sig.write_bytes(signature.read_bytes())
        library = folder / "model.so"
        same = slowed = 0
        one_thread = []
        for i in range(args.pairs):
            base, again = (merged([timed(library, golden, sig, 2, Path(tmp)) for _ in range(args.processes)])
                           for _ in range(2))
            # every run of `again` 15% slower, process by process (its blocks stay as they were)
            slower = {**again, **{k: again[k] * SLOWDOWN for k in ("median", "p99", "mean")},
                      "samples_ms": [ms * SLOWDOWN for ms in again["samples_ms"]]}
            same += flagged(spec, again, base)
            slowed += flagged(spec, slower, base)
            if i < 3:
                one_thread.append(timed(library, golden, sig, 1, Path(tmp))["median"] / base["median"])
            print(f"pair {i + 1}: p50 {base['median']:.3f} ms, again {again['median']:.3f} ms", flush=True)
    print(f"{args.processes} processes a side; limits: p50 +{args.p50_limit:.0%}, p99 +{args.p99_limit:.0%}; 1 thread against 2: "
          + ", ".join(f"{r:.2f}x" for r in one_thread))
    print(f"unchanged library flagged in {same} of {args.pairs} pairs (goal: fewer than 1 in 20); slowdown caught in "
          f"{slowed} of {args.pairs} (goal: more than 19 in 20)")


if __name__ == "__main__":
    main()
