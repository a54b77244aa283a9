"""The report model: what a run built, what it measured and which gates passed, as plain JSON data.

Schema "modelbuild.report/1" (report.schema.json beside this file) is what CI scripts may rely on; fields
are only ever added within a version.
"""

from __future__ import annotations

import json

from modelbuild.build.events import NodeResult, Status
from modelbuild.build.scheduler import RunResult
from modelbuild.pipeline.names import float_build_of, model_of, quantization_of, target_of
from modelbuild.pipeline.registry import ANALYSIS, METRICS, QUANTIZE_SUMMARY, TUNE_SUMMARY
from modelbuild.validation import gates
from modelbuild.validation.measured import Measured
from modelbuild.versions import tool_versions

SCHEMA_ID = "modelbuild.report/1"


def collect(project, run: RunResult, *, cache: dict | None = None) -> dict:
    """The report of one run over every build of the plan that ran."""
    builds = [_build(project, run, name) for name in project.plan.builds
              if all(n in run.results for n in project.plan.builds[name])]
    compare_with_float(builds)
    builds.sort(key=lambda b: (b["passed"], b["name"]))  # failures first
    return {
        "schema": SCHEMA_ID,
        "passed": all(b["passed"] for b in builds),
        "recipe": str(project.recipe.path),
        "builds": builds,
        "cache": cache if cache is not None else run.stats.as_dict(),
    }


def compare_with_float(builds: list[dict]) -> None:
    """Give each quantized build the latency of the float build of the same model and target, where the
    recipe has one: the speed-up is the point of quantizing."""
    by_name = {b["name"]: b for b in builds}
    for build in builds:
        reference = by_name.get(float_build_of(build["name"]) or "")
        ours, theirs = build.get("latency_ms"), (reference or {}).get("latency_ms")
        if ours and theirs:
            build["vs_float"] = {"build": reference["name"], "latency_ms": theirs["median"],
                                 "latency_ratio": ours["median"] / theirs["median"]}
        else:
            build["vs_float"] = None


def _build(project, run: RunResult, name: str) -> dict:
    model, target = model_of(name), target_of(name)
    # the int8 build's second reference (onnxruntime's QDQ model) is read through validate's metrics
    nodes = {run.results[n].stage: run.results[n] for n in project.plan.builds[name] if not n.startswith("reference-qdq:")}
    metrics = _metrics(project, nodes.get("validate"))
    figures = _output_json(project, nodes.get("compile"), ANALYSIS) or {}
    quantization = _output_json(project, nodes.get("quantize"), QUANTIZE_SUMMARY)
    spec = project.recipe.validation_for(project.recipe.build_spec(model, target, quantization_of(name)))
    results = gates.evaluate(spec, metrics, _baseline(project, spec, name))
    stages_ok = all(r.status in (Status.BUILT, Status.CACHED) for r in nodes.values())
    measured = metrics or NOT_MEASURED
    return {
        "name": name, "model": model, "target": target,
        "artifact": _artifact(project, name),
        "bound_inputs": {n: i.value for n, i in project.recipe.spec.models[model].inputs.items() if i.value is not None},
        "stages": {stage: _stage(r) for stage, r in nodes.items()},
        "validation": {"ran": measured.ran, "reason": _not_validated(nodes, metrics)},
        "accuracy": measured.accuracy,
        "quantization": quantization,
        "tuning": _tuning(_output_json(project, nodes.get("tune"), TUNE_SUMMARY), nodes.get("tune")),
        "accuracy_vs_qdq": measured.accuracy_vs_qdq,
        "latency_ms": measured.latency_ms,
        "cold_ms": measured.cold_ms,
        "throughput": measured.latency_ms["throughput"] if measured.latency_ms else None,
        "scaling": measured.scaling,
        "roofline": measured.roofline,
        "artifact_bytes": measured.artifact_bytes,
        "peak_rss_bytes": measured.peak_rss_bytes,
        "fusion": figures.get("fusion"),
        "schedule": figures.get("schedule"),
        "memory": _memory(figures.get("memory"), measured),
        "gates": [g.as_dict() for g in results],
        "passed": stages_ok and all(g.passed for g in results),
        "provenance": _provenance(project, nodes, spec, measured),
    }


NOT_MEASURED = Measured(ran=False)  # a build with no validate stage, or one that failed


def _not_validated(nodes: dict[str, NodeResult], metrics: Measured | None) -> str | None:
    """Why a build has no accuracy or timing figures, or None when it was validated."""
    if metrics is not None:
        return metrics.reason
    if "validate" not in nodes:
        return "validation is off for this build (validation.enabled = false)"
    return f"the validate stage {nodes['validate'].status.value}"


def _tuning(summary: dict | None, result: NodeResult | None) -> dict | None:
    """What tuning gave this build: kernels with a tuned schedule, and trials measured by this run (none when
    the tune stage was cached, however many it measured when it ran)."""
    if summary is None or result is None:
        return None
    return {"tasks": len(summary["tasks"]), "tuned_tasks": summary["tuned_tasks"],
            "trials_total": sum(t["trials"] for t in summary["tasks"]),
            "trials_measured_now": summary["measured_now"] if result.status == Status.BUILT else 0,
            "estimated_latency_us": summary["estimated_latency_us"]}


def _stage(result: NodeResult) -> dict:
    out = {"status": result.status.value, "seconds": round(result.seconds, 4), "key": result.key}
    if result.built_seconds is not None:
        out["built_seconds"] = round(result.built_seconds, 4)
    if result.error:
        out["error"] = result.error
    if result.log:
        out["log"] = result.log
    return out


def _metrics(project, result: NodeResult | None) -> Measured | None:
    data = _output_json(project, result, METRICS)
    return None if data is None else Measured.from_json(data)


def _output_json(project, result: NodeResult | None, name: str) -> dict | None:
    if result is None or name not in result.outputs:
        return None
    return json.loads(project.store.object_path(result.outputs[name]).read_text())


def _memory(planned: dict | None, measured: Measured) -> dict | None:
    """The planner's figures beside the peak resident memory the validate stage measured."""
    if planned is None:
        return None
    return {**planned, "measured_peak_rss_bytes": measured.peak_rss_bytes}


def _artifact(project, name: str) -> str | None:
    for node_id in project.plan.builds[name]:
        node = project.plan.nodes[node_id]
        if node.stage == "compile":
            path = project.build_dir / next(iter(node.publish.values()))
            try:  # relative to the recipe, so a CI script reads the same path on every machine
                return str(path.relative_to(project.recipe.root))
            except ValueError:
                return str(path)
    return None


def _baseline(project, spec, name: str) -> dict | None:
    if spec.baseline is None:
        return None
    data = json.loads((project.recipe.root / spec.baseline.report).read_text())
    return next((b for b in data.get("builds", []) if b.get("name") == name), None)


def _provenance(project, nodes: dict[str, NodeResult], spec, measured: Measured) -> dict:
    model, target = model_of(nodes["compile"].build), target_of(nodes["compile"].build)
    compile_node = project.plan.nodes[nodes["compile"].node]
    return {
        "model_sha256": project.store.digests.digest(project.recipe.model_path(model)),
        "recipe": {
            "model": project.recipe.spec.models[model].model_dump(),
            "target": project.recipe.spec.targets[target],
            "validation": spec.model_dump(),
        },
        "target": compile_node.params["target"],
        "host_cpu": compile_node.params["target"].get("mcpu"),
        "tools": tool_versions(("tvm", "tvm-ffi", "onnx", "onnxruntime", "onnxslim", "numpy")),
        "seeds": {"golden": spec.golden.seed},
        "machine": measured.machine,
    }
