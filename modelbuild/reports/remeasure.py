"""Which cached validations a build measures again instead of reusing: those whose timing fails a gate.

A latency is the machine's as much as the library's: one measured on a busy CI runner or in a throttled
container fails its gate, and a build that reused it would fail the same gate from the cache forever, on this
machine and on every machine that takes it from the team's cache. As Bazel never reuses a failed test, a
cached validation whose figures fail a timing gate is measured again, once per build. The gates are checked
against the cached figures each time, so tightening a gate measures again and loosening it reuses. Accuracy
is the library's, not the machine's: a result that fails only an accuracy gate is reused (a search's rejected
candidates cost nothing the second time).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from modelbuild.engine.plan import Node
from modelbuild.engine.store import ActionResult, DamagedObject
from modelbuild.pipeline.names import model_of, quantization_of, target_of
from modelbuild.reports.model import baseline_of
from modelbuild.stages.contracts import METRICS
from modelbuild.validation import gates
from modelbuild.validation.gates import TIMING_GATES
from modelbuild.validation.measured import Measured


def timing_doubts(project) -> Callable[[Node, ActionResult], str | None]:
    """For the scheduler: the timing gates a validate node's cached figures fail ("max_p99_ms, ..."), or None."""

    def failed_timing(node: Node, result: ActionResult) -> str | None:
        if node.stage != "validate" or METRICS not in result.outputs:
            return None
        try:
            metrics = Measured.from_json(json.loads(project.store.read_object(result.outputs[METRICS])))
        except DamagedObject:
            return None  # reusing it finds the damage and runs the stage again
        recipe = project.recipe
        spec = recipe.validation_for(
            recipe.build_spec(model_of(node.build), target_of(node.build), quantization_of(node.build))
        )
        failed = [
            g.name
            for g in gates.evaluate(spec, metrics, baseline_of(project, spec, node.build))
            if not g.passed and g.name in TIMING_GATES and g.value is not None
        ]
        return ", ".join(failed) or None

    return failed_timing
