"""The plan as text: a tree for the terminal, Graphviz dot, or Mermaid."""

from __future__ import annotations

from modelbuild.plan import Plan


def edges(plan: Plan) -> list[tuple[str, str]]:
    return [(dep, node.id) for node in plan.nodes.values() for dep, _ in node.deps.values()]


def as_tree(plan: Plan) -> str:
    lines = []
    for build, node_ids in plan.builds.items():
        lines.append(build)
        # a build's nodes are listed upstream first; show them as the chain a person reads
        for depth, node_id in enumerate(node_ids):
            lines.append("    " * depth + "└── " + node_id)
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
