"""What the build system knows of a stage, and all it asks of one: its name, entry point, code, tools, the
files it writes, the form of its key, and whether a node's inputs are what it declares.

The stages declare themselves (stages/contracts.py); the engine never names one. A stage's code is every
modelbuild module its entry imports, transitively (modelbuild.sources): their bytes enter its key, so an edit
to a stage or to any helper it reaches can never serve an output the old code wrote.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class Stage(Protocol):
    """A stage: `entry` ('module:function') is called as function(inputs=..., params=..., out=...)."""

    @property
    def name(self) -> str: ...

    @property
    def entry(self) -> str: ...

    @property
    def tools(self) -> tuple[str, ...]: ...  # tools whose versions shape the output (modelbuild.versions names)

    @property
    def key_version(self) -> int: ...  # the form of its key's params

    @property
    def modules(self) -> tuple[str, ...]: ...  # every modelbuild module whose source shapes its output

    def output_names(self, params: dict) -> tuple[str, ...]: ...  # the files every run must write

    def breaches(self, roles: Iterable[str]) -> list[str]: ...  # what a node given these inputs breaks
