"""Cache keys: SHA-256 of the canonical JSON of exactly what a stage reads.

Upstream inputs enter as the digests of upstream *outputs*, not upstream keys: an upstream stage that reruns
and writes the same bytes leaves its downstream keys unchanged (early cutoff). No path enters a key, so two
clones of a repository in different folders compute the same keys.
"""

from __future__ import annotations

from modelbuild.engine.plan import Node
from modelbuild.engine.stage import Stage
from modelbuild.hashing import digest_of
from modelbuild.sources import source_digest
from modelbuild.versions import tool_versions


def key_inputs(node: Node, stage: Stage, *, files: dict[str, str], upstream: dict[str, str]) -> dict:
    """Everything a node's output depends on: the stage and its code, recipe slice, input digests, tool versions."""
    return {
        "stage": {"name": stage.name, "source": source_digest(stage.modules), "key_version": stage.key_version},
        "params": node.params,
        "files": files,
        "upstream": upstream,
        "tools": tool_versions(stage.tools),
    }


def action_key(inputs: dict) -> str:
    return digest_of(inputs)
