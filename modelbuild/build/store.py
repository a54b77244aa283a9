"""The store: a content-addressed cache of stage outputs under .cache/.

- objects/ab/<sha256>: file contents, named by their digest;
- actions/ab/<key>.json: the outputs (name -> digest) a stage wrote for a key, the action cache;
- traces/<node>.json: the key inputs of each node's last build, so a rebuild can say what changed;
- stats.json: hits and misses, with their seconds, across runs.

Every write goes through a temporary file, fsync and rename. An action entry counts only when each object it
names exists with the right digest, and entries are written only after a stage succeeded, so a crash or a
failure never leaves a result that a later build would trust. The layout keeps objects and actions apart so
that a shared remote cache can serve both by digest.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from modelbuild.fsutil import copy_atomic, write_atomic
from modelbuild.hashing import FileDigests


@dataclass
class Stats:
    """Cache use across runs: hit rate H and mean seconds of a hit and of a miss."""

    hits: int = 0
    misses: int = 0
    hit_seconds: float = 0.0
    miss_seconds: float = 0.0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    @property
    def mean_hit(self) -> float:
        return self.hit_seconds / self.hits if self.hits else 0.0

    @property
    def mean_miss(self) -> float:
        return self.miss_seconds / self.misses if self.misses else 0.0

    @property
    def mean_access(self) -> float:
        """T_avg = H * T_hit + (1 - H) * T_miss."""
        return self.hit_rate * self.mean_hit + (1 - self.hit_rate) * self.mean_miss

    def add(self, other: "Stats") -> "Stats":
        return Stats(self.hits + other.hits, self.misses + other.misses,
                     self.hit_seconds + other.hit_seconds, self.miss_seconds + other.miss_seconds)

    def as_dict(self) -> dict:
        return {**asdict(self), "hit_rate": self.hit_rate, "mean_hit_seconds": self.mean_hit,
                "mean_miss_seconds": self.mean_miss, "mean_access_seconds": self.mean_access}


@dataclass(frozen=True)
class ActionResult:
    """What a stage produced for one key."""

    stage: str
    node: str
    outputs: dict[str, str]  # file name -> digest
    seconds: float
    created: float = field(default_factory=time.time)


class Store:
    """The local content-addressed store rooted at a .cache folder."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.digests = FileDigests(self.root / "digests.json")

    # objects
    def object_path(self, digest: str) -> Path:
        return self.root / "objects" / digest[:2] / digest

    def put_object(self, path: Path) -> str:
        digest = self.digests.digest(path)
        target = self.object_path(digest)
        if not (target.exists() and self.digests.digest(target) == digest):
            copy_atomic(path, target)
        return digest

    def has_object(self, digest: str) -> bool:
        target = self.object_path(digest)
        return target.is_file() and self.digests.digest(target) == digest

    # actions
    def _action_path(self, key: str) -> Path:
        return self.root / "actions" / key[:2] / f"{key}.json"

    def lookup(self, key: str) -> ActionResult | None:
        """The recorded result for a key, only if every output it names is present and intact."""
        try:
            result = ActionResult(**json.loads(self._action_path(key).read_text()))
        except (OSError, ValueError, TypeError):
            return None
        if all(self.has_object(d) for d in result.outputs.values()):
            return result
        return None

    def record(self, key: str, result: ActionResult) -> None:
        missing = [name for name, d in result.outputs.items() if not self.has_object(d)]
        if missing:
            raise RuntimeError(f"refusing to record {key}: outputs {missing} are not in the store")
        write_atomic(self._action_path(key), json.dumps(asdict(result), sort_keys=True).encode())

    # traces of the last build of each node, for "why is this stale?"
    def _trace_path(self, node_id: str) -> Path:
        return self.root / "traces" / (node_id.replace(":", "__").replace("/", "_") + ".json")

    def last_trace(self, node_id: str) -> dict | None:
        try:
            return json.loads(self._trace_path(node_id).read_text())
        except (OSError, ValueError):
            return None

    def remember(self, node_id: str, key: str, inputs: dict) -> None:
        write_atomic(self._trace_path(node_id), json.dumps({"key": key, "inputs": inputs}, sort_keys=True).encode())

    # stats
    def stats(self) -> Stats:
        try:
            return Stats(**json.loads((self.root / "stats.json").read_text()))
        except (OSError, ValueError, TypeError):
            return Stats()

    def add_stats(self, run: Stats) -> None:
        """Add one run's hits and misses; a lock keeps two concurrent builds from losing each other's."""
        import fcntl

        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".stats.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            total = self.stats().add(run)
            write_atomic(self.root / "stats.json", json.dumps(asdict(total)).encode())

    def usage(self) -> tuple[int, int]:
        """(action entries, bytes of objects)."""
        actions = sum(1 for _ in (self.root / "actions").glob("*/*.json"))
        size = sum(p.stat().st_size for p in (self.root / "objects").glob("*/*") if p.is_file())
        return actions, size

    # scratch space on the store's filesystem, so finished outputs move in by rename
    def scratch(self, prefix: str) -> Path:
        (self.root / "tmp").mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=self.root / "tmp", prefix=prefix))

    def materialize(self, digest: str, dest: Path) -> None:
        """Put an object's bytes at `dest` (where users find artifacts), unless they are there already."""
        if dest.is_file() and self.digests.digest(dest) == digest:
            return
        copy_atomic(self.object_path(digest), dest)

    def link_object(self, digest: str, dest: Path) -> None:
        """Make an object readable at `dest` without copying it where the filesystem allows."""
        try:
            os.link(self.object_path(digest), dest)
        except OSError:
            shutil.copyfile(self.object_path(digest), dest)

    def clear(self, *, keep: tuple[Path, ...] = ()) -> None:
        """Remove everything in the store except the top-level entries named in `keep`."""
        if not self.root.is_dir():
            return
        kept = {Path(p).resolve() for p in keep}
        for entry in self.root.iterdir():
            if entry.resolve() in kept:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    def flush(self) -> None:
        self.digests.save()
