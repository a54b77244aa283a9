"""`modelbuild explain`: the key inputs of each stage of one build, and what changed since its last build."""

from __future__ import annotations

from modelbuild.engine.rebuilder import changes, flatten
from modelbuild.engine.scheduler import Options
from modelbuild.errors import SelectionError
from modelbuild.hashing import canonical_json
from modelbuild.stages.contracts import IR_TEXTS


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
        inputs = result.inputs  # None while an upstream stage must run first
        if inputs is not None:
            for path, value in flatten(inputs).items():
                lines.append(f"    {'.'.join(path)} = {value if isinstance(value, str) else canonical_json(value)}")
        if trace is None:
            lines.append("    last build: never")
        elif inputs is not None:
            diff = changes(trace["inputs"], inputs)
            lines.append("    since last build: " + ("; ".join(map(str, diff)) if diff else "no change"))
        else:
            lines.append("    since last build: " + "; ".join(map(str, result.reasons)))
    return lines


def write_ir(project, build: str) -> list:
    """Put the compile stage's cached IR texts in an ir/ folder beside the build's artifact; runs nothing."""
    run = project.run([build], Options(dry_run=True))
    node_id = next(n for n in project.plan.builds[build] if project.plan.nodes[n].stage == "compile")
    outputs = run.results[node_id].outputs
    if not all(name in outputs for name in IR_TEXTS):
        raise SelectionError(f"{build} is not built yet (or its target has no IR figures); run `modelbuild` first")
    folder = project.build_dir / next(iter(project.plan.nodes[node_id].publish.values()))
    paths = [folder.parent / "ir" / name for name in IR_TEXTS]
    for name, path in zip(IR_TEXTS, paths):
        project.store.materialize(outputs[name], path)
    return paths
