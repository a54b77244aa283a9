"""The rebuilder: whether a node must run, and why, in words a person reads.

A node is up to date when the action cache holds a verified result for its key (a constructive trace:
any earlier build with the same inputs counts, not only the last one). Otherwise the reasons come from
comparing its key inputs with those of its last build.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from modelbuild.hashing import canonical_json
from modelbuild.store import ActionResult, Store


@dataclass(frozen=True)
class Decision:
    node: str
    key: str
    result: ActionResult | None
    reasons: list[str] = field(default_factory=list)

    @property
    def stale(self) -> bool:
        return self.result is None


def decide(node_id: str, key: str, inputs: dict, store: Store) -> Decision:
    """Reuse a cached result for `key`, or say why the node must run."""
    result = store.lookup(key)
    if result is not None:
        return Decision(node_id, key, result)
    trace = store.last_trace(node_id)
    if trace is None:
        return Decision(node_id, key, None, ["never built"])
    if trace["key"] == key:
        return Decision(node_id, key, None, ["cached output missing or damaged"])
    return Decision(node_id, key, None, changes(trace["inputs"], inputs) or ["key inputs changed"])


def changes(old: dict, new: dict) -> list[str]:
    """Human reasons for every difference between two sets of key inputs."""
    before, after = flatten(old), flatten(new)
    reasons = []
    for path in sorted(set(before) | set(after)):
        if before.get(path, _ABSENT) != after.get(path, _ABSENT):
            reasons.append(_describe(path, before.get(path, _ABSENT), after.get(path, _ABSENT)))
    return list(dict.fromkeys(reasons))


_ABSENT = object()


def flatten(value, prefix: tuple = ()) -> dict[tuple, object]:
    """Nested dicts as {path tuple: leaf}; an empty dict is a leaf."""
    if isinstance(value, dict) and value:
        out = {}
        for key, item in value.items():
            out.update(flatten(item, (*prefix, str(key))))
        return out
    return {prefix: value}


def _show(value) -> str:
    if value is _ABSENT:
        return "(none)"
    return value if isinstance(value, str) else canonical_json(value)


def _describe(path: tuple, old, new) -> str:
    change = f"{_show(old)} -> {_show(new)}"
    match path:
        case ("params", "inputs", name, "shape"):
            return f"input {name} shape changed {change}"
        case ("params", "inputs", name, field):
            return f"input {name} {field} changed {change}"
        case ("params", "target", option):
            return f"target {option} changed {change}"
        case ("files", role):
            return f"{role} file changed"
        case ("upstream", role):
            return f"upstream {role} output changed"
        case ("tools", tool):
            return f"{tool} {change}"
        case ("stage", "version"):
            return f"stage implementation changed v{_show(old)} -> v{_show(new)}"
        case ("stage", "source"):
            return "stage code changed"
        case ("params", *rest):
            return f"{'.'.join(rest)} changed {change}"
    return f"{'.'.join(path)} changed {change}"
