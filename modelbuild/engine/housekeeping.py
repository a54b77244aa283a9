"""Keeping a store healthy: verify what it holds, evict what is least recently used, remove what killed builds
left behind. Each runs under the store's exclusive lock, so never under a running build."""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from modelbuild.engine.store import Store
from modelbuild.errors import ModelbuildError
from modelbuild.hashing import sha256_file


@dataclass
class Damage:
    path: Path
    reason: str


def verify(store: Store, *, fix: bool = False) -> list[Damage]:
    """Re-hash every object and check every action entry (its own digest, its signature where a key is set,
    and that each object it names is there and intact). With `fix`, remove what is damaged."""
    damaged = [
        Damage(path, "its bytes no longer match its name (SHA-256)")
        for path in store.object_files()
        if sha256_file(path) != path.name
    ]
    bad_objects = {d.path.name for d in damaged}
    for key, path in store.entry_files():
        result = store.read_entry(key)
        if result is None:
            damaged.append(Damage(path, "its digest or signature does not match its content"))
        elif missing := [
            name
            for name, digest in result.outputs.items()
            if digest in bad_objects or not store.object_path(digest).is_file()
        ]:
            damaged.append(Damage(path, f"names outputs that are missing or damaged: {', '.join(missing)}"))
    if fix:
        for d in damaged:
            d.path.unlink(missing_ok=True)
    return damaged


@dataclass
class Collected:
    entries_removed: int = 0
    objects_removed: int = 0
    bytes_freed: int = 0
    bytes_left: int = 0
    kept_for_recipe: int = 0  # entries over the limit that the recipe's builds still need


def collect_garbage(
    store: Store, *, max_bytes: int | None = None, max_age_days: float | None = None, keep: frozenset[str] = frozenset()
) -> Collected:
    """Evict action entries least recently used first (older than `max_age_days`, then until the objects the
    rest name fit in `max_bytes`), never one whose key is in `keep`; then delete objects no entry names."""
    entries = []  # (last used, key, path, digests)
    for key, path in store.entry_files():
        result = store.read_entry(key)
        entries.append((path.stat().st_mtime, key, path, set(result.outputs.values()) if result else set()))
    entries.sort()
    sizes = {p.name: p.stat().st_size for p in store.object_files()}
    out = Collected()
    alive = list(entries)
    if max_age_days is not None:
        cutoff = time.time() - max_age_days * 86400
        alive = [e for e in alive if e[0] >= cutoff or e[1] in keep]
    if max_bytes is not None:
        alive = _fit(alive, sizes, max_bytes, keep, out)
    for entry in entries:
        if entry not in alive:
            store.forget(entry[1])
            out.entries_removed += 1
    named = set().union(*(e[3] for e in alive)) if alive else set()
    for digest, size in sizes.items():
        if digest not in named:
            store.object_path(digest).unlink(missing_ok=True)
            out.objects_removed += 1
            out.bytes_freed += size
    out.bytes_left = sum(size for digest, size in sizes.items() if digest in named)
    return out


def _fit(entries: list, sizes: dict[str, int], max_bytes: int, keep: frozenset[str], out: Collected) -> list:
    """The newest entries whose objects fit in max_bytes (an object two entries share counts once), oldest
    evicted first; entries in `keep` stay whatever their size."""
    refs: dict[str, int] = {}
    for _, _, _, digests in entries:
        for d in digests:
            refs[d] = refs.get(d, 0) + 1
    total = sum(sizes.get(d, 0) for d in refs)
    alive = list(entries)
    for entry in entries:  # oldest first
        if total <= max_bytes:
            break
        if entry[1] in keep:
            out.kept_for_recipe += 1
            continue
        alive.remove(entry)
        for d in entry[3]:
            refs[d] -= 1
            if refs[d] == 0:
                total -= sizes.get(d, 0)
    return alive


def remove_leftovers(store: Store) -> int:
    """Scratch folders and half-written temporary files of builds that were killed; only safe while no build
    runs (the caller holds the store's exclusive lock). Returns how many were removed."""
    removed = 0
    for path in store.leftovers():
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed += 1
    return removed


_UNITS = {
    "": 1,
    "B": 1,
    "K": 10**3,
    "KB": 10**3,
    "M": 10**6,
    "MB": 10**6,
    "G": 10**9,
    "GB": 10**9,
    "T": 10**12,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def parse_size(text: str) -> int:
    """'20G', '500MB', '1.5GiB' or a number of bytes."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else None
    if match is None or unit not in _UNITS:
        raise ModelbuildError(
            f"--max-size {text!r} is not a size (fix: a number with an optional unit: 500M, 20G, 1.5GiB)"
        )
    return int(float(match.group(1)) * _UNITS[unit])
