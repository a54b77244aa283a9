"""`modelbuild explain`: the key inputs of each stage of one build, and what changed since its last build."""

from __future__ import annotations

from modelbuild.errors import SelectionError
from modelbuild.hashing import canonical_json
from modelbuild.keys import key_inputs
from modelbuild.rebuilder import _flatten, changes
from modelbuild.scheduler import Options


def explain(project, build: str) -> list[str]:
    """Lines describing each node of `build`: status, key, key inputs, changes since the last build."""
    if build not in project.plan.builds:
        raise SelectionError(f"no build named {build!r}; builds: {', '.join(project.plan.builds)}")
    run = project.run([build], Options(dry_run=True))
    lines: list[str] = []
    for node_id in project.plan.builds[build]:
        result = run.results[node_id]
        lines.append(f"{node_id}  [{result.status.value}]  key {result.key or '(needs upstream first)'}")
        trace = project.store.last_trace(node_id)
        inputs = _inputs_of(project, run, node_id)
        if inputs is not None:
            for path, value in _flatten(inputs).items():
                lines.append(f"    {'.'.join(path)} = {value if isinstance(value, str) else canonical_json(value)}")
        if trace is None:
            lines.append("    last build: never")
        elif inputs is not None:
            diff = changes(trace["inputs"], inputs)
            lines.append("    since last build: " + ("; ".join(diff) if diff else "no change"))
        else:
            lines.append("    since last build: " + "; ".join(result.reasons))
    return lines


def _inputs_of(project, run, node_id: str) -> dict | None:
    from modelbuild.stages import get_stage

    node = project.plan.nodes[node_id]
    upstream = {}
    for role, (dep, name) in node.deps.items():
        outputs = run.results[dep].outputs
        if name not in outputs:
            return None
        upstream[role] = outputs[name]
    files = {role: project.store.digests.digest(path) for role, path in node.files.items()}
    return key_inputs(node, get_stage(node.stage), files=files, upstream=upstream)
