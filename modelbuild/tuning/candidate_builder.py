"""MetaSchedule's candidate builder, with one pool of worker processes for a whole search.

TVM's LocalBuilder starts a fresh pool for every batch of candidates (a leak its workers once had after many
uses), and every new worker imports TVM again before it compiles anything. A search sends one batch per task
and iteration, so that import was paid dozens of times: on a 16-core machine tuning four small tasks for an
Arm board, 30 of the tune stage's 98 s went to the builder, almost all of it workers starting. Here the
workers last the whole search, and each is replaced after CANDIDATES_PER_WORKER builds, so a leak stays
bounded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

CANDIDATES_PER_WORKER = 64


@contextlib.contextmanager
def pooled_builder(timeout_s: float, f_export: Callable | None, initializer: Callable | None):
    """A MetaSchedule builder whose workers end with the `with` block."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.builder.local_builder import _serialize_params, _worker_func
    from tvm.s_tir.meta_schedule.utils import cpu_count
    from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

    pool = PopenPoolExecutor(
        max_workers=cpu_count(logical=True),
        timeout=timeout_s,
        initializer=initializer,
        maximum_process_uses=CANDIDATES_PER_WORKER,
    )

    def result(done) -> BuilderResult:  # in LocalBuilder's words
        if done.status == StatusKind.COMPLETE:
            return BuilderResult(done.value, None)
        if done.status == StatusKind.TIMEOUT:
            return BuilderResult(None, f"LocalBuilder: Timeout, killed after {timeout_s} seconds")
        return BuilderResult(None, f"LocalBuilder: An exception occurred\n{done.value}")

    @derived_object
    class PooledBuilder(PyBuilder):
        def build(self, build_inputs) -> list:
            jobs = [(None, f_export, each.mod, each.target, _serialize_params(each.params)) for each in build_inputs]
            return [result(done) for done in pool.map_with_error_catching(lambda job: _worker_func(*job), jobs)]

    try:
        yield PooledBuilder()
    finally:
        pool.shutdown()
