"""Locks on a store shared by processes on one machine.

- one lock per action key, held while a stage builds that key: two builds of one recipe build each key once,
  the second waits and then reuses the first's result;
- the store's own lock, held shared by every build and exclusively by `clean` and `cache gc`, so a cache is
  not emptied under a running build;
- the machine's timing lock, held shared by every running stage and exclusively by a stage that times on this
  machine (`Node.exclusive`), whatever store each build uses: no other build's stage runs beside a timing,
  as no stage of the same build does (the scheduler's own rule). Beside it, the timing queue: a stage
  waiting to time holds it, and a stage starts only where none does, so a timing goes next instead of waiting
  out every other build's stream of stages (flock alone prefers no one).

They are flock(2) locks: the kernel drops them when their process dies, however it dies, so a lock of a dead
process is never in the way. The holder's pid, host and start time are written into the lock file only so
a waiting build can say who it waits for.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import IO

from modelbuild.errors import EnvironmentFailure

TIMING_LOCK_ENV = "MODELBUILD_TIMING_LOCK"  # the timing lock's file, where the default does not suit


class Lock:
    """One flock on one file; `try_acquire` never blocks."""

    def __init__(self, path: Path, *, shared: bool = False) -> None:
        self.path = Path(path)
        self.shared = shared
        self._file: IO[str] | None = None

    def try_acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        if not self.shared:
            handle.seek(0), handle.truncate()
            handle.write(json.dumps(holder()))
            handle.flush()
        self._file = handle
        return True

    def acquire(self, poll_seconds: float = 0.1) -> None:
        while not self.try_acquire():
            time.sleep(poll_seconds)

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing drops the flock
            self._file = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def holder(self) -> str:
        """Who holds it, as a person reads it: 'pid 4242 on ci-7 since 10:42:05'; '' when unknown."""
        try:
            who = json.loads(self.path.read_text())
            since = time.strftime("%H:%M:%S", time.localtime(who["since"]))
            return f"pid {who['pid']} on {who['host']} since {since}"
        except (OSError, ValueError, KeyError, TypeError):
            return ""

    def __enter__(self) -> Lock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class Locks(tuple):
    """Locks held together, released together."""

    def release(self) -> None:
        for lock in self:
            lock.release()


def holder() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}


class MachineLock(Lock):
    """A lock outside the store, in the temp folder: one that cannot be made says how to place it elsewhere."""

    def try_acquire(self) -> bool:
        try:
            return super().try_acquire()
        except OSError as err:
            raise EnvironmentFailure(
                f"cannot make the timing lock {self.path}: {err.strerror} (fix: make {self.path.parent} a "
                f"writable folder, or set {TIMING_LOCK_ENV} to a file in one)"
            ) from None


def timing_lock(*, exclusive: bool) -> Lock:
    """The machine's timing lock (per user: another user's builds are not seen), exclusive for a stage that
    times on this machine."""
    return MachineLock(_timing_path(), shared=not exclusive)


def timing_queue(*, waiting: bool) -> Lock:
    """The timing queue: held by a stage waiting to time (`waiting`); any other stage takes it shared for a
    moment first, and does not start while it cannot."""
    path = _timing_path()
    return MachineLock(path.with_name(path.name + ".queue"), shared=not waiting)


def _timing_path() -> Path:
    default = Path(tempfile.gettempdir()) / f"modelbuild-{os.getuid()}" / "timing.lock"
    return Path(os.environ.get(TIMING_LOCK_ENV) or default)
