"""Finding the line of a TOML file where a field path is written, for error messages.

tomllib gives no positions, so this reads the text: it tracks the current [table] / [[array]] header and
matches `key = ...` lines (dotted keys included). It answers the best line it can: the key itself, else the
deepest enclosing table that is written in the file.
"""

from __future__ import annotations

import re
from pathlib import Path

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*((?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+)(?:\s*\.\s*(?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+))*)\s*=""")
_PART = re.compile(r"""\s*("[^"]*"|'[^']*'|[A-Za-z0-9_-]+)\s*""")

Path_ = tuple[str | int, ...]


def _split_key(text: str) -> list[str]:
    return [p.strip("\"'") for p in _PART.findall(text)]


def _key_paths(text: str):
    """Yield (line number, full path) for every header and key line of a TOML text."""
    table: list[str | int] = []
    array_counts: dict[tuple, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            parts = _split_key(header.group(2))
            if header.group(1) == "[[":
                index = array_counts.get(tuple(parts), -1) + 1
                array_counts[tuple(parts)] = index
                table = [*parts, index]
            else:
                table = list(parts)
            yield number, tuple(table)
            continue
        key = _KEY.match(line)
        if key:
            yield number, (*table, *_split_key(key.group(1)))


def locate(text: str, path: Path_) -> int | None:
    """The line where `path` (or its deepest written ancestor) is set in a TOML text, or None."""
    best_len, best_line = 0, None
    for number, written in _key_paths(text):
        common = 0
        for a, b in zip(written, path):
            if str(a) != str(b):
                break
            common += 1
        if common == len(written) and common > best_len:
            best_len, best_line = common, number
    return best_line


def locate_in_files(files: list[Path], path: Path_) -> tuple[Path, int | None]:
    """The file (the main recipe first, then its includes) and line that best match a field path."""
    best: tuple[Path, int | None, int] = (files[0], None, -1)
    for file in files:
        text = file.read_text(encoding="utf-8")
        line = locate(text, path)
        if line is None:
            continue
        depth = _match_depth(text, line, path)
        if depth > best[2]:
            best = (file, line, depth)
    return best[0], best[1]


def _match_depth(text: str, line: int, path: Path_) -> int:
    for number, written in _key_paths(text):
        if number == line:
            return len(written)
    return 0


def dotted(path: Path_) -> str:
    """A field path as a person writes it: builds[0].targets, targets.host.num-cores."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
