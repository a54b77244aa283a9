"""What the scheduler tells a reporter; only the CLI turns these into output."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from modelbuild.engine.reasons import Reason


class Status(str, Enum):
    CACHED = "cached"
    BUILT = "built"
    FAILED = "failed"
    SKIPPED = "skipped"  # an upstream stage failed
    STALE = "stale"  # would run (dry run, status)
    PENDING = "pending"
    RUNNING = "running"


@dataclass
class NodeResult:
    """The outcome of one node in one run."""

    node: str
    stage: str
    build: str | None
    status: Status
    key: str | None = None
    seconds: float = 0.0
    reasons: list[Reason] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)  # file name -> digest
    error: str | None = None
    log: str | None = None
    inputs: dict | None = None  # the key inputs, when they could be computed (upstream outputs known)
    built_seconds: float | None = None  # a cached result: how long the build that produced it took
    exit_code: int | None = None  # a failed result: 2 bad input, 3 the stage failed, 4 the environment


@dataclass(frozen=True)
class NodeStarted:
    node: str
    reasons: list[Reason]


@dataclass(frozen=True)
class NodeProgress:
    """What a running stage last reported of its progress (tuning: tasks, trials, best latency)."""

    node: str
    fields: dict


@dataclass(frozen=True)
class NodeWaiting:
    """The node cannot start yet because of another run: it holds the lock of this node's key (`why` "key": it
    is building the same thing, and this run will reuse it), or the machine's timing lock ("timing": its
    stages run on this machine, and this node times alone; "timed": it is timing, and no stage runs beside
    it), or waits to time ("queued": that goes first)."""

    node: str
    holder: str  # 'pid 4242 on ci-7 since 10:42:05', or '' when unknown
    why: str = "key"


@dataclass(frozen=True)
class NodeFinished:
    result: NodeResult


class Reporter(Protocol):
    def __call__(self, event: NodeStarted | NodeProgress | NodeWaiting | NodeFinished) -> None: ...


def silent(event: NodeStarted | NodeProgress | NodeWaiting | NodeFinished) -> None:
    """A reporter that ignores everything (library use, tests)."""
