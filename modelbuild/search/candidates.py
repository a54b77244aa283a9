"""A candidate as the recipe a build reads (a quantization section and a [[builds]] entry), and a built
candidate's report as the walk reads it (an Outcome). Pure: no TVM, no file."""

from __future__ import annotations

import hashlib
import json

from modelbuild.reports.model import BuildReport
from modelbuild.search.strategy import Candidate, Outcome, Space
from modelbuild.validation.gates import ACCURACY_GATES


def space_of(search, base) -> Space:
    """The candidates a [search.NAME] section allows, starting from the quantization section `base`."""
    calibration = base.calibration
    return Space.of(
        search.precisions,
        search.weight_rounding or [base.weight_rounding],
        search.calibration_methods or [calibration.method],
        search.calibration_samples or [calibration.samples],
    )


def quantization_of(base, candidate: Candidate, *, ranked: bool | None = None):
    """The quantization section that builds `candidate`: `base` with the candidate's settings, and its raised
    layers added to int16_nodes or exclude_nodes. int16_most_sensitive is replaced by the candidate's own
    choice of layers, from the same kind of ranking. `ranked` overrides the section's `sensitivity`: the
    library is the same either way."""
    settings = candidate.settings
    update = {
        "weight_rounding": settings.weight_rounding,
        "int16_most_sensitive": 0,
        "sensitivity": base.sensitivity if ranked is None else ranked,
        "calibration": base.calibration.model_copy(
            update={"method": settings.calibration_method, "samples": settings.calibration_samples}
        ),
    }
    raised = list(candidate.raised)
    if candidate.precision == "int16":
        update["int16_nodes"] = [*base.int16_nodes, *(n for n in raised if n not in base.int16_nodes)]
    elif candidate.precision == "float":
        update["exclude_nodes"] = [*base.exclude_nodes, *(n for n in raised if n not in base.exclude_nodes)]
        update["int16_nodes"] = [n for n in base.int16_nodes if n not in raised]
    return base.model_copy(update=update)


def section_name(base_name: str, candidate: Candidate) -> str:
    """A stable name for a candidate's quantization section: the base's and a digest of the candidate, so
    the same candidate lands in the same build folder on every run."""
    text = json.dumps([candidate.precision, candidate.raised, candidate.settings.__dict__], sort_keys=True)
    return f"{base_name}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


OBJECTIVES = {
    "p50": lambda b: b.latency_ms and b.latency_ms["median"],
    "p99": lambda b: b.latency_ms and b.latency_ms["p99"],
    "size": lambda b: b.artifact_bytes,
}
UNITS = {"p50": "ms", "p99": "ms", "size": "bytes"}


def outcome_of(build: BuildReport, objective: str) -> Outcome:
    """A built candidate as the walk sees it: passed when every stage built and every accuracy gate that
    applies passed (latency gates judge the final build, not a candidate)."""
    ranking = _ranking(build.quantization)
    if build.stage_failed:
        failed = next((f"{stage}: {s.error}" for stage, s in build.stages.items() if s.status == "failed"), "")
        return Outcome(False, None, float("-inf"), ranking=ranking, why=f"stage failed: {failed}")
    accuracy = [g for g in build.gates if g.name in ACCURACY_GATES and g.applicable]
    margins = [_margin(g) for g in accuracy]
    margin = min(margins, default=float("-inf"))
    failed = [g.describe() for g in accuracy if not g.passed]
    cosines = [out["cosine"] for out in (build.accuracy or {}).values() if out.get("cosine") is not None]
    value = OBJECTIVES[objective](build)
    paired = build.vs_float if objective == "p50" and build.vs_float and build.vs_float.timed_together else None
    return Outcome(
        passed=bool(accuracy) and not failed,
        objective=value or None,
        margin=margin,
        accuracy=min(cosines, default=None),
        ranking=ranking,
        why="; ".join(failed),
        vs_float=paired.latency_ratio if paired else None,
    )


def _margin(gate) -> float:
    """How far past its limit a gate's value is, relative to the limit's size (the room left under a cosine
    of 0.99 is 1 - 0.99): negative when it fails."""
    if gate.value is None:
        return float("-inf")
    room = gate.value - gate.limit if gate.name.startswith("min") else gate.limit - gate.value
    scale = (1 - gate.limit) if gate.name in ("min_cosine", "min_top1_agreement") else abs(gate.limit)
    return room / scale if scale else room


def _ranking(summary: dict | None) -> tuple[str, ...]:
    """The quantized layers, largest share of the output error first (quantize.json's sensitivity)."""
    rows = ((summary or {}).get("sensitivity") or {}).get("layers") or []
    return tuple(row["node"] for row in sorted(rows, key=lambda row: -row["error_power"]))
