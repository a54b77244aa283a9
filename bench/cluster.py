"""Builds on a Ray cluster against the local executor: speed-up by worker nodes, overhead per stage, Amdahl.

Twelve builds (four of the zoo's generated networks x three x86 targets, untuned, 1 core each) from nothing, on:
- the local executor with -j 1 pinned to one core, and with -j N on this machine's N cores;
- a Ray cluster on this machine (tests/helpers/ray_cluster.py: a head, and worker nodes of one CPU each,
  each pinned to a core of its own, as an emulated board was pinned for RPC), with 1, 2, ... nodes up to the
  cores there are, the remote cache on moto's S3 server on 127.0.0.1.

It prints each run's wall time, the speed-up over one node and over the local executor, the overhead per stage
of going through the cluster (a run's wall time less its stages' own time, per stage, against the same for the
local -j 1 run), an Amdahl fit of the node counts, and whether every run's libraries are byte-identical to the
local build's. The driver, the head and the S3 server share the machine with the nodes: on a small machine
that is the serial part the fit finds.

With --kills N, it then makes N builds on the cluster, killing a worker node at a random moment of each:
how many finish, how many entries of the remote cache are damaged, and whether the libraries are the same.

Usage: python bench/cluster.py [--nodes 2] [--kills 10]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.zoo import dcgan_ish, mobilenetv3_ish, regnet_ish, resnet_ish  # noqa: E402
from tests.helpers.object_store import start_s3_server  # noqa: E402
from tests.helpers.ray_cluster import RayCluster  # noqa: E402

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"NO_COLOR": "1"}
TARGETS = {"avx2": "core-avx2", "zen3": "znver3", "avx512": "skylake-avx512"}


def models(root: Path) -> list[str]:
    """Four of the zoo's generated networks, of different operators and compile times (2 to 7 s a target)."""
    for make in (resnet_ish, regnet_ish, mobilenetv3_ish, dcgan_ish):
        make(root / f"{make.__name__}.onnx")
    return [make.__name__ for make in (resnet_ish, regnet_ish, mobilenetv3_ish, dcgan_ish)]


def recipe(root: Path) -> Path:
    root.mkdir(parents=True)
    names = models(root)
    text = ["[validation]\nenabled = false  # the bench times building; validation times on the driver\n"]
    for name in names:
        text.append(f'[models.{name}]\npath = "{name}.onnx"\n')
    for name, mcpu in TARGETS.items():
        text.append(f'[targets.{name}]\nkind = "llvm"\nmcpu = "{mcpu}"\nnum-cores = 1\n')
    for name in names:
        text.append(f'[[builds]]\nmodel = "{name}"\ntargets = {json.dumps(list(TARGETS))}\n')
    (root / "deploy.toml").write_text("\n".join(text))
    return root / "deploy.toml"


def build(recipe_path: Path, work: Path, *extra: str, env: dict, cores: str | None = None) -> tuple[float, dict]:
    """A cold build: (wall seconds, its --json summary)."""
    command = [sys.executable, "-m", "modelbuild", "build", "-f", str(recipe_path), "--cache-dir", str(work / "cache")]
    command += ["--build-dir", str(work / "build"), "--json", *extra]
    if cores:
        command = ["taskset", "-c", cores, *command]
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=recipe_path.parent)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"the build failed ({' '.join(extra)}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return wall, json.loads(proc.stdout)


def libraries(work: Path) -> dict[str, str]:
    return {
        str(p.relative_to(work / "build")): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((work / "build").rglob("model.so"))
    }


def own_seconds(summary: dict) -> tuple[float, int]:
    built = [n for n in summary["nodes"] if n["status"] == "built"]
    return sum(n["seconds"] for n in built), len(built)


def s3_server(env: dict) -> tuple[subprocess.Popen, dict]:
    server, endpoint = start_s3_server()
    env = env | {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }
    subprocess.run([sys.executable, "-c", "import fsspec; fsspec.filesystem('s3').mkdir('bench')"], env=env, check=True)
    return server, env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cores = len(os.sched_getaffinity(0))
    parser.add_argument("--nodes", type=int, default=cores, help="the most worker nodes (default: one per core)")
    parser.add_argument("--kills", type=int, default=0, help="then this many builds, each with a worker node killed")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    recipe_path = recipe(tmp / "project")
    rows: list[tuple[str, float, float, int]] = []  # (run, wall, stages' own seconds, stages)

    wall, summary = build(recipe_path, tmp / "local-1", "-j", "1", env=ENV, cores="0")
    rows.append(("local -j 1 (1 core)", wall, *own_seconds(summary)))
    reference = libraries(tmp / "local-1")
    wall, summary = build(recipe_path, tmp / f"local-{cores}", "-j", str(cores), env=ENV)
    rows.append((f"local -j {cores} ({cores} cores)", wall, *own_seconds(summary)))
    identical = [libraries(tmp / f"local-{cores}") == reference]

    server, env = s3_server(ENV)
    cluster = RayCluster.start()
    by_nodes: dict[int, float] = {}
    try:
        for count in range(1, min(args.nodes, cores) + 1):
            cluster.add_node(f"node{count}", cpus=1, cores=str(count - 1))
            work = tmp / f"ray-{count}"
            run_env = env | {"MODELBUILD_REMOTE_CACHE": f"s3://bench/{uuid.uuid4().hex[:8]}"}
            wall, summary = build(recipe_path, work, "--executor", cluster.address, env=run_env)
            by_nodes[count] = wall
            rows.append((f"ray, {count} node{'s' * (count > 1)} of 1 core", wall, *own_seconds(summary)))
            identical.append(libraries(work) == reference)
        killed = kills(cluster, recipe_path, tmp, env, reference, args.kills, rows[-1][1]) if args.kills else ""
    finally:
        cluster.stop()
        server.terminate()

    print(f"{len(reference)} builds, {rows[0][3]} stages each run, from nothing; medians of one run each")
    for name, wall, own, stages in rows:
        overhead = (wall - own) / stages
        print(
            f"  {name:<28} {wall:7.1f} s   stages' own time {own:6.1f} s   wall less own, per stage {overhead:5.2f} s"
        )
    local_overhead = (rows[0][1] - rows[0][2]) / rows[0][3]
    if 1 in by_nodes:
        name, wall, own, stages = rows[2]
        per_stage = (wall - own) / stages - local_overhead
        print(f"overhead of the cluster per stage, over the local executor: {per_stage:.2f} s   (goal <= 0.5 s)")
    if 2 in by_nodes:
        speedup = by_nodes[1] / by_nodes[2]
        print(f"2 worker nodes over 1: {speedup:.2f}x   (goal >= 1.7x)")
        fits = [(n / (by_nodes[1] / by_nodes[n]) - 1) / (n - 1) for n in by_nodes if n > 1]
        serial = statistics.median(fits)
        predicted = ", ".join(f"{n}: {1 / (serial + (1 - serial) / n):.1f}x" for n in (4, 8, 16, 64))
        print(f"Amdahl fit: serial fraction {serial:.2f}; predicted speed-up over one node at {predicted}")
    best = min(by_nodes.values(), default=float("nan"))
    print(
        f"speed-up of the most nodes over local -j 1: {rows[0][1] / best:.2f}x, over local -j {cores}: "
        f"{rows[1][1] / best:.2f}x"
    )
    print(f"libraries byte-identical to the local -j 1 build's in every run: {'yes' if all(identical) else 'NO'}")
    if killed:
        print(killed)


def kills(
    cluster: RayCluster, recipe_path: Path, tmp: Path, env: dict, reference: dict, count: int, wall: float
) -> str:
    """`count` cold builds on the cluster, each with one worker node killed (SIGKILL to all its processes) at a
    random moment of it, then started again: how many finished, how many remote entries were damaged, and
    whether every library is the reference's."""
    rng = random.Random(0)
    os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})  # for the checks' S3 client
    finished = damaged = same = 0
    for run in range(count):
        work, prefix = tmp / f"kill-{run}", f"bench/kill-{run}-{uuid.uuid4().hex[:8]}"
        command = [sys.executable, "-m", "modelbuild", "build", "-f", str(recipe_path), "--cache-dir"]
        command += [str(work / "cache"), "--build-dir", str(work / "build"), "--executor", cluster.address]
        run_env = env | {"MODELBUILD_REMOTE_CACHE": f"s3://{prefix}"}
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=run_env)
        time.sleep(rng.uniform(0.2, 0.8) * wall)
        victim = rng.choice(sorted(cluster.nodes))
        cluster.kill_node(victim)
        cluster.add_node(victim, cpus=1, cores=str(int(victim.removeprefix("node")) - 1))
        _, err = proc.communicate(timeout=900)
        finished += proc.returncode == 0
        damaged += damaged_entries(prefix)
        same += libraries(work) == reference
        if proc.returncode:
            print(f"  run {run}: exit {proc.returncode}: {err.strip().splitlines()[-1:]}")
    return (
        f"{count} builds with a worker node killed in each: {finished} finished, {damaged} damaged entries in the "
        f"remote cache, {same} with every library byte-identical   (goal: {count}, 0, {count})"
    )


def damaged_entries(prefix: str) -> int:
    """Entries whose seal fails, or that name an object missing or not its digest's bytes."""
    import fsspec

    from modelbuild.engine.sealing import unseal

    s3 = fsspec.filesystem("s3", skip_instance_cache=True)
    damaged = 0
    for path in s3.glob(f"{prefix}/actions/*/*.json"):
        entry = unseal(s3.cat_file(path), None)
        objects = (entry or {}).get("outputs", {}).values()
        intact = entry is not None and all(
            s3.exists(f"{prefix}/objects/{d[:2]}/{d}")
            and hashlib.sha256(s3.cat_file(f"{prefix}/objects/{d[:2]}/{d}")).hexdigest() == d
            for d in objects
        )
        damaged += not intact
    return damaged


if __name__ == "__main__":
    main()
