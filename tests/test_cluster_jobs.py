"""What the driver sends a cluster and what stays here, and the leases that build each key once: pure logic,
no Ray (tests/test_cluster.py runs the real cluster)."""

from __future__ import annotations

from pathlib import Path

from modelbuild.engine.cluster import Cluster
from modelbuild.engine.cluster_task import KeyLeases
from modelbuild.engine.executors import ExecutorChoice
from modelbuild.engine.plan import Node, Plan
from modelbuild.engine.remote import Remote
from modelbuild.engine.stage import Stage
from modelbuild.engine.store import Store
from modelbuild.hashing import sha256_file
from modelbuild.pipeline import registry
from tests.helpers.processes import free_port


def cluster(tmp_path: Path) -> Cluster:
    """A cluster nobody answers for: any attempt to connect fails the test."""
    store = Store(tmp_path / "cache", remote=Remote(str(tmp_path / "remote")))
    return Cluster(ExecutorChoice("ray", f"ray://127.0.0.1:{free_port()}"), store)


def test_stages_that_time_or_keep_a_memo_or_reach_a_device_here_stay_here_without_asking_the_cluster(tmp_path):
    timed = Node("validate:a@cpu", "validate", "a@cpu", {}, exclusive=True)
    tuned = Node("tune:a@cpu", "tune", "a@cpu", {}, memos={"database": tmp_path / "db"})
    on_device = Node("validate:a@rpi4", "validate", "a@rpi4", {"device": {"tracker": "127.0.0.1:9190", "key": "rpi4"}})
    assert not cluster(tmp_path).takes(timed)
    assert not cluster(tmp_path).takes(tuned)
    assert not cluster(tmp_path).takes(on_device), "a device is reached through this machine's tracker"


def test_a_job_names_its_inputs_by_digest_with_the_files_a_model_keeps_beside_it(tmp_path):
    (tmp_path / "m").mkdir()
    model, weights = tmp_path / "m" / "net.onnx", tmp_path / "m" / "net.weights"
    model.write_bytes(b"graph")
    weights.write_bytes(b"tensors")
    upstream = tmp_path / "ir.json"
    upstream.write_text("{}")
    ran = cluster(tmp_path)
    ir = ran.store.put_object(upstream)
    stage: Stage = registry.STAGES["compile"]
    node = Node(
        "compile:a@cpu",
        "compile",
        "a@cpu",
        {"target": {"kind": "llvm", "num-cores": 4}, "library": "model.so"},
        files={"model": model},
        deps={"ir": ("import:a", "ir.json")},
    )
    plan = Plan(
        {node.id: node}, {"a@cpu": [node.id]}, {"compile": stage}, companions={"model": lambda d, p: ["net.weights"]}
    )
    key_inputs = {"stage": {"source": "abc"}, "tools": {"tvm": "0.27"}}
    job, uploads = ran._job(plan, node, "k" * 64, key_inputs, {"ir": ir})
    assert job.inputs == {
        "model": [(sha256_file(model), "net.onnx"), (sha256_file(weights), "net.weights")],
        "ir": [(ir, "ir.json")],
    }
    assert set(uploads) == {sha256_file(model), sha256_file(weights), ir}
    assert str(tmp_path) not in repr(job.params) + repr(job.inputs), "no path of the driver's travels"
    assert (job.entry, job.source, job.tools, job.key) == (stage.entry, "abc", {"tvm": "0.27"}, "k" * 64)
    assert job.outputs == tuple(stage.output_names(node.params))


def test_a_lease_holds_against_others_is_renewed_by_its_holder_and_lapses(monkeypatch):
    import modelbuild.engine.cluster_task as task

    now = [100.0]
    monkeypatch.setattr(task.time, "monotonic", lambda: now[0])
    leases = KeyLeases()
    assert leases.claim("key", "first", 30)
    assert not leases.claim("key", "second", 30)
    now[0] += 20
    assert leases.claim("key", "first", 30), "its holder renews it (a retry of the same job holds the same token)"
    now[0] += 20
    assert not leases.claim("key", "second", 30), "renewed 20 s ago: it holds"
    now[0] += 11
    assert leases.claim("key", "second", 30), "not renewed for 31 s: its holder is gone"
    leases.release("key", "first")  # a lapsed holder's release frees nothing
    assert not leases.claim("key", "third", 30)
    leases.release("key", "second")
    assert leases.claim("key", "third", 30)
