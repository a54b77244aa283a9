"""The rebuilder: whether a node must run, and why (reasons as data, modelbuild.engine.reasons).

A node is up to date when the action cache holds a verified result for its key (a constructive trace:
any earlier build with the same inputs counts, not only the last one). Otherwise the reasons come from
comparing its key inputs with those of its last build.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from modelbuild.engine.keys import action_key, key_inputs
from modelbuild.engine.plan import Node
from modelbuild.engine.reasons import ABSENT, Reason, from_change
from modelbuild.engine.stage import Stage
from modelbuild.engine.store import ActionResult, Store


@dataclass(frozen=True)
class Decision:
    node: str
    key: str
    result: ActionResult | None
    reasons: list[Reason] = field(default_factory=list)
    inputs: dict = field(default_factory=dict)  # what the key was computed from

    @property
    def stale(self) -> bool:
        return self.result is None


# what a cached result fails (a check the plan makes of it, such as a timing gate), or None to reuse it
Doubt = Callable[[ActionResult], "str | None"]


def decide_node(
    node: Node,
    stage: Stage,
    *,
    files: dict[str, str],
    upstream: dict[str, str],
    store: Store,
    doubt: Doubt | None = None,
) -> Decision:
    """The node's key from what it reads (its files' and upstream outputs' digests), then `decide`."""
    inputs = key_inputs(node, stage, files=files, upstream=upstream)
    return decide(node.id, action_key(inputs), inputs, store, doubt)


def decide(node_id: str, key: str, inputs: dict, store: Store, doubt: Doubt | None = None) -> Decision:
    """Reuse a cached result for `key` unless `doubt` finds it wanting, or say why the node must run."""
    result = store.lookup(key)
    failed = doubt(result) if result is not None and doubt is not None else None
    if failed:
        return Decision(node_id, key, None, [Reason("doubted", failed)], inputs)
    if result is not None:
        return Decision(node_id, key, result, inputs=inputs)
    trace = store.last_trace(node_id)
    if trace is None:
        return Decision(node_id, key, None, [Reason("never-built")], inputs)
    if trace["key"] == key:
        return Decision(node_id, key, None, [Reason("damaged")], inputs)
    return Decision(node_id, key, None, changes(trace["inputs"], inputs) or [Reason("key-changed")], inputs)


def changes(old: dict, new: dict) -> list[Reason]:
    """A reason for every difference between two sets of key inputs."""
    before, after = flatten(old), flatten(new)
    reasons = []
    for path in sorted(set(before) | set(after)):
        if before.get(path, ABSENT) != after.get(path, ABSENT):
            reasons.append(from_change(path, before.get(path, ABSENT), after.get(path, ABSENT)))
    return list({str(r): r for r in reasons}.values())  # two inputs of a role change once (lists do not hash)


def flatten(value, prefix: tuple = ()) -> dict[tuple, object]:
    """Nested dicts as {path tuple: leaf}; an empty dict is a leaf."""
    if isinstance(value, dict) and value:
        out = {}
        for key, item in value.items():
            out.update(flatten(item, (*prefix, str(key))))
        return out
    return {prefix: value}
