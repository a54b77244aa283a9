"""Builds on a real Ray cluster (a head and two worker nodes on 127.0.0.1, tests/helpers/ray_cluster.py) with
the S3-compatible test server as the store both sides share, using the fake stages: where stages run, what
the driver takes, a worker killed mid-stage, two drivers at once."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from modelbuild.engine.sealing import unseal
from modelbuild.hashing import sha256_file
from tests.helpers.cli import run_cli
from tests.helpers.fake_stages import write_fake_model
from tests.helpers.object_store import s3
from tests.helpers.paths import REPO
from tests.helpers.processes import descendants

ray = pytest.importorskip("ray", reason="ray is not installed here (pip install 'modelbuild[cluster]')")
pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(ray_cluster):
    return ray_cluster


@pytest.fixture
def on_cluster(cluster, fake_project, bucket, monkeypatch):
    """The fake project, its remote cache the bucket, built on the cluster unless a test says otherwise."""
    root, _ = fake_project
    monkeypatch.setenv("MODELBUILD_REMOTE_CACHE", bucket)
    monkeypatch.setenv("MODELBUILD_EXECUTOR", cluster.address)
    return root


def statuses(out: str) -> dict[str, str]:
    return {
        line.split()[1]: line.split()[0] for line in out.splitlines() if line.split()[:1] in (["built"], ["cached"])
    }


def entries_hold(bucket: str) -> int:
    """How many entries the remote cache holds, each checked: sealed, and every object it names intact."""
    paths = s3().glob(f"{bucket.removeprefix('s3://')}/actions/*/*.json")
    for path in paths:
        entry = unseal(s3().cat_file(path), None)
        assert entry is not None, f"{path} is damaged"
        for digest in entry["outputs"].values():
            data = s3().cat_file(f"{bucket.removeprefix('s3://')}/objects/{digest[:2]}/{digest}")
            assert hashlib.sha256(data).hexdigest() == digest, f"object {digest[:12]} of {path} is damaged"
    return len(paths)


def test_a_cluster_build_runs_its_stages_on_the_workers_and_gives_the_local_build_s_bytes(
    on_cluster, monkeypatch, capsys, tmp_path_factory
):
    root = on_cluster
    cmdline = root / "import.cmdline"
    write_fake_model(root / "a.json", ["conv", "relu"], cmdline=str(cmdline))
    code, out, err = run_cli(capsys, root, "build")
    assert code == 0, err
    assert set(statuses(out).values()) == {"built"} and len(statuses(out)) == 4
    assert cmdline.read_bytes().startswith(b"ray::import:a\0"), "the import ran in a Ray worker, as its own task"
    assert entries_hold(os.environ["MODELBUILD_REMOTE_CACHE"]) == 4
    # the same recipe built here, from nothing, with no remote: the same bytes
    local = tmp_path_factory.mktemp("local")
    for name in ("deploy.toml", "a.json", "b.json"):
        (local / name).write_bytes((root / name).read_bytes())
    monkeypatch.delenv("MODELBUILD_REMOTE_CACHE")
    code, out, _ = run_cli(capsys, local, "build", "--executor", "local")
    assert code == 0 and set(statuses(out).values()) == {"built"}
    for built in ("a/cpu/model.so", "b/cpu/model.so", "a/cpu/library.json"):
        assert sha256_file(local / "build" / built) == sha256_file(root / "build" / built), built


def test_a_no_op_build_asks_the_cluster_nothing(on_cluster, monkeypatch, capsys):
    root = on_cluster
    assert run_cli(capsys, root, "build")[0] == 0
    monkeypatch.setenv("MODELBUILD_EXECUTOR", "ray://127.0.0.1:9")  # nothing listens: any connection fails
    code, out, err = run_cli(capsys, root, "build")
    assert code == 0 and set(statuses(out).values()) == {"cached"}, err


def test_a_stage_that_fails_on_the_cluster_shows_its_log_here(on_cluster, capsys):
    root = on_cluster
    write_fake_model(root / "a.json", ["conv"], fail="no such operator: Frobnicate")
    code, out, err = run_cli(capsys, root, "build", "-k")
    assert code == 3
    assert "fake import refuses: no such operator: Frobnicate" in out + err
    log = root / "build" / "logs" / "import-a.log"
    assert log.is_file() and "Traceback" in log.read_text() and "Frobnicate" in log.read_text()


def test_a_worker_killed_mid_stage_is_retried_elsewhere_and_nothing_damaged_is_served(
    cluster, on_cluster, capsys, monkeypatch
):
    from modelbuild import api

    root = on_cluster
    pidfile, hold = root / "import.pid", root / "let-go"
    write_fake_model(root / "a.json", ["conv", "relu"], pidfile=str(pidfile), hold=str(hold))
    outcome: dict = {}
    build = threading.Thread(target=lambda: outcome.update(report=api.build(root / "deploy.toml")))
    build.start()
    deadline = time.monotonic() + 60
    while not pidfile.exists():
        assert time.monotonic() < deadline, "the import never started"
        time.sleep(0.1)
    first = int(pidfile.read_text())
    victim = next(name for name, node in cluster.nodes.items() if first in descendants(node.pid))
    pidfile.unlink()
    cluster.kill_node(victim)
    hold.touch()
    build.join(timeout=120)
    cluster.add_node(victim)  # the next test's cluster has its two nodes again
    assert "report" in outcome and outcome["report"].passed
    assert pidfile.exists() and int(pidfile.read_text()) != first, "the import ran again, on another worker"
    assert entries_hold(os.environ["MODELBUILD_REMOTE_CACHE"]) == 4


def test_two_drivers_building_one_recipe_build_each_key_once(cluster, on_cluster, tmp_path_factory):
    root = on_cluster
    hold = root / "let-go"
    write_fake_model(root / "a.json", ["conv", "relu"], hold=str(hold))
    other = tmp_path_factory.mktemp("second-driver")
    for name in ("deploy.toml", "a.json", "b.json"):
        (other / name).write_bytes((root / name).read_bytes())
    drivers = [_driver(folder) for folder in (root, other)]
    time.sleep(8)  # both drivers connect and submit; the first import waits on `hold`, the second on its key
    hold.touch()
    results = [json.loads(driver.communicate(timeout=120)[0].splitlines()[-1]) for driver in drivers]
    assert [driver.returncode for driver in drivers] == [0, 0], results
    built = [node for result in results for node, status in result.items() if status == "built"]
    assert sorted(built) == sorted({*results[0]}), "each of the four keys built once, by one driver or the other"
    assert entries_hold(os.environ["MODELBUILD_REMOTE_CACHE"]) == 4


def _driver(folder) -> subprocess.Popen:
    """A second driver in its own process (Ray Client holds one connection a process), with the fake stages,
    printing each node's status as JSON."""
    code = (
        "import json, sys\n"
        "from modelbuild import api\n"
        "from modelbuild.engine.scheduler import Options\n"
        "from modelbuild.pipeline import registry\n"
        "from tests.helpers.fake_stages import FAKE_STAGES\n"
        "registry.STAGES.update(FAKE_STAGES)\n"
        f"project = api.open_project({str(folder / 'deploy.toml')!r})\n"
        "run = api.run_build(project, []).run\n"
        "print(json.dumps({r.node: r.status.value for r in run.results.values()}))\n"
    )
    env = os.environ | {"PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env, cwd=folder)
