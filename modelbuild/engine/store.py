"""The store: a content-addressed cache of stage outputs under .cache/.

- objects/ab/<sha256>: file contents, named by their digest;
- actions/ab/<key>.json: the outputs (name -> digest) a stage wrote for a key, the action cache, each entry
  sealed with its own digest (and a team's signature where a key is set: build/sealing.py);
- traces/<node>.json: the key inputs of each node's last build, so a rebuild can say what changed;
- locks/: one per key being built, and the store's own (build/locks.py);
- stats.json: hits and misses, with their seconds, across runs.

Every write goes through a temporary file, fsync and rename. An entry is written only after a stage
succeeded and only once every object it names is stored, so a crash or a failure never leaves a result a
later build would trust. Objects are re-hashed when they are used (published, or read by a stage or the
report), never trusted on a remembered (inode, size, mtime), so bit rot is caught before a library built
from, or loaded from, damaged bytes. A remote (build/remote.py) is consulted on a local miss.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from modelbuild.engine.locks import Lock
from modelbuild.engine.remote import Remote
from modelbuild.engine.sealing import seal, signing_key, unseal
from modelbuild.fsutil import copy_atomic, write_atomic
from modelbuild.hashing import FileDigests, sha256_file


class DamagedObject(Exception):
    """An object whose bytes no longer match its digest; it has been removed from the store."""

    def __init__(self, digest: str) -> None:
        super().__init__(f"object {digest[:12]} was damaged on disk (its SHA-256 no longer matches)")
        self.digest = digest


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

    def add(self, other: Stats) -> Stats:
        return Stats(
            self.hits + other.hits,
            self.misses + other.misses,
            self.hit_seconds + other.hit_seconds,
            self.miss_seconds + other.miss_seconds,
        )

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "hit_rate": self.hit_rate,
            "mean_hit_seconds": self.mean_hit,
            "mean_miss_seconds": self.mean_miss,
            "mean_access_seconds": self.mean_access,
        }


@dataclass(frozen=True)
class ActionResult:
    """What a stage produced for one key."""

    stage: str
    node: str
    outputs: dict[str, str]  # file name -> digest
    seconds: float
    created: float = field(default_factory=time.time)


class Store:
    """The local content-addressed store rooted at a .cache folder, with an optional remote behind it."""

    def __init__(self, root: Path, *, remote: Remote | None = None, key: bytes | None = None) -> None:
        self.root = Path(root)
        self.digests = FileDigests(self.root / "digests.json")
        self.remote = remote
        self.key = key if key is not None else signing_key()
        self.notes: list[str] = []  # for a person, once each: a read-only cache, a remote that failed

    @property
    def writable(self) -> bool:
        """False for a cache a pull-request build may only read: a no-op build then writes nothing."""
        return not self.root.exists() or os.access(self.root, os.W_OK)

    def note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)

    def messages(self) -> list[str]:
        """What this run should tell a person about the cache: its own notes, the remote's, and what the
        remote gave and took."""
        if self.remote is None:
            return list(self.notes)
        return [*self.notes, *self.remote.notes, self.remote.summary()]

    # objects
    def object_path(self, digest: str) -> Path:
        return Path(self._object_file(digest))

    def _object_file(self, digest: str) -> str:
        # a string join: a no-op build asks for every output of every node, and pathlib's joins add up
        return f"{self.root}/objects/{digest[:2]}/{digest}"

    def put_object(self, path: Path) -> str:
        digest = sha256_file(path)  # a fresh output: hashed once, and not memoised (its scratch path goes away)
        target = self.object_path(digest)
        if not (target.is_file() and sha256_file(target) == digest):
            copy_atomic(path, target)
        return digest

    def has_object(self, digest: str) -> bool:
        """Present; whether intact is checked where it is used (`verified`)."""
        return os.path.isfile(self._object_file(digest))

    def verified(self, digest: str) -> Path:
        """The object's path once its bytes are re-hashed and match; a damaged object is removed and raises
        DamagedObject, so nothing reads it and the next lookup misses."""
        path = self.object_path(digest)
        if sha256_file(path) != digest:
            path.unlink(missing_ok=True)
            raise DamagedObject(digest)
        return path

    def read_object(self, digest: str) -> bytes:
        return self.verified(digest).read_bytes()

    # actions
    def _action_path(self, key: str) -> Path:
        return self.root / "actions" / key[:2] / f"{key}.json"

    def read_entry(self, key: str) -> ActionResult | None:
        """The local entry for a key if its seal holds, whatever the state of its objects."""
        try:
            entry = unseal(self._action_path(key).read_bytes(), self.key)
            return ActionResult(**entry) if entry is not None else None
        except (OSError, TypeError):
            return None

    def lookup(self, key: str) -> ActionResult | None:
        """The recorded result for a key, only if its entry is sealed and every object it names is present:
        from the local store, else from the remote (objects verified on the way in)."""
        result = self.read_entry(key)
        if result is not None and all(self.has_object(d) for d in result.outputs.values()):
            self._touch(key)
            return result
        return self._from_remote(key) if self.remote is not None else None

    def forget(self, key: str) -> None:
        """Drop a key's entry (its objects stay for any other entry that names them)."""
        self._action_path(key).unlink(missing_ok=True)

    def record(self, key: str, result: ActionResult) -> None:
        missing = [name for name, d in result.outputs.items() if not self.has_object(d)]
        if missing:
            raise RuntimeError(f"refusing to record {key}: outputs {missing} are not in the store")
        sealed = seal(asdict(result), self.key)
        write_atomic(self._action_path(key), sealed)
        if self.remote is not None:
            self.remote.put({d: self.object_path(d) for d in result.outputs.values()}, key, sealed)

    def _from_remote(self, key: str) -> ActionResult | None:
        remote = self.remote
        assert remote is not None, "called only with a remote cache"
        data = remote.get_entry(key)
        entry = unseal(data, self.key) if data is not None else None
        if data is not None and entry is None:
            remote.note(
                f"remote cache: the entry for {key[:12]} is damaged or not signed with this "
                "team's key; building instead"
            )
        if data is None or entry is None or not self.writable:
            return None
        result = ActionResult(**entry)
        for digest in result.outputs.values():
            if not self.has_object(digest) and not remote.get_object(digest, self.object_path(digest)):
                return None
        write_atomic(self._action_path(key), data)
        remote.taken += 1
        return result

    def _touch(self, key: str) -> None:
        """Mark an entry used now, for `cache gc`'s least-recently-used order; skipped on a read-only cache."""
        try:
            os.utime(self._action_path(key))
        except OSError:
            pass

    # locks
    def key_lock(self, key: str) -> Lock:
        return Lock(self.root / "locks" / key[:2] / f"{key}.lock")

    def store_lock(self, *, shared: bool) -> Lock:
        """Held shared by every build, exclusively by whatever empties or evicts."""
        return Lock(self.root / "store.lock", shared=shared)

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
        if not self.writable:
            self.note("the cache is read-only: this run's hits and misses are not added to its statistics")
            return
        with Lock(self.root / "locks" / "stats.lock"):
            total = self.stats().add(run)
            write_atomic(self.root / "stats.json", json.dumps(asdict(total)).encode())

    # what the store holds, for `cache stats`, `verify` and `gc`: leftovers of killed writes are not counted
    def object_files(self) -> list[Path]:
        return [p for p in (self.root / "objects").glob("*/*") if p.is_file() and not p.name.startswith(".")]

    def entry_files(self) -> list[tuple[str, Path]]:
        return [(p.stem, p) for p in (self.root / "actions").glob("*/*.json") if not p.name.startswith(".")]

    def usage(self) -> tuple[int, int]:
        """(action entries, bytes of objects)."""
        return len(self.entry_files()), sum(p.stat().st_size for p in self.object_files())

    def leftovers(self) -> list[Path]:
        """Scratch folders, half-written temporary files and key locks; every one belongs to a dead build when no
        build holds the store lock."""
        scratch = list((self.root / "tmp").glob("*"))
        key_locks = list((self.root / "locks").glob("*/*.lock"))  # one per key ever built, free once no build runs
        if not (scratch or key_locks or self.remote):
            return []  # a half-written object or entry is left only by a build that also left these
        partial = [p for folder in ("objects", "actions") for p in (self.root / folder).glob("*/.*.tmp")]
        partial += [*self.root.glob(".*.tmp"), *(self.root / "traces").glob(".*.tmp")]  # memos, stats, traces
        return scratch + partial + key_locks

    # scratch space on the store's filesystem, so finished outputs move in by rename
    def scratch(self, prefix: str) -> Path:
        (self.root / "tmp").mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=self.root / "tmp", prefix=prefix))

    def materialize(self, digest: str, dest: Path) -> None:
        """Put an object's bytes at `dest` (where users find artifacts), unless they are there already. Both
        are re-hashed: a library damaged in the build folder or in the store is replaced or refused."""
        if dest.is_file() and sha256_file(dest) == digest:
            return
        copy_atomic(self.verified(digest), dest)

    def link_object(self, digest: str, dest: Path) -> None:
        """Make a verified object readable at `dest` without copying it where the filesystem allows."""
        source = self.verified(digest)
        try:
            os.link(source, dest)
        except OSError:
            shutil.copyfile(source, dest)

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
        if self.writable:
            self.digests.save()
        else:
            self.note("the cache is read-only: file digests are not memoised, so the next run hashes inputs again")
