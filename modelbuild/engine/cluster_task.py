"""One stage on a cluster worker: its inputs taken from the remote cache by digest and verified, the same
stage code run on them, its outputs and then its entry given back to the remote cache.

The driver then takes the entry as it takes any remote hit, objects verified on the way in. Nothing here
writes anywhere a reader looks until the entry, which is written last, so a worker killed at any point
leaves nothing that is served: the task is retried elsewhere and starts over.

A key is built once across the cluster, whatever the drivers: the driver claims a job's key in the cluster's
one `KeyLeases` actor before it submits the job, and renews the claim while the job runs; a job whose key
another job holds waits (`wait_for_key`, a task of its own), then takes what the other made. A claim lapses
unless renewed, so the key of a driver that died is freed; a job retried after its worker died holds the
same token, and so the same claim.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from modelbuild.engine.remote import Remote
from modelbuild.engine.sealing import seal, signing_key, unseal
from modelbuild.engine.store import ActionResult
from modelbuild.errors import EnvironmentFailure, StageError
from modelbuild.hashing import sha256_file
from modelbuild.ray_connection import NAMESPACE

LEASES = "modelbuild-key-leases"
LEASE_SECONDS = 30.0  # a claim not renewed for this long lapses: its job's node is gone
POLL_SECONDS = 0.5
LOG_TAIL = 20_000  # characters of a failed stage's log sent back to the driver


@dataclass(frozen=True)
class ClusterJob:
    """What a worker needs to run one node's stage, all of it by value or by digest: no path of the driver's."""

    node: str
    stage: str
    key: str
    entry: str  # module:function
    params: dict
    # role -> [(digest, name)]: the file the role names first, then those it keeps beside it (external data)
    inputs: dict[str, list[tuple[str, str]]]
    outputs: tuple[str, ...]  # the files the stage must write
    modules: tuple[str, ...]  # the stage's code, whose digest is in the key ...
    source: str  # ... and that digest as the driver computed it
    tools: dict[str, str]  # the tool versions in the key
    remote: str  # the remote cache's URL
    token: str  # this job's claim on its key; a retry of the job holds the same


@dataclass(frozen=True)
class Outcome:
    built: bool  # False: another job built the key, and its entry is in the remote cache
    seconds: float = 0.0  # the stage's own time
    error: str | None = None
    exit_code: int | None = None
    log: str = ""  # the end of a failed stage's log
    worker: str = ""  # the cluster node that ran it


class KeyLeases:
    """Which job builds each key now. One per cluster, a named detached actor, so every driver's jobs see it."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[str, float]] = {}  # key -> (token, lapses at)

    def claim(self, key: str, token: str, seconds: float) -> bool:
        """Take or renew the key's lease for `token`; False while another job's lease holds."""
        now = time.monotonic()
        held = self._held.get(key)
        if held is not None and held[0] != token and held[1] > now:
            return False
        self._held[key] = (token, now + seconds)
        return True

    def release(self, key: str, token: str) -> None:
        if self._held.get(key, ("", 0.0))[0] == token:
            del self._held[key]


def wait_for_key(key: str, token: str, remote_url: str) -> bool:
    """A Ray task of no CPU, ahead of a job whose key another job held when the driver asked: True once the
    job's token holds the key, False once the other job has built it. A task of its own because Ray lends a
    blocked task's CPU to another task: a job that waited inside itself would run two to a core."""
    import ray

    leases = ray.get_actor(LEASES, namespace=NAMESPACE)
    remote, signing = Remote(remote_url, reuse=True), signing_key()
    while True:
        if entry_there(remote, key, signing):  # the holder finished while this job waited
            return False
        if ray.get(leases.claim.remote(key, token, LEASE_SECONDS)):
            return not entry_there(remote, key, signing)  # built meanwhile, by a job whose lease has ended
        time.sleep(POLL_SECONDS)


def run_job(job: ClusterJob, claimed: bool) -> Outcome:
    """The Ray task: the stage, where its key is this job's (the driver claimed it and renews the claim, or
    `wait_for_key` did). Nothing here waits on Ray, so the task keeps its CPUs to itself."""
    import ray

    worker = ray.get_runtime_context().get_node_id()
    if not claimed:
        return Outcome(False, worker=worker)
    differs = code_mismatch(job)
    if differs:
        return Outcome(False, error=differs, exit_code=EnvironmentFailure.exit_code, worker=worker)
    scratch = Path(tempfile.mkdtemp(prefix=f"modelbuild-{job.stage}-"))
    try:
        return _run(job, Remote(job.remote, reuse=True), signing_key(), scratch, worker)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def code_mismatch(job: ClusterJob) -> str | None:
    """Why this worker may not build the key (its stage code or tools are not the driver's), or None: what it
    made would be stored under a key that does not describe it."""
    from modelbuild.sources import source_digest
    from modelbuild.versions import tool_versions

    if source_digest(job.modules) != job.source:
        return (
            f"the {job.stage} stage's code on cluster worker differs from the driver's (fix: install the "
            "driver's modelbuild on the cluster's nodes)"
        )
    tools = tool_versions(tuple(name for name in job.tools if name != "modelbuild"))
    wrong = {name: (version, tools.get(name)) for name, version in job.tools.items() if tools.get(name) != version}
    if wrong:
        name, (want, have) = next(iter(wrong.items()))
        return f"cluster worker has {name} {have}, the driver {want} (fix: install the same versions on both)"
    return None


def entry_there(remote: Remote, key: str, signing: bytes | None) -> bool:
    data = remote.get_entry(key)
    return data is not None and unseal(data, signing) is not None


def _run(job: ClusterJob, remote: Remote, key: bytes | None, scratch: Path, worker: str) -> Outcome:
    from modelbuild.engine.worker import execute

    paths = {}
    for role, files in job.inputs.items():
        folder = scratch / "in" / role
        for digest, name in files:
            if not remote.get_object(digest, folder / name):
                return Outcome(
                    False,
                    error=f"input {role} ({digest[:12]}) could not be taken from the remote cache: "
                    + "; ".join(remote.notes or ["not there"]),
                    exit_code=EnvironmentFailure.exit_code,
                    worker=worker,
                )
        paths[role] = str(folder / files[0][1])
    out, log = scratch / "out", scratch / "stage.log"
    out.mkdir()
    try:
        seconds = execute(job.entry, paths, job.params, str(out), str(log), str(scratch / "progress.jsonl"))
    except StageError as err:
        return Outcome(False, error=err.message, exit_code=err.exit_code, log=_tail(log), worker=worker)
    missing = [name for name in job.outputs if not (out / name).is_file()]
    if missing:
        return Outcome(
            False, error=f"the {job.stage} stage finished without writing {', '.join(missing)}", worker=worker
        )
    outputs = {path.name: sha256_file(path) for path in sorted(out.iterdir()) if path.is_file()}
    objects = {digest: out / name for name, digest in outputs.items()}
    result = ActionResult(job.stage, job.node, outputs, seconds)
    remote.put(objects, job.key, seal(asdict(result), key))
    if remote.given != 1:
        return Outcome(
            False,
            error="the outputs could not be given to the remote cache: " + "; ".join(remote.notes),
            exit_code=EnvironmentFailure.exit_code,
            worker=worker,
        )
    return Outcome(True, seconds, worker=worker)


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-LOG_TAIL:]
    except OSError:
        return ""
