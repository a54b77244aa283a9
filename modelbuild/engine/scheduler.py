"""The scheduler: runs a plan's nodes in dependency order, independent ones in parallel processes.

For each ready node it computes the key from the digests of the node's declared files and of its upstream
outputs, asks the rebuilder, reuses a cached result or runs the stage in a worker, then records the result in
the store. It never prints: it reports events.

Builds sharing a store coordinate through its locks: a run holds the store lock shared, and a stage builds
only under its key's lock; a run that finds the key locked waits (saying for whom) and then reuses what the
other built. Builds on one machine, whatever their store, coordinate through its timing lock: a stage that
times here runs with no stage of any build beside it (locks.py). A cached output found damaged when it is used
is dropped and its stage runs again. With a cluster (engine/cluster.py), the stages it takes run there and
come back through the store's remote; the rest run here, -j counting only those.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from modelbuild import progress
from modelbuild.engine.events import (
    NodeFinished,
    NodeProgress,
    NodeResult,
    NodeStarted,
    NodeWaiting,
    Reporter,
    Status,
    silent,
)
from modelbuild.engine.housekeeping import remove_leftovers
from modelbuild.engine.locks import Lock, Locks, timing_lock, timing_queue
from modelbuild.engine.plan import Node, Plan
from modelbuild.engine.reasons import Reason
from modelbuild.engine.rebuilder import Decision, decide_node
from modelbuild.engine.store import ActionResult, DamagedObject, Stats, Store
from modelbuild.engine.worker import die_with_parent, execute
from modelbuild.errors import InputError, Interrupted, StageError

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

    from modelbuild.engine.cluster import Cluster

PROGRESS_POLL_SECONDS = 0.5
LOCK_POLL_SECONDS = 0.2


@dataclass
class RunResult:
    """Every node's outcome in one run, and the cache use it made."""

    results: dict[str, NodeResult] = field(default_factory=dict)
    stats: Stats = field(default_factory=Stats)

    @property
    def failed(self) -> list[NodeResult]:
        return [r for r in self.results.values() if r.status is Status.FAILED]

    @property
    def stale(self) -> list[NodeResult]:
        return [r for r in self.results.values() if r.status is Status.STALE]


@dataclass(frozen=True)
class Options:
    jobs: int = 1
    keep_going: bool = False
    dry_run: bool = False


class Scheduler:
    """Runs one plan against one store, publishing artifacts under `build_dir`. `doubt` says what a node's cached
    result fails, if anything: such a result is not reused but run again (as Bazel never reuses a failed test)."""

    def __init__(
        self,
        plan: Plan,
        store: Store,
        build_dir: Path,
        reporter: Reporter = silent,
        doubt: Callable[[Node, ActionResult], str | None] | None = None,
        cluster: Cluster | None = None,
    ) -> None:
        self.plan = plan
        self.cluster = cluster  # where stages that need not run here run, if anywhere
        self.doubt = doubt
        self.store = store
        self.build_dir = Path(build_dir)
        self.report = reporter
        self.run_result = RunResult()
        self._pool: ProcessPoolExecutor | None = None  # made when the first stage must run here
        self._on_cluster: set = set()  # the running stages' Futures that the cluster runs
        # a running stage's Future -> (node, decision, key inputs, scratch, started, its locks)
        self._running: dict = {}
        self._queued: list[tuple[Node, Decision, dict]] = []  # stale, waiting for one of the -j slots
        self._waiting: list[str] = []  # nodes whose upstream nodes have not finished
        self._told_waiting: set[str] = set()
        self._progress: dict[str, dict] = {}
        # held while a stage of this run waits to time; made when a stage first starts (finding the temp
        # folder writes there, which a build with every stage cached has no need to do)
        self._timing_queue: Lock | None = None

    def run(self, options: Options = Options()) -> RunResult:
        lock = self._hold_store(options)
        try:
            self._loop(options)
        except KeyboardInterrupt:
            running = sorted(node.id for node, *_ in self._running.values())
            self._abandon()
            raise Interrupted(running) from None
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
            self.store.flush()
            if not options.dry_run:
                self.store.add_stats(self.run_result.stats)
            if self._timing_queue is not None:
                self._timing_queue.release()
            lock.release()
        return self.run_result

    def _abandon(self) -> None:
        """Kill the running stages instead of waiting for them (a compile can take minutes): their outputs
        were never recorded, so nothing half-done stays, and their scratch folders go."""
        if self._on_cluster and self.cluster is not None:
            self.cluster.cancel()
        if self._pool is not None:
            # ProcessPoolExecutor has no public way to stop a running task before Python 3.14's
            # terminate_workers(); killing its processes is what that does
            for process in list(getattr(self._pool, "_processes", {}).values()):
                process.kill()
        for _node, _decision, _inputs, scratch, _started, locks in self._running.values():
            shutil.rmtree(scratch, ignore_errors=True)
            locks.release()
        self._running.clear()

    def _hold_store(self, options: Options):
        """The store lock, shared with other builds. The first build in (none running) first removes what
        killed builds left: scratch folders and half-written files."""
        lock = self.store.store_lock(shared=True)
        if options.dry_run or not self.store.writable:
            return lock  # looks only: nothing to protect
        alone = self.store.store_lock(shared=False)
        if alone.try_acquire():
            remove_leftovers(self.store)
            alone.release()
        lock.acquire()
        return lock

    # the loop
    def _loop(self, options: Options) -> None:
        waiting = self._waiting = list(self.plan.nodes)
        stop = False
        while waiting or self._running or self._queued:
            if not stop:
                for node_id in list(waiting):
                    state = self._readiness(node_id)
                    if state == "wait":
                        continue
                    waiting.remove(node_id)
                    if state != "ready":
                        self._finish(
                            NodeResult(
                                node_id,
                                self.plan.nodes[node_id].stage,
                                self.plan.nodes[node_id].build,
                                state[0],
                                reasons=[state[1]],
                            )
                        )
                        continue
                    if not self._visit(self.plan.nodes[node_id], options) and not options.keep_going:
                        stop = True  # a file it declares could not be read; start nothing new
                        break
                if not stop:
                    self._start_queued(options.jobs)
            if self._running:
                if self._collect() and not options.keep_going:
                    stop = True  # let running stages finish; start nothing new
                continue
            if self._queued and not stop:
                time.sleep(LOCK_POLL_SECONDS)  # every queued stage's key is being built by another run
                continue
            if stop or (waiting and all(self._readiness(n) == "wait" for n in waiting)):
                break  # stopped after a failure, or (only with a cycle) nothing can become ready
        for node, _, _ in self._queued:
            waiting.append(node.id)
        for node_id in waiting:
            node = self.plan.nodes[node_id]
            state = self._readiness(node_id)
            reason = state[1] if isinstance(state, tuple) else Reason("stopped")
            self._finish(NodeResult(node_id, node.stage, node.build, Status.SKIPPED, reasons=[reason]))

    def _readiness(self, node_id: str):
        """'ready', 'wait', or (status, reason) when an upstream node cannot give this one its inputs."""
        for dep, _ in self.plan.nodes[node_id].deps.values():
            result = self.run_result.results.get(dep)
            if result is None:
                return "wait"
            if result.status in (Status.FAILED, Status.SKIPPED):
                return (Status.SKIPPED, Reason("upstream-failed", dep, new=result.status.value))
            if result.status is Status.STALE:
                return (Status.STALE, Reason("upstream-reruns", dep))
        return "ready"

    def _visit(self, node: Node, options: Options) -> bool:
        """Reuse the node's cached result, or queue it to run; False if it failed before it could start."""
        started = time.perf_counter()
        judge = self.doubt
        doubt = (lambda result: judge(node, result)) if judge else None
        try:
            files = self._file_digests(node)
        except InputError as err:  # a declared file it names is missing: the node's failure, not the run's
            self._finish(
                NodeResult(node.id, node.stage, node.build, Status.FAILED, error=err.message, exit_code=err.exit_code)
            )
            return False
        decision = decide_node(
            node,
            self.plan.stages[node.stage],
            files=files,
            upstream=self._upstream_digests(node),
            store=self.store,
            doubt=doubt,
        )
        inputs = decision.inputs
        if not decision.stale:
            try:
                self._reuse(node, decision, inputs, started, publish=not options.dry_run)
                return True
            except DamagedObject:
                self.store.forget(decision.key)
                decision = Decision(node.id, decision.key, None, [Reason("damaged")], inputs)
        if options.dry_run:
            self._finish(
                NodeResult(
                    node.id, node.stage, node.build, Status.STALE, decision.key, reasons=decision.reasons, inputs=inputs
                )
            )
        else:
            self._queued.append((node, decision, inputs))
        return True

    def _file_digests(self, node: Node) -> dict[str, str]:
        digests, digesters = self.store.digests, self.plan.digesters
        return {
            role: digesters[role](digests, path) if role in digesters else digests.digest(path)
            for role, path in node.files.items()
        }

    def _upstream_digests(self, node: Node) -> dict[str, str]:
        return {role: self.run_result.results[dep].outputs[name] for role, (dep, name) in node.deps.items()}

    def _stage_inputs(self, node: Node, scratch: Path) -> dict[str, str]:
        """Declared files as they are; upstream outputs hard-linked under their own names (TVM reads the suffix,
        after resolving symlinks), each verified first."""
        paths = {role: str(path) for role, path in (node.files | node.memos).items()}
        for role, (dep, name) in node.deps.items():
            link = scratch / "in" / role / name
            link.parent.mkdir(parents=True)
            self.store.link_object(self.run_result.results[dep].outputs[name], link)
            paths[role] = str(link)
        return paths

    # cached
    def _reuse(self, node: Node, decision: Decision, inputs: dict, started: float, *, publish: bool) -> None:
        cached = decision.result
        assert cached is not None, "a cached node has its result"
        if publish:  # status and report only look: they leave build/ as it is
            self._publish(node, cached.outputs)
        seconds = time.perf_counter() - started
        self.run_result.stats = self.run_result.stats.add(Stats(hits=1, hit_seconds=seconds))
        self._finish(
            NodeResult(
                node.id,
                node.stage,
                node.build,
                Status.CACHED,
                decision.key,
                seconds,
                outputs=cached.outputs,
                inputs=inputs,
                built_seconds=cached.seconds,
            )
        )

    def _publish(self, node: Node, outputs: dict[str, str]) -> None:
        for name, relative in node.publish.items():
            self.store.materialize(outputs[name], self.build_dir / relative)

    # running
    def _start_queued(self, jobs: int) -> None:
        """Start queued stages while fewer than `jobs` run, so a stage's clock starts when it does; a stage whose
        key another run is building waits for it, then reuses its result. An exclusive stage starts once nothing
        runs, and nothing starts beside it: the other stages go first, so -j still overlaps all they can. -j
        counts the stages that run here: a cluster's queue is Ray's, and its stages leave this machine's
        timings alone."""
        for item in sorted(self._queued, key=lambda queued: queued[0].exclusive):  # stable: in order otherwise
            node, decision, inputs = item
            elsewhere = self.cluster is not None and self.cluster.takes(node)
            if not elsewhere:
                here = [other for future, (other, *_) in self._running.items() if future not in self._on_cluster]
                if len(here) >= jobs or any(other.exclusive for other in here) or (node.exclusive and here):
                    continue
            start = self._key_lock_to_start if elsewhere else self._locks_to_start
            locks = start(node, decision.key)
            if locks is None:
                continue
            self._queued.remove(item)
            done_meanwhile = self.store.lookup(decision.key)  # by another run, since this one looked
            if done_meanwhile is not None and not (self.doubt and self.doubt(node, done_meanwhile)):
                locks.release()
                self._reuse(
                    node,
                    Decision(node.id, decision.key, done_meanwhile, inputs=inputs),
                    inputs,
                    time.perf_counter(),
                    publish=True,
                )
                continue
            try:
                self._submit(node, decision, inputs, jobs, locks)
            except DamagedObject as err:
                locks.release()
                self._redo_upstream(node, err)
            except BaseException:  # the cluster does not answer: the run ends, and the key is free again
                locks.release()
                raise

    def _locks_to_start(self, node: Node, key: str) -> Locks | None:
        """The machine's timing lock (exclusive for a stage that times here) and the key's, both held; None,
        and the node told waiting once, where another run holds either, or waits to time (the queue)."""
        machine = self._timing_lock_to_start(node)
        if machine is None:
            return None
        key_lock = self.store.key_lock(key)
        if not key_lock.try_acquire():
            machine.release()
            self._tell_waiting(NodeWaiting(node.id, key_lock.holder()))
            return None
        return Locks((key_lock, machine))

    def _key_lock_to_start(self, node: Node, key: str) -> Locks | None:
        """The key's lock alone, for a stage that runs on the cluster; None where another run holds it."""
        key_lock = self.store.key_lock(key)
        if not key_lock.try_acquire():
            self._tell_waiting(NodeWaiting(node.id, key_lock.holder()))
            return None
        return Locks((key_lock,))

    def _timing_lock_to_start(self, node: Node) -> Lock | None:
        """The machine's timing lock held for the node, or None. A stage that times queues first (and stays
        queued while it waits); any other starts only where no build's stage is queued to time."""
        if self._timing_queue is None:
            self._timing_queue = timing_queue(waiting=True)
        queue = self._timing_queue if node.exclusive else timing_queue(waiting=False)
        if not (queue.held or queue.try_acquire()):
            if not self._timing_queue.held:  # else it is this run's own timing that waits, and it has said so
                self._tell_waiting(NodeWaiting(node.id, queue.holder(), "queued"))
            return None
        machine = timing_lock(exclusive=node.exclusive)
        if not machine.try_acquire():
            if not node.exclusive:
                queue.release()
            # shared holders leave no name in the lock file: only an exclusive holder's is worth showing
            self._tell_waiting(
                NodeWaiting(node.id, "", "timing")
                if node.exclusive
                else NodeWaiting(node.id, machine.holder(), "timed")
            )
            return None
        queue.release()  # timing now: the next may queue
        return machine

    def _tell_waiting(self, event: NodeWaiting) -> None:
        if event.node not in self._told_waiting:
            self._told_waiting.add(event.node)
            self.report(event)

    def _redo_upstream(self, node: Node, err: DamagedObject) -> None:
        """An upstream node's cached output was damaged when this node came to read it: forget that result and
        run both again."""
        for dep, name in node.deps.values():
            upstream = self.run_result.results.get(dep)  # gone already where two inputs come from one node
            if upstream is not None and upstream.outputs.get(name) == err.digest and upstream.key:
                self.store.forget(upstream.key)
                del self.run_result.results[dep]
                self._waiting.append(dep)
        self._waiting.append(node.id)

    def _submit(self, node: Node, decision: Decision, inputs: dict, jobs: int, locks: Locks) -> None:
        if self.cluster is not None and self.cluster.takes(node):
            self._submit_to_cluster(node, decision, inputs, locks)
            return
        if self._pool is None:
            # spawn, not fork: TVM and onnxruntime hold threads that a forked child would inherit broken.
            # imported here: a build whose stages are all cached never starts a pool, nor pays for its import
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(
                max_workers=jobs,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=die_with_parent,
                initargs=(os.getpid(),),
            )
        scratch = self.store.scratch(node.stage + "-")
        try:
            paths = self._stage_inputs(node, scratch)
        except DamagedObject:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        out = scratch / "out"
        out.mkdir()
        log = scratch / "stage.log"
        self.report(NodeStarted(node.id, decision.reasons))
        future = self._pool.submit(
            execute,
            self.plan.stages[node.stage].entry,
            paths,
            node.params,
            str(out),
            str(log),
            str(scratch / "progress.jsonl"),
            self.cluster.environment() if self.cluster is not None else None,
        )
        self._running[future] = (node, decision, inputs, scratch, time.perf_counter(), locks)

    def _submit_to_cluster(self, node: Node, decision: Decision, inputs: dict, locks: Locks) -> None:
        assert self.cluster is not None, "called with a cluster"
        upstream = self._upstream_digests(node)
        future = self.cluster.submit(self.plan, node, decision.key, decision.inputs, upstream)
        self.report(NodeStarted(node.id, decision.reasons))
        scratch = self.store.scratch(node.stage + "-")  # for the log of a failure
        self._on_cluster.add(future)
        self._running[future] = (node, decision, inputs, scratch, time.perf_counter(), locks)

    def _collect(self) -> bool:
        """Wait for at least one running stage, passing on their progress meanwhile; True if one failed."""
        from concurrent.futures import FIRST_COMPLETED, wait  # loaded already: a stage is running
        from concurrent.futures.process import BrokenProcessPool

        done: set = set()
        while not done:
            done, _ = wait(list(self._running), timeout=PROGRESS_POLL_SECONDS, return_when=FIRST_COMPLETED)
            if self._on_cluster and self.cluster is not None:
                self.cluster.keep_claims()
            if not done:
                self._report_progress()
        self._report_progress()  # a stage's last report may land after the last poll
        failed = False
        for future in done:
            node, decision, inputs, scratch, started, locks = self._running.pop(future)
            seconds = time.perf_counter() - started
            try:
                if future in self._on_cluster:
                    self._on_cluster.discard(future)
                    self._take_from_cluster(node, decision, inputs, future, scratch)
                else:
                    seconds = future.result()  # the stage's own time, without the worker's start-up
                    self._check_outputs(node, scratch / "out")
                    self._record(node, decision, inputs, scratch / "out", seconds)
            except (StageError, BrokenProcessPool) as err:
                failed = True
                self._fail(node, decision, err, scratch, seconds)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
                locks.release()
        return failed

    def _check_outputs(self, node: Node, out: Path) -> None:
        """A stage that returned without writing a declared output failed, whatever it says."""
        missing = [n for n in self.plan.stages[node.stage].output_names(node.params) if not (out / n).is_file()]
        if missing:
            raise StageError(
                f"the {node.stage} stage finished without writing {', '.join(missing)}",
                log=str(out.parent / "stage.log"),
            )

    def _report_progress(self) -> None:
        for node, _, _, scratch, _, _ in self._running.values():
            fields = progress.latest(scratch / "progress.jsonl")
            if fields and fields != self._progress.get(node.id):
                self._progress[node.id] = fields
                self.report(NodeProgress(node.id, fields))

    def _record(self, node: Node, decision: Decision, inputs: dict, out: Path, seconds: float) -> None:
        outputs = {p.name: self.store.put_object(p) for p in sorted(out.iterdir()) if p.is_file()}
        self.store.record(decision.key, ActionResult(node.stage, node.id, outputs, seconds))
        self._built(node, decision, inputs, outputs, seconds)

    def _take_from_cluster(self, node: Node, decision: Decision, inputs: dict, future, scratch: Path) -> None:
        """The cluster's result, taken into the store from the remote cache. A key another build had the
        cluster make meanwhile is a hit, as it would be had that build finished before this one looked."""
        assert self.cluster is not None, "a cluster's Future"
        result, outcome = self.cluster.result(future, decision.key, scratch / "stage.log")
        if outcome.built:
            self._built(node, decision, inputs, result.outputs, outcome.seconds)
            return
        self.store.remember(node.id, decision.key, inputs)
        self._reuse(
            node, Decision(node.id, decision.key, result, inputs=inputs), inputs, time.perf_counter(), publish=True
        )

    def _built(self, node: Node, decision: Decision, inputs: dict, outputs: dict[str, str], seconds: float) -> None:
        self.store.remember(node.id, decision.key, inputs)
        self._publish(node, outputs)
        self.run_result.stats = self.run_result.stats.add(Stats(misses=1, miss_seconds=seconds))
        self._finish(
            NodeResult(
                node.id,
                node.stage,
                node.build,
                Status.BUILT,
                decision.key,
                seconds,
                reasons=decision.reasons,
                outputs=outputs,
                inputs=inputs,
            )
        )

    def _fail(self, node: Node, decision: Decision, err: Exception, scratch: Path, seconds: float) -> None:
        if not isinstance(err, StageError):  # BrokenProcessPool
            self._pool = None  # the worker died (a crash in native code); later stages get a fresh pool
            message = "the worker process died (a crash inside the stage's native code)"
        else:
            message = err.message
        log = self._keep_log(node, scratch / "stage.log")
        self._finish(
            NodeResult(
                node.id,
                node.stage,
                node.build,
                Status.FAILED,
                decision.key,
                seconds,
                reasons=decision.reasons,
                error=message,
                log=log,
                exit_code=getattr(err, "exit_code", StageError.exit_code),
            )
        )

    def _keep_log(self, node: Node, log: Path) -> str | None:
        if not log.exists():
            return None
        kept = self.build_dir / "logs" / (node.id.replace(":", "-").replace("@", "-") + ".log")
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, kept)
        return str(kept)

    def _finish(self, result: NodeResult) -> None:
        self.run_result.results[result.node] = result
        self.report(NodeFinished(result))
