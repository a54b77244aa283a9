"""Code digests: the modelbuild modules a module reaches through its imports, and a digest of their sources.

Found by reading import lines without importing anything (a no-op build must not load TVM; parsing the sources
with `ast` would cost it 0.1 s). tests/test_stage_registry.py checks the walk against Python's own parser.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from functools import cache
from pathlib import Path

from modelbuild.errors import ModelbuildError
from modelbuild.hashing import sha256_file

PACKAGE = "modelbuild"
# modules that shape no stage output (errors, digests, atomic writes, progress lines): an edit to them must
# not invalidate every cached library; package __init__ files hold only their docstring (tested)
NOT_OUTPUT_SHAPING = frozenset({"modelbuild.errors", "modelbuild.hashing", "modelbuild.fsutil", "modelbuild.progress"})


# `from modelbuild.x import (a,\n b)` spans lines: the names in parentheses are read to the closing one
_IMPORT = re.compile(
    r"^\s*(?:from\s+(modelbuild[\w.]*)\s+import\s+(?:\(([^)]*)\)|([^#\n]*))|import\s+(modelbuild[\w.]*))", re.M
)


@cache
def imported_closure(module: str) -> tuple[str, ...]:
    """`module` (a stage entry or a script, in modelbuild or not) and every modelbuild module it imports,
    directly or not, in the order first reached."""
    seen: dict[str, None] = {}
    todo = [module]
    while todo:
        current = todo.pop(0)
        if current in seen or _source(current) is None:
            continue
        seen[current] = None
        todo += direct_imports(current)
    return tuple(seen)


def direct_imports(module: str) -> list[str]:
    """The output-shaping modelbuild modules one module imports, at any depth of its code (function-level
    imports too): packages and NOT_OUTPUT_SHAPING left out."""
    found = []
    for package, parenthesised, names, plain in _IMPORT.findall(_source(module).read_text()):
        if plain:
            found.append(plain)
            continue
        found.append(package)
        for name in re.sub(r"#[^\n]*", "", parenthesised or names).split(","):
            candidate = f"{package}.{name.strip().split(' as ')[0].strip()}"
            if name.strip() and _source(candidate) is not None:
                found.append(candidate)  # `from modelbuild.compiler import lowering` names a module
    return [
        m
        for m in found
        if m.startswith(PACKAGE)
        and _source(m) is not None
        and m not in NOT_OUTPUT_SHAPING
        and _source(m).name != "__init__.py"
    ]


@cache
def _source(module: str) -> Path | None:
    """The module's source file. modelbuild's own are found on disk, importing nothing: asking importlib for
    `a.b.c` imports `a.b`, which for a module (not a package) would run it, numpy and all, on a no-op build."""
    if module == PACKAGE or module.startswith(PACKAGE + "."):
        path = _PACKAGE_DIR.joinpath(*module.split(".")[1:])
        for candidate in (path.with_suffix(".py"), path / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None
    try:  # a stage entry outside the package (tests, plugins)
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


_PACKAGE_DIR = Path(__file__).resolve().parent


@cache
def source_digest(modules: tuple[str, ...]) -> str:
    """SHA-256 over the source files of these modules, found without importing them (nor TVM)."""
    h = hashlib.sha256()
    for name in modules:
        path = _source(name)
        if path is None:
            raise ModelbuildError(f"stage module {name!r} not found")
        h.update(name.encode() + b"\0" + sha256_file(path).encode())
    return h.hexdigest()
