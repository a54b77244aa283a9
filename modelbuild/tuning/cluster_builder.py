"""MetaSchedule's candidate builder on a Ray cluster: each batch's candidates compile as Ray tasks, one CPU
each, and come back as library files that the runner measures here (or on the RPC devices), as before.

Compiling is most of a search's work that does not measure, and any machine with the same TVM compiles a
candidate to the same code for a target named in full; measuring stays where the target is.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from modelbuild.errors import EnvironmentFailure, StageEnvironmentError
from modelbuild.ray_connection import connect

RETRIES = 3  # a candidate whose worker died compiles again elsewhere


@contextlib.contextmanager
def cluster_builder(
    address: str, timeout_s: float, f_export: Callable | None, initializer: Callable | None, tally: dict[str, int]
):
    """A MetaSchedule builder whose candidates compile on the cluster at `address`, connected for the `with`
    block; tally["compiled"] counts the candidates it compiled. StageEnvironmentError where the cluster does
    not answer."""
    import ray
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.builder.local_builder import _serialize_params

    try:
        connect(address)
    except EnvironmentFailure as err:  # the stage's failure, and the machine's: exit 4, nothing cached
        raise StageEnvironmentError(str(err)) from None
    compile_on_worker = ray.remote(num_cpus=1, max_retries=RETRIES)(compile_candidate)

    def result(ref) -> BuilderResult:  # in LocalBuilder's words, where it has them
        try:
            name, data = ray.get(ref, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref, force=True)
            return BuilderResult(None, f"ClusterBuilder: Timeout, killed after {timeout_s} seconds")
        except Exception as err:  # the candidate's own error, as the worker raised it
            return BuilderResult(None, f"ClusterBuilder: An exception occurred\n{err}")
        # a folder per candidate: MetaSchedule's measure callback removes the artifact's folder
        path = Path(tempfile.mkdtemp(prefix="modelbuild-candidate-")) / name
        path.write_bytes(data)
        return BuilderResult(str(path), None)

    @derived_object
    class ClusterBuilder(PyBuilder):
        def build(self, build_inputs) -> list:
            refs = [
                compile_on_worker.remote(each.mod, each.target, _serialize_params(each.params), f_export, initializer)
                for each in build_inputs
            ]
            results = [result(ref) for ref in refs]
            tally["compiled"] = tally.get("compiled", 0) + sum(1 for r in results if r.artifact_path)
            return results

    try:
        yield ClusterBuilder()
    finally:
        ray.shutdown()


def compile_candidate(
    mod, target, params, f_export: Callable | None, initializer: Callable | None
) -> tuple[str, bytes]:
    """On a worker: the candidate built and exported as MetaSchedule's local builder does; its file's name and
    bytes (the folder it was exported to goes)."""
    from tvm.s_tir.meta_schedule.builder.local_builder import _worker_func

    if initializer is not None:
        initializer()
    path = Path(_worker_func(None, f_export, mod, target, params))
    try:
        return path.name, path.read_bytes()
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)
