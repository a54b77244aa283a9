"""A cache a team can share: what crashes leave, what concurrent builds cost, what a remote hit saves.

Runs the real CLI in fresh processes and prints, each beside the figure it is compared with in the same run:
- random SIGKILLs of a build's parent process (as an OOM killer sends them) on a small generated model:
  damaged or half-written entries found by `cache verify` after each kill, leftovers after the next build,
  and whether the final library is byte-identical to one built without kills (goal: 0, 0, identical);
- two concurrent cold builds of the bundled recipe on one cache, against one cold build alone
  (goal: at most 1.2x);
- a remote hit of the bundled recipe's compile output in a fresh cache (moto's S3 server on 127.0.0.1),
  against the compile's own time (goal: under 1/50).

Usage: python bench/shared_cache.py [--kills 100] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from modelbuild.engine.housekeeping import verify  # noqa: E402  (after the path is set)
from modelbuild.engine.store import Store  # noqa: E402

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"NO_COLOR": "1"}


def command(recipe: Path, cache: Path, build: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "modelbuild",
        "-f",
        str(recipe),
        "--cache-dir",
        str(cache),
        "--build-dir",
        str(build),
        *extra,
    ]


def build(recipe: Path, cache: Path, out: Path, *extra: str, env: dict | None = None) -> tuple[float, dict]:
    """A build to the end: (wall seconds, its --json summary)."""
    started = time.perf_counter()
    proc = subprocess.run(
        command(recipe, cache, out, "--json", *extra), capture_output=True, text=True, env=env or ENV, cwd=recipe.parent
    )
    if proc.returncode not in (0, 1):
        raise SystemExit(f"the build failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return time.perf_counter() - started, json.loads(proc.stdout)


def small_recipe(root: Path) -> Path:
    from tests.helpers.onnx_models import conv_relu

    root.mkdir(parents=True)
    conv_relu(root / "net.onnx", channels=8)
    (root / "deploy.toml").write_text(
        'include = ["%s"]\n\n[models.net]\npath = "net.onnx"\ninputs.x = { shape = [1, 3, 16, 16] }\n\n'
        '[targets.cpu]\nkind = "llvm"\nmcpu = "host"\n\n[[builds]]\nmodel = "net"\ntargets = ["cpu"]\n'
        % (REPO / "recipes/validation/smoke.toml")
    )
    return root / "deploy.toml"


def kills(tmp: Path, count: int, seed: int) -> None:
    recipe = small_recipe(tmp / "small")
    reference_seconds, _ = build(recipe, tmp / "ref-cache", tmp / "ref-build")
    reference = (tmp / "ref-build/net/cpu/model.so").read_bytes()
    cache, out = tmp / "kill-cache", tmp / "kill-build"
    rng = random.Random(seed)
    damaged = leftovers = finished = 0
    for round in range(count):
        if round % 2 == 0:  # every other build starts cold, so its kill lands mid-build; the others resume
            shutil.rmtree(cache / "actions", ignore_errors=True)
        proc = subprocess.Popen(
            command(recipe, cache, out),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=ENV,
            cwd=recipe.parent,
        )
        time.sleep(rng.uniform(0, reference_seconds))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)  # the parent alone; its workers must follow it
        else:
            finished += 1
        proc.wait()
        time.sleep(0.2)  # the orphaned worker's own SIGKILL
        damaged += len(verify(Store(cache)))
    build(recipe, cache, out)
    store = Store(cache)
    leftovers = len([p for p in store.leftovers() if not p.name.endswith(".lock")])
    same = (out / "net/cpu/model.so").read_bytes() == reference
    print(
        f"{count} SIGKILLs of the build's parent ({finished} builds finished before their kill): "
        f"{damaged} damaged or half-written entries, {leftovers} leftovers after the next build, final library "
        f"{'byte-identical' if same else 'DIFFERENT'} to a build without kills   (goal: 0, 0, identical)"
    )


def concurrent(tmp: Path) -> None:
    recipe = REPO / "deploy.toml"
    alone, _ = build(recipe, tmp / "alone-cache", tmp / "alone-build")
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            command(recipe, tmp / "shared-cache", tmp / "shared-build"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=ENV,
            cwd=REPO,
        )
        for _ in range(2)
    ]
    codes = [p.wait() for p in procs]
    together = time.perf_counter() - started
    print(
        f"two concurrent cold builds of the bundled recipe on one cache: {together:.1f} s (exit codes {codes}), "
        f"one alone: {alone:.1f} s, ratio {together / alone:.2f}x   (goal <= 1.2x)"
    )


def remote_hit(tmp: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        env = ENV | {
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "MODELBUILD_REMOTE_CACHE": "s3://bench/cache",
        }
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        subprocess.run(
            [sys.executable, "-c", "import fsspec; fsspec.filesystem('s3').mkdir('bench')"], env=env, check=True
        )
        recipe = REPO / "deploy.toml"
        _, first = build(recipe, tmp / "writer-cache", tmp / "writer-build", env=env)
        wall, second = build(recipe, tmp / "reader-cache", tmp / "reader-build", env=env)
        compiled = next(n for n in first["nodes"] if n["stage"] == "compile")
        fetched = next(n for n in second["nodes"] if n["stage"] == "compile")
        built = [n["node"] for n in second["nodes"] if n["status"] == "built"]
        print(
            f"remote hit of the compile output in a fresh cache: {fetched['seconds'] * 1000:.0f} ms "
            f"({fetched['status']}), compiling it: {compiled['seconds']:.1f} s, ratio "
            f"1/{compiled['seconds'] / fetched['seconds']:.0f}   (goal < 1/50); the whole build from the remote "
            f"{wall:.1f} s, stages built again: {built or 'none'}"
        )
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip", nargs="*", default=[], choices=("kills", "concurrent", "remote"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if "remote" not in args.skip:
            remote_hit(tmp)
        if "concurrent" not in args.skip:
            concurrent(tmp)
        if "kills" not in args.skip:
            kills(tmp, args.kills, args.seed)


if __name__ == "__main__":
    main()
