"""What the build system knows of a stage: its name, entry point, outputs, code and the tools it depends on.

A stage's code is every modelbuild module its entry module imports, transitively (modelbuild.sources). Their
bytes enter the stage's key, so an edit to a stage or to any helper it reaches can never serve an output the
old code wrote, and no list of helpers is kept by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelbuild.sources import imported_closure


@dataclass(frozen=True)
class Stage:
    """A stage: `entry` ('module:function') is called as function(inputs=..., params=..., out=...)."""

    name: str
    entry: str
    tools: tuple[str, ...]  # tools whose versions shape the output (modelbuild.versions names)
    summary: str
    outputs: tuple[str, ...] = ()  # files every run must write; a name in braces is read from params
    # modules the stage runs in a subprocess (`python -m`) rather than imports: the walk cannot see them
    also_runs: tuple[str, ...] = ()

    @property
    def modules(self) -> tuple[str, ...]:
        """Every modelbuild module whose source shapes this stage's output."""
        found: dict[str, None] = {}
        for root in (self.entry.partition(":")[0], *self.also_runs):
            found.update(dict.fromkeys(imported_closure(root)))
        return tuple(found)

    def output_names(self, params: dict) -> tuple[str, ...]:
        return tuple(params[name[1:-1]] if name.startswith("{") else name for name in self.outputs)
