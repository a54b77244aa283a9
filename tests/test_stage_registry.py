"""The stage registry's source lists: every modelbuild module a stage's code imports enters its cache key."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from modelbuild import stages

# modules that shape no stage output: the package (its version string), the registry, errors, file digests,
# atomic writes and progress lines
NOT_OUTPUT_SHAPING = {"modelbuild", "modelbuild.stages", "modelbuild.errors", "modelbuild.hashing",
                      "modelbuild.fsutil", "modelbuild.progress"}


def imported_modelbuild_modules(module: str) -> set[str]:
    """The modelbuild modules `module` imports, found in its source without importing it."""
    source = Path(importlib.util.find_spec(module).origin).read_text()
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("modelbuild")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("modelbuild"):
            for alias in node.names:  # `from modelbuild.stages import lowering` names a module
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if importlib.util.find_spec(node.module).submodule_search_locations
                          and importlib.util.find_spec(candidate) else node.module)
    return found - NOT_OUTPUT_SHAPING


@pytest.mark.parametrize("name", sorted(stages.STAGES))
def test_every_module_a_stage_imports_is_among_its_sources(name):
    stage = stages.STAGES[name]
    listed, missing, seen = set(stage.modules), set(), set()
    todo = list(stage.modules)
    while todo:  # the listed modules' own imports, transitively
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for imported in imported_modelbuild_modules(module):
            if imported not in listed:
                missing.add(f"{imported} (imported by {module})")
            todo.append(imported)
    assert not missing, f"stage {name!r} imports modules its key does not cover: {sorted(missing)}"
