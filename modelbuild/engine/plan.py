"""The plan: a graph of nodes, each one stage applied to one model or build, with exactly the inputs it may
read. The pipeline makes it from a recipe; the scheduler runs it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from modelbuild.engine.stage import Stage
from modelbuild.hashing import FileDigests


@dataclass(frozen=True)
class Node:
    """One stage applied to one model or build.

    `params` is the recipe slice the stage reads, `files` the declared input files, `deps` maps an input
    role to the upstream node whose outputs fill it, and `publish` maps output files to paths under the
    build folder where users find them.
    """

    id: str
    stage: str
    build: str | None
    params: dict
    files: dict[str, Path] = field(default_factory=dict)
    deps: dict[str, tuple[str, str]] = field(default_factory=dict)  # role -> (node id, output file)
    publish: dict[str, str] = field(default_factory=dict)
    # Stores a stage may read and extend that are memos, not inputs: its output is the same with them cold
    # or warm (up to measurement noise), so they stay out of the key. The tuning database is one.
    memos: dict[str, Path] = field(default_factory=dict)
    # The stage measures time on this machine (latency, tuning candidates): it runs with no other stage beside
    # it, whatever -j allows, as Bazel runs an `exclusive` test. Scheduling only: not in the key.
    exclusive: bool = False


@dataclass
class Plan:
    """Nodes in a topological order, the node ids that make up each build, and the stages they run."""

    nodes: dict[str, Node]
    builds: dict[str, list[str]]
    stages: dict[str, Stage] = field(default_factory=dict)
    # how a declared file under a role is digested where its own bytes are not all it is (an ONNX model
    # keeps its weights in files beside it); any other file is its bytes
    digesters: dict[str, Callable[[FileDigests, Path], str]] = field(default_factory=dict)
    # the files a declared file under a role needs beside it, by name relative to its folder: what travels
    # with it to a machine that runs its stage (an ONNX model's external data)
    companions: dict[str, Callable[[FileDigests, Path], list[str]]] = field(default_factory=dict)

    def upstream(self, node_id: str) -> set[str]:
        """Every node that `node_id` transitively depends on."""
        seen: set[str] = set()
        todo = [dep for dep, _ in self.nodes[node_id].deps.values()]
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo.extend(dep for dep, _ in self.nodes[current].deps.values())
        return seen

    def subset(self, builds: list[str]) -> Plan:
        """The plan of these builds alone, every node they depend on included."""
        keep: set[str] = set()
        for build in builds:
            for node_id in self.builds[build]:
                keep |= {node_id, *self.upstream(node_id)}
        return Plan(
            nodes={k: v for k, v in self.nodes.items() if k in keep},
            builds={b: self.builds[b] for b in builds},
            stages=self.stages,
            digesters=self.digesters,
            companions=self.companions,
        )

    def downstream(self, node_id: str) -> set[str]:
        return {other for other in self.nodes if node_id in self.upstream(other)}
