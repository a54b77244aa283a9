"""Zoo models with an operator TVM's GPU path lacks, built three ways: this CPU, the GPU, and split between them.

    python bench/split.py                      # yolov10_ish (two TopKs) and yolov5_ish (ScatterND)
    python bench/split.py --only yolov10_ish

Each model is built for `cpu` (this machine), `gpu` (cuda sm_80, TVM's GPU pipeline for everything) and
`split` (the same GPU with devices = ["cuda", "llvm"]: each operator placed by the cost model). It prints the
split's placement (operators per device, the copies and their bytes a call, the operators on the CPU and
why), then each build's p50 where it was validated: on a machine without a GPU the two GPU builds say
"not run here", and only the placement and the CPU's time are measured. A GPU build that does not build is a
row with its error, not a crash.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zoo  # noqa: E402  (bench/ is not a package)

MODELS = ("yolov10_ish", "yolov5_ish")
TARGETS = """
[targets.cpu]
kind = "llvm"
mcpu = "host"
num-cores = {threads}

[targets.gpu]
kind = "cuda"
arch = "sm_80"

[targets.split]
kind = "cuda"
arch = "sm_80"
devices = ["cuda", "llvm"]
"""


def recipe(models: list[zoo.ZooModel], threads: int) -> str:
    lines = [f'include = ["{zoo.REPO / "recipes/validation/float-ci.toml"}"]', ""]
    for m in models:
        lines += zoo.model_section(m)
    lines += [TARGETS.format(threads=threads)]
    for m in models:
        lines += ["[[builds]]", f'model = "{m.name}"', 'targets = ["cpu", "gpu", "split"]', ""]
    return "\n".join(lines)


def placement_lines(placement: dict) -> list[str]:
    ops = placement["operators"]
    lines = [
        f"  placement: {ops['cuda']} operators on the GPU, {ops['llvm']} on the CPU; {placement['copies']} copies, "
        f"{placement['bytes_copied'] / 1e6:.2f} MB a call; the cost model's estimates: "
        + ", ".join(f"{name} {ms:.3f} ms" for name, ms in placement["estimated_ms"].items())
    ]
    whys: dict[str, list[str]] = {}
    for c in placement["on_cpu"]:
        why = c["why"].split(" (")[0]  # the cost model's figures differ per operator; its reason does not
        whys.setdefault(f"{c['op']}: {why}", []).append(c["operator"])
    lines += [f"    on the CPU, {len(names)}x {why}" for why, names in sorted(whys.items())]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", default=list(MODELS))
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    models = [m for m in zoo.ZOO if m.name in args.only]
    with tempfile.TemporaryDirectory(prefix="modelbuild-split-") as folder:
        root = Path(folder)
        (root / "deploy.toml").write_text(recipe(models, args.threads))
        command = ["-m", "modelbuild", "build", "-f", str(root / "deploy.toml"), "--keep-going"]
        command += ["--cache-dir", str(zoo.CACHE / "cache")]
        done = subprocess.run([sys.executable, *command], capture_output=True, text=True)
        report = root / "build" / "report.json"
        if not report.exists():
            raise SystemExit(done.stdout + done.stderr)
        builds = {b["name"]: b for b in json.loads(report.read_text())["builds"]}
        failures = [line for line in done.stdout.splitlines() if line.startswith("failed")]
    for m in models:
        print(m.name)
        split = builds.get(f"{m.name}@split") or {}
        if split.get("placement"):
            print("\n".join(placement_lines(split["placement"])))
        for target in ("cpu", "gpu", "split"):
            build = builds.get(f"{m.name}@{target}")
            failed = [line for line in failures if f"{m.name}@{target}" in line]
            if build is None or failed:
                print(f"  {target}: did not build: {failed[0] if failed else 'no report'}")
            elif build["validation"]["ran"]:
                print(f"  {target}: p50 {build['latency_ms']['median']:.3f} ms")
            else:
                print(f"  {target}: built, not run here: {build['validation']['reason']}")


if __name__ == "__main__":
    main()
