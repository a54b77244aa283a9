"""Content digests: canonical JSON, SHA-256 of bytes and files, and a memo of file digests."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from modelbuild.fsutil import write_atomic

CHUNK = 1 << 20


def canonical_json(value: Any) -> str:
    """The one JSON spelling of a value: sorted keys, no spaces, UTF-8, so equal values hash equally."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def digest_of(value: Any) -> str:
    """SHA-256 of the canonical JSON of a value."""
    return sha256_text(canonical_json(value))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


class FileDigests:
    """File digests memoised by (inode, size, mtime_ns), so an unchanged file is never re-read.

    A touched file (new mtime, same bytes) is re-read once and yields the same digest.
    """

    def __init__(self, memo_path: Path | None = None) -> None:
        self._memo_path = memo_path
        self._memo: dict[str, list] = {}
        self._dirty = False
        if memo_path and memo_path.exists():
            try:
                self._memo = json.loads(memo_path.read_text())
            except (OSError, ValueError):
                self._memo = {}  # a damaged memo costs a re-hash, never a wrong digest

    def digest(self, path: Path) -> str:
        st = os.stat(path)
        stamp = [st.st_ino, st.st_size, st.st_mtime_ns]
        key = str(Path(path).resolve())
        known = self._memo.get(key)
        if known and known[:3] == stamp:
            return known[3]
        value = sha256_file(path)
        self._memo[key] = [*stamp, value]
        self._dirty = True
        return value

    def remembered(self, key: str, compute: Callable[[], list]) -> list:
        """A fact derived from files' contents (what an ONNX model names beside it), kept with the digests.
        `key` must name those contents by digest, so that the fact cannot go stale: computed once, then read."""
        known = self._memo.get(key)
        if known is None:
            known = self._memo[key] = compute()
            self._dirty = True
        return known

    def save(self) -> None:
        if not (self._dirty and self._memo_path):
            return
        write_atomic(self._memo_path, json.dumps(self._memo).encode())
        self._dirty = False
