"""The plan as text: a tree for the terminal, Graphviz dot, or Mermaid."""

from __future__ import annotations

from modelbuild.engine.plan import Plan


def edges(plan: Plan) -> list[tuple[str, str]]:
    """(upstream, downstream) once per pair, though a node may read several outputs of one upstream node."""
    return list(dict.fromkeys((dep, node.id) for node in plan.nodes.values() for dep, _ in node.deps.values()))


def upstream_of(plan: Plan, node_id: str) -> list[str]:
    return list(dict.fromkeys(dep for dep, _ in plan.nodes[node_id].deps.values()))


def as_tree(plan: Plan) -> str:
    """Each build's stages upstream first, each with the stages it reads from: the DAG, not a chain."""
    lines = []
    for build, node_ids in plan.builds.items():
        lines.append(build)
        width = max(len(n) for n in node_ids)
        for node_id in node_ids:
            deps = upstream_of(plan, node_id)
            lines.append(f"  {node_id:<{width}}  <- {', '.join(deps)}" if deps else f"  {node_id}")
    return "\n".join(lines)


def as_dot(plan: Plan) -> str:
    body = [f'  "{n}" [label="{n}"];' for n in plan.nodes]
    body += [f'  "{a}" -> "{b}";' for a, b in edges(plan)]
    return "digraph modelbuild {\n  rankdir=LR;\n" + "\n".join(body) + "\n}"


def as_mermaid(plan: Plan) -> str:
    ids = {n: f"n{i}" for i, n in enumerate(plan.nodes)}
    body = [f'  {ids[n]}["{n}"]' for n in plan.nodes]
    body += [f"  {ids[a]} --> {ids[b]}" for a, b in edges(plan)]
    return "flowchart LR\n" + "\n".join(body)


FORMATS = {"tree": as_tree, "dot": as_dot, "mermaid": as_mermaid}
