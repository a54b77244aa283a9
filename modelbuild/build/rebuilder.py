"""The rebuilder: whether a node must run, and why, in words a person reads.

A node is up to date when the action cache holds a verified result for its key (a constructive trace:
any earlier build with the same inputs counts, not only the last one). Otherwise the reasons come from
comparing its key inputs with those of its last build.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from modelbuild.build.keys import action_key, key_inputs
from modelbuild.build.plan import Node
from modelbuild.build.stage import Stage
from modelbuild.build.store import ActionResult, Store
from modelbuild.hashing import canonical_json


@dataclass(frozen=True)
class Decision:
    node: str
    key: str
    result: ActionResult | None
    reasons: list[str] = field(default_factory=list)
    inputs: dict = field(default_factory=dict)  # what the key was computed from

    @property
    def stale(self) -> bool:
        return self.result is None


def decide_node(node: Node, stage: Stage, *, files: dict[str, str], upstream: dict[str, str], store: Store) -> Decision:
    """The node's key from what it reads (its files' and upstream outputs' digests), then `decide`."""
    inputs = key_inputs(node, stage, files=files, upstream=upstream)
    return decide(node.id, action_key(inputs), inputs, store)


def decide(node_id: str, key: str, inputs: dict, store: Store) -> Decision:
    """Reuse a cached result for `key`, or say why the node must run."""
    result = store.lookup(key)
    if result is not None:
        return Decision(node_id, key, result, inputs=inputs)
    trace = store.last_trace(node_id)
    if trace is None:
        return Decision(node_id, key, None, ["never built"], inputs)
    if trace["key"] == key:
        return Decision(node_id, key, None, ["cached output missing or damaged"], inputs)
    return Decision(node_id, key, None, changes(trace["inputs"], inputs) or ["key inputs changed"], inputs)


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
        case ("stage", "source"):
            return "stage code changed"
        case ("params", *rest):
            return f"{'.'.join(rest)} changed {change}"
    return f"{'.'.join(path)} changed {change}"
