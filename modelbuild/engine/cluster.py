"""A Ray cluster as the build's executor: every stage that does not time on this machine runs there as a Ray
task, with the remote cache as the store both sides share.

The driver gives the remote cache the files a job reads (declared files, upstream outputs), submits the job
with the CPUs its stage uses, and takes the job's entry from the remote cache as it takes any remote hit,
each object checked against its digest. A stage that times (validation, tuning's measurements) stays on this
machine, whose speed it measures, as does a stage that extends a memo here (the tuning database).

Ray is imported only once a stage must run: a build whose stages are all cached submits nothing and starts
no connection. The connection is Ray Client's (ray://HOST:PORT), so the driver needs only to reach the head.
"""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from modelbuild.engine.cluster_task import (
    LEASE_SECONDS,
    LEASES,
    ClusterJob,
    KeyLeases,
    Outcome,
    run_job,
    wait_for_key,
)
from modelbuild.engine.executors import ExecutorChoice
from modelbuild.engine.plan import Node, Plan
from modelbuild.engine.remote import redact
from modelbuild.engine.sealing import SIGNING_KEY_ENV
from modelbuild.engine.store import ActionResult, Store
from modelbuild.errors import (
    EnvironmentFailure,
    InputError,
    ModelbuildError,
    StageEnvironmentError,
    StageError,
    last_line,
)
from modelbuild.ray_connection import CLUSTER_ENV, FALLBACK_ENV, NAMESPACE, connect

HEAD_NODE = "node:__internal_head__"  # the resource only a cluster's head offers
# a task whose worker dies (its node killed, out of memory) runs again elsewhere this many times
RETRIES = 3
# what a worker needs of the driver's environment to reach the remote cache and seal entries as this team
FORWARDED_ENV = (
    SIGNING_KEY_ENV,
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
)


class Cluster:
    """The cluster one run submits to; connected when the run first needs it, and closed by its owner."""

    def __init__(self, choice: ExecutorChoice, store: Store) -> None:
        assert choice.address is not None, "a cluster has an address"
        self.choice = choice
        self.store = store
        self._connected = False
        self._given_up = False  # auto: the cluster did not answer, and the run builds here
        self._task: Any = None  # run_job as a Ray remote function
        self._gate: Any = None  # wait_for_key, likewise
        self._leases: Any = None  # the cluster's KeyLeases actor
        self._claims: dict[str, str] = {}  # key -> token, of the jobs this run has submitted and not taken
        self._renewed = 0.0
        self._largest = 1  # CPUs of the cluster's largest node: a task asking more could never be placed
        self._refs: dict[Future, object] = {}
        # objects this run knows the remote holds (given to it, or taken from it): not offered again, as each
        # offer costs the remote a look (a HEAD on S3)
        self._in_remote: set[str] = set()

    @property
    def address(self) -> str:
        return redact(self.choice.address or "")

    def takes(self, node: Node) -> bool:
        """Whether this node runs on the cluster: not where it times or keeps a memo here, nor where it reaches
        a device through this machine's RPC tracker, nor once an `auto` cluster has not answered."""
        if node.exclusive or node.memos or node.params.get("device") or self._given_up:
            return False
        if not self._connected:
            try:
                self._connect()
            except ModelbuildError as err:  # no answer (EnvironmentFailure), or no remote cache
                if not self.choice.fallback:
                    raise
                self._given_up = True
                self.store.note(f"{err}; building on this machine (--executor auto)")
                return False
        return True

    def environment(self) -> dict[str, str]:
        """What a stage that runs here is told of the cluster, to send work of its own there (tuning's
        candidate compiles): nothing once an `auto` cluster has not answered."""
        if self._given_up or self.choice.address is None:
            return {}
        return {CLUSTER_ENV: self.choice.address} | ({FALLBACK_ENV: "1"} if self.choice.fallback else {})

    def submit(self, plan: Plan, node: Node, key: str, key_inputs: dict, upstream: dict[str, str]) -> Future:
        """Start the node's stage on the cluster; the Future's result is the job's Outcome."""
        job, uploads = self._job(plan, node, key, key_inputs, upstream)
        remote = self.store.remote
        assert remote is not None, "checked when connecting"
        remote.put_objects(uploads)
        if remote.broken:
            raise EnvironmentFailure(f"the cluster's inputs could not be given to the remote cache: {remote.notes[-1]}")
        self._in_remote |= set(uploads)
        cpus = min(self._largest, _cpus(node))
        claimed = self._claim(node, key, job)
        ref = self._task.options(num_cpus=cpus, max_retries=RETRIES, retry_exceptions=False, name=node.id).remote(
            job, claimed
        )
        future = ref.future()
        self._refs[future] = ref
        return future

    def _claim(self, node: Node, key: str, job: ClusterJob):
        """True where the key is this job's now; else a task that waits for it (see wait_for_key). Either way the
        run renews the job's claim until the job is done (keep_claims)."""
        import ray

        self._claims[key] = job.token
        if ray.get(self._leases.claim.remote(key, job.token, LEASE_SECONDS)):
            return True
        return self._gate.options(num_cpus=0, max_retries=RETRIES, name=f"{node.id} (waits for its key)").remote(
            key, job.token, job.remote
        )

    def keep_claims(self) -> None:
        """Renew the claims of this run's jobs, as often as a claim needs; the scheduler calls it as it waits."""
        if self._claims and time.monotonic() - self._renewed > LEASE_SECONDS / 3:
            for key, token in self._claims.items():
                self._leases.claim.remote(key, token, LEASE_SECONDS)  # not waited for
            self._renewed = time.monotonic()

    def _let_go(self, key: str) -> None:
        token = self._claims.pop(key, None)
        if token is not None:
            self._leases.release.remote(key, token)

    def result(self, future: Future, key: str, log: Path) -> tuple[ActionResult, Outcome]:
        """The job's result, taken from the remote cache into the local store; a failed job raises StageError
        with its log written to `log`."""
        ref = self._refs.pop(future, None)
        try:
            outcome: Outcome = future.result()
            self._let_go(key)
        except Exception as err:  # Ray's own: the task's workers all died, or the cluster went away
            self._let_go(key)
            raise StageError(
                f"the cluster could not run it ({type(err).__name__}: {last_line(err)})",
                log=None,
            ) from None
        finally:
            del ref
        if outcome.error is not None:
            if outcome.log:
                log.write_text(outcome.log)
            raise _failure(outcome.exit_code)(outcome.error, log=str(log) if outcome.log else None)
        result = self.store.lookup(key)
        if result is None:
            raise StageError(
                "the cluster built it, and its result could not be taken from the remote cache: "
                + "; ".join(self.store.messages()[:-1] or ["not there"])
            )
        self._in_remote |= set(result.outputs.values())
        return result, outcome

    def cancel(self) -> None:
        """Stop every job this run submitted that still runs (a build interrupted)."""
        import ray

        for ref in self._refs.values():
            ray.cancel(ref, force=True)
        self._refs.clear()
        for key in list(self._claims):
            self._let_go(key)

    def close(self) -> None:
        if self._connected:
            import ray

            ray.shutdown()
            self._connected = False

    # connecting
    def _connect(self) -> None:
        remote = self.store.remote
        if remote is None or not remote.writable:
            raise ModelbuildError(
                f"the Ray executor at {self.address} needs a remote cache its workers can reach, read and "
                "written (fix: set [cache] remote or MODELBUILD_REMOTE_CACHE, in readwrite mode)"
            )
        env = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
        env["MODELBUILD_REMOTE_CACHE"] = remote.url
        connect(self.choice.address or "", env=env)
        import ray

        # on the head, which lives as long as the cluster does (a worker node may go at any time), and
        # restarted should its process die: its leases lost, a key is at worst built twice, never damaged
        self._leases = (
            ray.remote(KeyLeases)
            .options(
                name=LEASES,
                namespace=NAMESPACE,
                lifetime="detached",
                get_if_exists=True,
                num_cpus=0,
                resources={HEAD_NODE: 0.001},
                max_restarts=-1,
                max_task_retries=-1,
            )
            .remote()
        )
        self._task = ray.remote(run_job)
        self._gate = ray.remote(wait_for_key)
        self._largest = max((int(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n["Alive"]), default=1) or 1
        self._connected = True

    def _job(
        self, plan: Plan, node: Node, key: str, key_inputs: dict, upstream: dict[str, str]
    ) -> tuple[ClusterJob, dict[str, Path]]:
        """The job, and the objects the remote cache must hold for it: declared files with their companions,
        and upstream outputs (a result built here before the remote was set may be only in the local store)."""
        digests, uploads = self.store.digests, dict[str, Path]()
        inputs: dict[str, list[tuple[str, str]]] = {}
        for role, path in node.files.items():
            beside = plan.companions[role](digests, path) if role in plan.companions else []
            files = [path, *(path.parent / name for name in beside)]
            names = [path.name, *beside]
            inputs[role] = [(digests.digest(file), name) for file, name in zip(files, names)]
            uploads |= {digests.digest(file): file for file in files if digests.digest(file) not in self._in_remote}
        for role, (_, name) in node.deps.items():
            digest = upstream[role]
            inputs[role] = [(digest, name)]
            if digest not in self._in_remote:
                uploads[digest] = self.store.verified(digest)
        stage = plan.stages[node.stage]
        job = ClusterJob(
            node=node.id,
            stage=node.stage,
            key=key,
            entry=stage.entry,
            params=node.params,
            inputs=inputs,
            outputs=tuple(stage.output_names(node.params)),
            modules=tuple(stage.modules),
            source=key_inputs["stage"]["source"],
            tools=dict(key_inputs["tools"]),
            remote=self.store.remote.url if self.store.remote else "",
            token=uuid.uuid4().hex,
        )
        return job, uploads


def _failure(exit_code: int | None) -> type[StageError]:
    """The error class a worker's failure had, by its exit code (the user's input, the machine, the stage)."""
    return {InputError.exit_code: InputError, StageEnvironmentError.exit_code: StageEnvironmentError}.get(
        exit_code or StageError.exit_code, StageError
    )


def _cpus(node: Node) -> int:
    """The CPUs a stage uses: a target's cores for a compile, the threads a timing uses, else one."""
    target = node.params.get("target")
    cores = target.get("num-cores") if isinstance(target, dict) else None
    return int(cores or node.params.get("threads") or 1)
