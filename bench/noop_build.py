"""No-op build speed and the compile cache's T_hit / T_miss.

Prints, as medians over repeated runs of the real CLI in fresh processes:
- the wall time of a cold build of the bundled recipe (one run: it is what the README quotes);
- the wall time of a no-op `modelbuild` on the bundled recipe (goal: under 0.2 s), and of a no-op
  `modelbuild.build()` from Python in a fresh process, timed in turns with it (goal: no slower);
- the same on a generated recipe of 10 models x 3 targets (goal: under 1 s);
- T_hit / T_miss of the compile stage: seconds to reuse a cached library over seconds to compile it
  (goal: under 1/100).

Usage: python bench/noop_build.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def modelbuild(*args: str, cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    # bytecode caching as on a user's machine: with PYTHONDONTWRITEBYTECODE (set on some CI images) every run
    # compiles modelbuild's modules again, which measures the interpreter, not the build
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-m", "modelbuild", *args], cwd=cwd, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"modelbuild {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return elapsed, proc


def median_noop(recipe: Path, cache: Path, build: Path, repeat: int) -> float:
    flags = ["-f", str(recipe), "--cache-dir", str(cache), "--build-dir", str(build)]
    return statistics.median(modelbuild(*flags, cwd=recipe.parent)[0] for _ in range(repeat))


def median_noop_from_python(recipe: Path, cache: Path, build: Path, repeat: int) -> float:
    """A no-op `modelbuild.build()` in a fresh process, as a notebook or training script would call it."""
    code = f"import modelbuild; modelbuild.build({str(recipe)!r}, cache_dir={str(cache)!r}, build_dir={str(build)!r})"

    def once() -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, cwd=recipe.parent)
        return time.perf_counter() - started

    return statistics.median(once() for _ in range(repeat))


def median_interpreter_start(repeat: int) -> float:
    """The peer: starting this Python and doing nothing, measured beside the no-op build on a noisy machine."""

    def once() -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        return time.perf_counter() - started

    return statistics.median(once() for _ in range(repeat))


def compile_seconds(recipe: Path, cache: Path, build: Path) -> list[tuple[str, float]]:
    _, proc = modelbuild(
        "-f", str(recipe), "--cache-dir", str(cache), "--build-dir", str(build), "--json", cwd=recipe.parent
    )
    nodes = json.loads(proc.stdout)["nodes"]
    return [(n["status"], n["seconds"]) for n in nodes if n["stage"] == "compile"]


def generated_recipe(root: Path, models: int = 10) -> Path:
    from tests.helpers.onnx_models import conv_relu

    root.mkdir(parents=True, exist_ok=True)

    lines = []
    for i in range(models):
        conv_relu(root / f"m{i}.onnx", seed=i)
        lines += [f"[models.m{i}]", f'path = "m{i}.onnx"', "inputs.x = { shape = [1, 3, 8, 8] }", ""]
    for cores in (1, 2, 4):
        lines += [f"[targets.c{cores}]", 'kind = "llvm"', 'mcpu = "host"', f"num-cores = {cores}", ""]
    for i in range(models):
        lines += ["[[builds]]", f'model = "m{i}"', 'targets = ["c1", "c2", "c4"]', ""]
    (root / "deploy.toml").write_text("\n".join(lines))
    return root / "deploy.toml"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        bundled = REPO / "deploy.toml"
        started = time.perf_counter()
        misses = compile_seconds(bundled, tmp / "c1", tmp / "b1")
        print(f"cold build, bundled recipe: {time.perf_counter() - started:.1f} s")
        hits = compile_seconds(bundled, tmp / "c1", tmp / "b1")
        cli, python = [], []
        for _ in range(args.repeat):  # in turns, so a busy spell weighs on both
            cli.append(median_noop(bundled, tmp / "c1", tmp / "b1", 1))
            python.append(median_noop_from_python(bundled, tmp / "c1", tmp / "b1", 1))
        noop, from_python = statistics.median(cli), statistics.median(python)
        startup = median_interpreter_start(args.repeat)
        print(
            f"no-op build, bundled recipe (1 model x 1 target): median {noop:.3f} s   (goal < 0.2 s); "
            f"the interpreter alone (python -c pass, same runs): {startup:.3f} s, so modelbuild's own "
            f"{noop - startup:.3f} s"
        )
        print(
            f"no-op modelbuild.build() from Python, same recipe, in turns with the CLI: median {from_python:.3f} s, "
            f"{from_python / noop:.2f}x the CLI's   (goal <= 1x)"
        )

        gen = generated_recipe(tmp / "gen")
        print("building the 10 x 3 recipe once (cold, -j 2) ...", flush=True)
        modelbuild(
            "-f", str(gen), "-j", "2", "--cache-dir", str(tmp / "c2"), "--build-dir", str(tmp / "b2"), cwd=gen.parent
        )
        noop_gen = median_noop(gen, tmp / "c2", tmp / "b2", args.repeat)
        print(f"no-op build, generated recipe (10 models x 3 targets): median {noop_gen:.3f} s   (goal < 1 s)")

        t_miss = statistics.median(s for status, s in misses if status == "built")
        t_hit = statistics.median(s for status, s in hits if status == "cached")
        print(
            f"compile stage: T_miss {t_miss:.2f} s, T_hit {t_hit * 1000:.2f} ms, "
            f"T_hit/T_miss = 1/{t_miss / t_hit:.0f}   (goal < 1/100)"
        )


if __name__ == "__main__":
    main()
