"""The tune stage: MetaSchedule search for the build's kernels, paid once per workload and target.

Measurements go into the target's shared database (a memo under .cache/tuning/, see tuning/database.py). Before
searching, each task's trial count in that database is checked: a workload another model or an earlier run
already tuned to `trials_per_task` is not measured again, and raising `trials_per_task` measures only the
difference. MetaSchedule commits each record as it is measured, so an interrupted run keeps what it measured.
Candidates are measured on this machine, or, for a target with an rpc device, on every device of its key
at the tracker, one candidate at a time on each (measurement/device.py).

Outputs: records.json (the best record of each of this build's tasks, which the compile stage applies) and
tune.json (tasks, trials, best latency per task, and where the stage's seconds went).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.machinery
import importlib.util
import inspect
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

from modelbuild import progress
from modelbuild.compiler import default_schedule, lowering
from modelbuild.errors import StageEnvironmentError, StageError, last_line
from modelbuild.measurement import device as remote
from modelbuild.ray_connection import cluster_for_this_stage
from modelbuild.recipe.params import TuneParams
from modelbuild.recipe.schema import TuningSpec
from modelbuild.sources import imported_closure, source_digest
from modelbuild.stages import contracts
from modelbuild.stages.contracts import Role
from modelbuild.tuning import candidate_timing
from modelbuild.tuning import database as tuning_db
from modelbuild.tuning.candidate_builder import pooled_builder
from modelbuild.tuning.cluster_builder import cluster_builder


def run(*, inputs: dict[str, Path], params: dict, out: Path) -> None:
    import tvm
    from tvm.s_tir import meta_schedule as ms

    p: TuneParams = contracts.read_params(contracts.TUNE, params)
    target, options, tuning = tvm.target.Target(p.target), p.options, p.tuning
    module = tvm.ir.load_json(inputs[Role.IR].read_text())
    with target, tvm.transform.PassContext(opt_level=options.opt_level):
        fused = lowering.lower(module, target, fuse=options.fuse, layout=options.layout).fused
    tasks = ms.relax_integration.extract_tasks(fused, target)
    measurer = Measurer.of(p)
    folder = Path(inputs[Role.DATABASE])
    with tuning_db.locked(folder):
        _seed_database(folder, p.target, inputs.get(Role.RECORDS))
        database = ms.database.JSONDatabase(work_dir=str(folder))
        hashes = [database.commit_workload(t.dispatched[0]).as_json()[0] for t in tasks]
        runner = functools.cache(lambda: measurer.runner(tuning))  # its workers start when first needed
        started = time.monotonic()
        baseline = _defaults(folder, tasks, hashes, target, measurer, runner)
        seconds = {"defaults": time.monotonic() - started}
        trials = tuning_db.read(folder)["trials"]
        todo = _deficits(hashes, trials, tuning, _heaviest(tasks, hashes, baseline, tuning.tasks))
        if todo:
            before = dict(trials)
            ledger = Ledger(folder, trials, [hashes[i] for i in todo], [int(tasks[i].weight) for i in todo])
            seconds |= _search([tasks[i] for i in todo], todo, tuning, database, ledger, measurer, runner())
            ledger.finished(list(todo.values()), before)
        data = tuning_db.read(folder)
    best = _best_records(data, hashes, baseline)
    (out / contracts.TUNED_RECORDS).write_text(json.dumps(best, sort_keys=True))
    (out / contracts.TUNE_SUMMARY).write_text(
        json.dumps(_summary(tasks, hashes, data, todo, best, baseline, seconds, measurer.cluster), indent=1)
    )


def _seed_database(folder: Path, target: dict, records: Path | None) -> None:
    """Make the folder a database for this target, with a committed export merged in when one is declared."""
    data = tuning_db.read(folder)
    data["target"] = target
    if records is not None:
        exported = json.loads(records.read_text())
        for database in exported.get("databases", []):
            if database.get("target") == target:
                data = tuning_db.merge(data, database)
    tuning_db.write(folder, data)


def _heaviest(tasks, hashes: list[str], baseline: dict[str, float | None], count: int | None) -> set[int]:
    """Indices of the `count` tasks with the most time under the default schedule (seconds x calls); all
    of them when count is None. A task whose default could not be timed ranks first: it may be the slowest."""
    if count is None:
        return set(range(len(hashes)))
    cost = [
        (baseline.get(h) if baseline.get(h) is not None else float("inf")) * int(t.weight)
        for t, h in zip(tasks, hashes)
    ]
    return set(sorted(range(len(hashes)), key=lambda i: -cost[i])[:count])


def _deficits(hashes: list[str], trials: dict, tuning: TuningSpec, chosen: set[int]) -> dict[int, int]:
    """Task index -> trials still owed, for the chosen tasks, capped by max_trials in task order."""
    owed = {i: tuning.trials_per_task - trials.get(h, 0) for i, h in enumerate(hashes) if i in chosen}
    owed = {i: n for i, n in owed.items() if n > 0}
    cap = tuning.max_trials
    if cap is not None:
        left, capped = cap, {}
        for i, n in owed.items():
            if left <= 0:
                break
            capped[i], left = min(n, left), left - min(n, left)
        owed = capped
    return dict(sorted({h: n for h, n in owed.items()}.items()))


class Ledger:
    """Counts trials per workload as they are measured, writing them through so an interrupted run keeps its
    count, and reports progress: tasks done, trials, and the model latency estimated from the best so far."""

    def __init__(self, folder: Path, trials: dict, hashes: list[str], weights: list[int]) -> None:
        self.folder, self.trials, self.hashes, self.weights = folder, trials, hashes, weights
        self.best = [None] * len(hashes)
        self.measured = [0] * len(hashes)

    def measured_batch(self, task: int, seconds: list[float], planned: dict[int, int]) -> None:
        shash = self.hashes[task]
        self.trials[shash] = self.trials.get(shash, 0) + len(seconds)
        self.measured[task] += len(seconds)
        finite = [s for s in seconds if s < 1e9]
        if finite and (self.best[task] is None or min(finite) < self.best[task]):
            self.best[task] = min(finite)
        data = tuning_db.read(self.folder)
        tuning_db.write(self.folder, {**data, "trials": self.trials})
        self._report(planned)

    def finished(self, owed: list[int], before: dict) -> None:
        """The search is over: a workload counts as tuned to what was asked, even if MetaSchedule found fewer
        distinct candidates than that (a small search space), so it is not searched again next time."""
        for shash, need in zip(self.hashes, owed):
            self.trials[shash] = max(self.trials.get(shash, 0), before.get(shash, 0) + need)
        data = tuning_db.read(self.folder)
        tuning_db.write(self.folder, {**data, "trials": self.trials})

    def _report(self, planned: dict[int, int]) -> None:
        done = sum(m >= planned[i] for i, m in enumerate(self.measured))
        total = sum(planned.values())
        estimate = sum(w * b for w, b in zip(self.weights, self.best) if b is not None) * 1000
        progress.report(
            message=f"tasks {done}/{len(self.hashes)}  trials {sum(self.measured)}/{total}  "
            f"est. {estimate:.3f} ms (tuned tasks)",
            tasks=len(self.hashes),
            tasks_done=done,
            trials=sum(self.measured),
            planned=total,
            estimate_ms=estimate,
            best_us=[b * 1e6 if b is not None else None for b in self.best],
        )


def _progress_callback(ledger: Ledger, planned: dict[int, int]):
    """A MetaSchedule measure callback that feeds the ledger after each measured batch."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class ProgressCallback(PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
            seconds = []
            for result in runner_results:
                runs = [float(getattr(s, "value", s)) for s in (result.run_secs or [])]
                seconds.append(statistics.fmean(runs) if runs and not result.error_msg else float("inf"))
            ledger.measured_batch(task_id, seconds, planned)

    return ProgressCallback()


@dataclass(frozen=True)
class Measurer:
    """Where candidates run: this machine, or the devices of one key at an RPC tracker, where each candidate
    is linked into a .so by the target's cross-compiler (so the device needs no compiler of its own)."""

    device: dict | None = None
    cross_compiler: str | None = None
    devices: int = 1  # of the key at the tracker: one candidate at a time on each, so N boards measure N-fold
    # candidates compiled on the build's Ray cluster, where it has one (the "compiled" count)
    cluster: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, p: TuneParams) -> Measurer:
        if not p.device:
            return cls()
        try:  # before anything is measured: a device that cannot be had ends the stage at once
            devices = remote.count(p.device)
        except remote.DeviceUnavailable as err:  # the environment's, not the recipe's: exit 4, nothing cached
            raise StageEnvironmentError(str(err)) from None
        return cls(p.device, p.cross_compiler, devices)

    def builder(self, tuning: TuningSpec, target_kind: str):
        """A context: the builder's worker processes (or its connection to the build's cluster) end with it.
        Where candidates compile never changes what they are, so the cluster is not in the stage's key."""
        export = functools.partial(export_shared, compiler=self.cross_compiler) if self.cross_compiler else None
        intrinsics = functools.partial(import_tensor_intrinsics, target_kind)
        cluster = cluster_for_this_stage()
        if cluster:
            return cluster_builder(cluster, tuning.timeout_s, export, intrinsics, self.cluster)
        return pooled_builder(tuning.timeout_s, export, intrinsics)

    @contextlib.contextmanager
    def exported(self, module):
        """A library file the device loads, exported as the builder exports candidates, each into a folder of
        its own, which goes afterwards (MetaSchedule removes its candidates' in a measure callback; this one
        is no candidate)."""
        from tvm.s_tir.meta_schedule.builder.local_builder import default_export

        path = export_shared(module, self.cross_compiler) if self.cross_compiler else default_export(module)
        try:
            yield path
        finally:
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)

    def runner(self, tuning: TuningSpec):
        from tvm.s_tir import meta_schedule as ms

        config = ms.runner.EvaluatorConfig(
            number=tuning.number, repeat=tuning.repeat, min_repeat_ms=tuning.min_repeat_ms
        )
        if not self.device:
            return ms.runner.LocalRunner(
                timeout_sec=tuning.timeout_s, evaluator_config=config, f_run_evaluator=candidate_timing.time_candidate
            )
        host, _, port = self.device["tracker"].rpartition(":")
        rpc = ms.runner.RPCConfig(
            tracker_host=host,
            tracker_port=int(port),
            tracker_key=self.device["key"],
            session_timeout_sec=max(tuning.timeout_s, self.device["timeout"]),
        )
        return ms.runner.RPCRunner(
            rpc_config=rpc,
            evaluator_config=config,
            max_workers=self.devices,
            f_run_evaluator=candidate_timing.time_candidate_remotely,
        )


def export_shared(module, compiler: str) -> str:
    """A candidate as a .so linked by `compiler` (MetaSchedule's own export writes a .tar, which the device
    would have to link itself)."""
    from tvm.support import cc

    path = os.path.join(tempfile.mkdtemp(prefix="modelbuild-candidate-"), "candidate.so")
    module.export_library(path, fcompile=cc.cross_compiler(compiler))
    return path


# MetaSchedule's profiler's names for the search's waits on the builder and on the runner's results
SEARCH_PHASES = {"builder": "SendToBuilder", "runner_waits": "JoinRunnerFutures"}


def require_cost_model(cost_model: str) -> None:
    """MetaSchedule's xgb cost model needs xgboost, a dependency of modelbuild a user may have removed."""
    import importlib.util

    if cost_model == "xgb" and importlib.util.find_spec("xgboost") is None:
        raise StageError(
            'cost_model = "xgb" needs xgboost: pip install xgboost-cpu (as modelbuild\'s dependencies name it), '
            'or set cost_model = "random" in the tuning section'
        )


def _search(
    tasks, owed: dict[int, int], tuning: TuningSpec, database, ledger: Ledger, measurer: Measurer, runner
) -> dict[str, float]:
    """Search the tasks for what they are owed; returns the search's seconds, and of them the waits on the
    builder and on the runner (where more devices help: the rest is proposing candidates on this host)."""
    from tvm.s_tir import meta_schedule as ms

    require_cost_model(tuning.cost_model)

    per_task = max(owed.values())
    target_kind = tasks[0].target.kind.name
    import_tensor_intrinsics(target_kind)
    with tempfile.TemporaryDirectory(prefix="modelbuild-tune-") as work_dir:
        contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
            tasks, work_dir=work_dir, strategy=tuning.strategy, seed=tuning.seed
        )
        planned = dict(enumerate(owed.values()))
        callbacks = [*ms.measure_callback.MeasureCallback.create("default"), _progress_callback(ledger, planned)]
        started = time.monotonic()
        with measurer.builder(tuning, target_kind) as builder, ms.Profiler() as profiler:
            try:
                ms.tune_tasks(
                    tasks=contexts,
                    task_weights=weights,
                    work_dir=work_dir,
                    max_trials_global=sum(owed.values()),
                    max_trials_per_task=per_task,
                    num_trials_per_iter=min(64, per_task),
                    database=database,
                    cost_model=tuning.cost_model,
                    measure_callbacks=callbacks,
                    builder=builder,
                    runner=runner,
                )
            except Exception as err:
                raise StageError(f"MetaSchedule tuning failed: {last_line(err)}") from err
        phases = profiler.get()
    return {
        "search": time.monotonic() - started,
        **{name: float(phases.get(phase, 0.0)) for name, phase in SEARCH_PHASES.items()},
    }


# TVM's GPU and Hexagon tensor intrinsics, which no CPU target tensorises with: 6.5 of the 7.4 s the package
# takes to import on a 2-core Zen 3 (cuda.py alone 5.5 s), paid by the tune stage and by each build worker
NOT_FOR_CPU = ("cuda", "rocm", "hexagon")


def import_tensor_intrinsics(target_kind: str = "llvm") -> None:
    """Import tvm.s_tir.tensor_intrin, which MetaSchedule imports in every tune context and in every build
    worker of every batch: for a CPU target in under a second (a plain import took 25-36 s on an earlier
    2-core machine; with only the first fix below, 7.4 s on a 2-core Zen 3).

    Each of its hundreds of T.prim_func decorators calls inspect.stack(), which looks up the module of
    every frame; the import machinery's frames are "<frozen importlib._bootstrap>", which no module owns,
    so each lookup scans all of sys.modules and asks TVM's lazy modules for attributes, 24 million calls
    in all. A build worker importing it inside its timed task ran out the 30 s build timeout, and every
    candidate of a batch failed. Here a filename that is not a path is remembered as owned by no module
    for the length of the import; paths are looked up as before. For a CPU target the GPU and Hexagon
    intrinsics are deferred: their modules run when something first reads them, not at the import."""
    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    if target_kind == "llvm":
        _defer("tvm.s_tir.tensor_intrin", NOT_FOR_CPU)
    lookup = inspect.getmodule
    unowned: set[str] = set()

    def getmodule(obj, _filename=None):
        if _filename is not None and _filename.startswith("<") and _filename in unowned:
            return None
        module = lookup(obj, _filename)
        if module is None and _filename is not None and _filename.startswith("<"):
            unowned.add(_filename)
        return module

    inspect.getmodule = getmodule
    try:
        import tvm.s_tir.tensor_intrin  # noqa: F401
    finally:
        inspect.getmodule = lookup


class _Deferred(types.ModuleType):
    """A module whose code runs when one of its own names is first read (the import system reads only its
    dunder attributes, which module_from_spec has set)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        self.__class__ = types.ModuleType
        self.__spec__.loader.exec_module(self)
        return getattr(self, name)


def _defer(package: str, names: tuple[str, ...]) -> None:
    """Put the package's submodules `names` in sys.modules unexecuted, so the package's `from . import name`
    binds them without running them. Found on the package's path, not with importlib.util.find_spec, which
    would import the package, and the submodules with it."""
    parent, _, last = package.rpartition(".")
    folders = [os.path.join(path, last) for path in importlib.import_module(parent).__path__]
    for name in names:
        spec = importlib.machinery.PathFinder.find_spec(f"{package}.{name}", folders)
        if spec is None or spec.name in sys.modules:
            continue
        module = importlib.util.module_from_spec(spec)
        module.__class__ = _Deferred
        sys.modules[spec.name] = module


def _mean_seconds(record: list) -> float:
    run_secs = record[1] or [float("inf")]
    return statistics.fmean(float(s) for s in run_secs)


def _defaults(folder: Path, tasks, hashes: list[str], target, measurer: Measurer, runner) -> dict[str, float | None]:
    """Each task's time under the default schedule: measured once per workload and version of the compile code
    (its source digest: the default schedule changes without a version bump), then kept in the database (and
    its exports), so every later run and every clone compares against the same. `runner()` gives the
    search's runner."""
    version = source_digest(imported_closure(default_schedule.__name__))
    data = tuning_db.read(folder)
    known = data["defaults"]
    stale = [i for i, shash in enumerate(hashes) if known.get(shash, {}).get("modelbuild") != version]
    if stale:
        progress.report(message=f"timing the default schedule of {len(stale)} of {len(tasks)} tasks")
        seconds = _default_seconds([tasks[i] for i in stale], target, measurer, runner())
        known.update({hashes[i]: {"modelbuild": version, "seconds": s} for i, s in zip(stale, seconds)})
        tuning_db.write(folder, {**data, "defaults": known})
    return {h: known[h]["seconds"] for h in hashes}


def _default_seconds(tasks, target, measurer: Measurer, runner) -> list[float | None]:
    """How fast each task's kernel runs with modelbuild's default schedule, timed as its tuning candidates are
    (by the search's runner: on the candidates' device, N devices timing N kernels at once), so a tuned
    record is applied only where it beats it. None where the default schedule cannot be timed."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    device_type = tvm.runtime.device(target.get_target_device_type()).type  # "cpu" for llvm
    with contextlib.ExitStack() as exported:
        inputs: dict[int, RunnerInput] = {}
        for i, task in enumerate(tasks):
            func = task.dispatched[0]["main"]
            scheduled = default_schedule.schedule_function(func, default_schedule.machine(target)) or func
            try:
                library = tvm.compile(tvm.IRModule({"main": scheduled}), target=target)
                # tvm.compile returns an Executable around the module
                path = exported.enter_context(measurer.exported(getattr(library, "mod", library)))
            except Exception:  # an untimable default never blocks a tuned record
                continue
            inputs[i] = RunnerInput(path, device_type, ArgInfo.from_prim_func(scheduled))
        results = [future.result() for future in runner.run(list(inputs.values()))]
    seconds: list[float | None] = [None] * len(tasks)
    for i, result in zip(inputs, results):
        if result.error_msg is None and result.run_secs:
            seconds[i] = statistics.median(float(getattr(s, "value", s)) for s in result.run_secs)
    return seconds


def _best_records(data: dict, hashes: list[str], baseline: dict[str, float | None]) -> dict:
    """A database holding the fastest record of each task, for the tasks where it beats the default schedule:
    what the compile stage applies. Tuning with a small budget can find worse schedules than the default."""
    index = {w[0]: i for i, w in enumerate(data["workloads"])}
    best: dict[str, list] = {}
    for i, record in data["records"]:
        shash = data["workloads"][i][0]
        if shash in hashes and _mean_seconds(record) < 1e9:
            if shash not in best or _mean_seconds(record) < _mean_seconds(best[shash]):
                best[shash] = record
    chosen = sorted(h for h in best if baseline.get(h) is None or _mean_seconds(best[h]) < baseline[h])
    return {
        "target": data["target"],
        "workloads": [data["workloads"][index[h]] for h in chosen],
        "records": [[n, best[h]] for n, h in enumerate(chosen)],
        "trials": {},
        "defaults": {},
    }


def _summary(tasks, hashes, data, todo, best, baseline, seconds: dict[str, float], cluster: dict[str, int]) -> dict:
    applied = {w[0]: _mean_seconds(r) for w, (_, r) in zip(best["workloads"], best["records"])}

    def used(h):  # the seconds of what the compile stage will use for this task
        return applied.get(h, baseline.get(h)) or 0.0

    return {
        "tasks": [
            {
                "name": t.task_name,
                "workload": h,
                "weight": int(t.weight),
                "trials": data["trials"].get(h, 0),
                "measured_now": todo.get(i, 0),
                "tuned_us": applied[h] * 1e6 if h in applied else None,
                "default_us": baseline[h] * 1e6 if baseline.get(h) else None,
                "applied": "tuned" if h in applied else "default",
            }
            for i, (t, h) in enumerate(zip(tasks, hashes))
        ],
        "measured_now": sum(todo.values()),
        "tuned_tasks": len(applied),
        "estimated_latency_us": sum(used(h) * t.weight for t, h in zip(tasks, hashes)) * 1e6,
        "seconds": {name: round(value, 3) for name, value in seconds.items()},
        "compiled_on_cluster": cluster.get("compiled", 0),
    }
