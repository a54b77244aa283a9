"""The tune stage's candidate builder: one pool of worker processes for many batches, renewed now and then,
gone with the search."""

from __future__ import annotations

import functools
import os
import shutil

from modelbuild.stages.tune import import_tensor_intrinsics
from modelbuild.tuning import candidate_builder

# as the tune stage starts its workers: without TVM's GPU tensor intrinsics, most of what a worker imports
START_WORKER = functools.partial(import_tensor_intrinsics, "llvm")


def doubling_inputs(count: int) -> list:
    import tvm
    from tvm import te
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    a = te.placeholder((16,), name="a")
    b = te.compute((16,), lambda i: a[i] * 2, name="b")
    module = tvm.IRModule({"main": te.create_prim_func([a, b])})
    return [BuilderInput(module, tvm.target.Target("llvm")) for _ in range(count)]


def export_noting_worker(folder: str):
    """An f_export that exports as MetaSchedule does and leaves a file named by the worker's pid."""

    def export(module) -> str:
        import os
        import pathlib

        from tvm.s_tir.meta_schedule.builder.local_builder import default_export

        pathlib.Path(folder, str(os.getpid())).touch()
        return default_export(module)

    return export


def workers_of(batch, folder) -> set[int]:
    """The pids of the workers that built the batch; its artifacts are removed (as the search's callback
    removes them)."""
    assert all(result.error_msg is None and os.path.exists(result.artifact_path) for result in batch)
    for result in batch:
        shutil.rmtree(os.path.dirname(result.artifact_path))
    pids = {int(p) for p in os.listdir(folder)}
    for p in os.listdir(folder):
        os.remove(os.path.join(folder, p))
    return pids


def test_batches_share_the_workers_each_renewed_after_its_share_and_none_outlives_the_search(tmp_path, monkeypatch):
    monkeypatch.setattr(candidate_builder, "CANDIDATES_PER_WORKER", 3)
    with candidate_builder.pooled_builder(60, export_noting_worker(str(tmp_path)), START_WORKER) as builder:
        # one candidate a batch: the pool's idle thread, and so its worker, takes each
        workers = [workers_of(builder.build(doubling_inputs(1)), tmp_path) for _ in range(4)]
    # TVM's LocalBuilder starts new workers, each importing TVM, for every batch
    assert workers[0] == workers[1] == workers[2]
    assert workers[3] != workers[0]  # its three builds done, the worker was replaced: a leak stays bounded
    assert not [pid for pid in set.union(*workers) if os.path.exists(f"/proc/{pid}")]


def test_a_candidate_that_fails_to_build_is_a_result_with_the_reason_not_a_failed_search(tmp_path):
    def export_failing(module) -> str:
        raise RuntimeError("no linker for this candidate")

    with candidate_builder.pooled_builder(60, export_failing, START_WORKER) as builder:
        (result,) = builder.build(doubling_inputs(1))
    assert result.artifact_path is None and "no linker for this candidate" in result.error_msg
