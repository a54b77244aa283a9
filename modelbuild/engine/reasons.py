"""Why a node must run, or cannot, as data: a kind, the field that changed, its old and new values.

The rebuilder and the scheduler produce them; the command line shows `str(reason)`, the sentence a person
reads, and `--json` gives the fields, so a script never parses a sentence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from modelbuild.hashing import canonical_json

ABSENT = "(none)"  # the value of a key input a build did not have


@dataclass(frozen=True)
class Reason:
    kind: str  # one of SENTENCES
    field: str = ""  # the input, option, file role, tool or node the reason is about
    old: Any = None
    new: Any = None

    def __str__(self) -> str:
        return SENTENCES[self.kind].format(
            field=self.field, change=f"{_show(self.old)} -> {_show(self.new)}", new=_show(self.new)
        )

    def as_dict(self) -> dict:
        return {**asdict(self), "text": str(self)}


SENTENCES = {
    "never-built": "never built",
    "damaged": "cached output missing or damaged",
    "doubted": "its cached result fails {field}: run again",
    "key-changed": "key inputs changed",
    "input": "input {field} changed {change}",
    "target": "target {field} changed {change}",
    "file": "{field} file changed",
    "upstream": "upstream {field} output changed",
    "tool": "{field} {change}",
    "code": "stage code changed",
    "param": "{field} changed {change}",
    "upstream-reruns": "upstream {field} will rerun",
    "upstream-failed": "upstream {field} {new}",
    "stopped": "not started: an earlier stage failed",
}


def _show(value) -> str:
    return value if isinstance(value, str) else canonical_json(value)


def from_change(path: tuple, old, new) -> Reason:
    """The reason for one changed key input, by where it sits in the key (rebuilder.flatten's paths)."""
    match path:
        case ("params", "inputs", name, field):
            return Reason("input", f"{name} {field}", old, new)
        case ("params", "target", option):
            return Reason("target", option, old, new)
        case ("files", role):
            return Reason("file", role)
        case ("upstream", role):
            return Reason("upstream", role)
        case ("tools", tool):
            return Reason("tool", tool, old, new)
        case ("stage", "source"):
            return Reason("code")
        case ("params", *rest):
            return Reason("param", ".".join(rest), old, new)
    return Reason("param", ".".join(path), old, new)
