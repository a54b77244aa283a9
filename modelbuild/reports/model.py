"""The report model: what a run built, what it measured and which gates passed.

`Report.to_json()` is schema "modelbuild.report/1" (report.schema.json beside this file), what CI scripts may
rely on; fields are only ever added within a version. The renderers read the typed model; the figures inside a
build (latency, fusion, memory, quantization, ...) stay the JSON objects their stages wrote, described by the
schema.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

from modelbuild.engine.events import NodeResult, Status
from modelbuild.engine.scheduler import RunResult
from modelbuild.engine.store import DamagedObject
from modelbuild.pipeline.names import float_build_of, model_of, quantization_of, target_of
from modelbuild.stages.contracts import ANALYSIS, METRICS, QUANTIZE_SUMMARY, TUNE_SUMMARY
from modelbuild.validation import gates
from modelbuild.validation.gates import GateResult
from modelbuild.validation.measured import Measured
from modelbuild.versions import tool_versions

SCHEMA_ID = "modelbuild.report/1"


@dataclass(frozen=True)
class StageRun:
    """One stage of a build as this run saw it."""

    status: str  # cached, built, failed, skipped, stale
    seconds: float
    key: str | None
    built_seconds: float | None = None  # a cached stage: how long the build that produced it took
    error: str | None = None
    log: str | None = None

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "key"}


@dataclass(frozen=True)
class Validation:
    ran: bool
    reason: str | None = None  # why there are no accuracy or timing figures


@dataclass(frozen=True)
class VsFloat:
    """A quantized build's latency against the float build of the same model and target."""

    build: str
    latency_ms: float
    latency_ratio: float
    timed_together: bool = False  # the float library timed in turns with this one (timing.beside_float)


@dataclass
class BuildReport:
    """One build (model, target, quantization): its stages, figures and gates. In JSON, in this field order."""

    name: str
    model: str = ""
    target: str = ""
    artifact: str | None = None
    bound_inputs: dict[str, float] = field(default_factory=dict)
    stages: dict[str, StageRun] = field(default_factory=dict)
    validation: Validation = Validation(ran=False)
    accuracy: dict[str, dict] | None = None  # per output, graph order
    quantization: dict | None = None  # the quantize stage's summary
    tuning: dict | None = None
    accuracy_vs_qdq: dict[str, dict] | None = None
    latency_ms: dict | None = None
    cold_ms: float | None = None
    others_cpu: float | None = None  # other processes' share of the CPUs while it was timed
    throttled: float | None = None  # the share of its CPUs' time a CPU quota withheld then
    throughput: float | None = None
    scaling: dict | None = None
    roofline: dict | None = None
    artifact_bytes: int | None = None
    peak_rss_bytes: int | None = None
    fusion: dict | None = None
    placement: dict | None = None  # a split build's: operators per device, the copies, why each runs on the CPU
    schedule: dict | None = None
    kernels: list[dict] | None = None  # the heaviest kernels by FLOPs, with the ONNX layers each computes
    memory: dict | None = None
    gates: list[GateResult] = field(default_factory=list)
    passed: bool = False
    provenance: dict | None = None
    vs_float: VsFloat | None = None
    # report, timed_together; accuracy: output -> figure -> [baseline, now]; latency_ms: median, p99 likewise
    vs_baseline: dict | None = None

    @property
    def stage_failed(self) -> bool:
        return any(s.status == "failed" for s in self.stages.values())

    @property
    def accuracy_gate_failed(self) -> bool:
        return any(g.name in (*gates.ACCURACY_GATES, *gates.ACCURACY_DROPS) and not g.passed for g in self.gates)

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["stages"] = {stage: s.to_json() for stage, s in self.stages.items()}
        out["validation"] = asdict(self.validation)
        out["gates"] = [g.as_dict() for g in self.gates]
        out["vs_float"] = asdict(self.vs_float) if self.vs_float else None
        return out


@dataclass
class Report:
    """Every build of one run, failures first, with the cache's figures."""

    passed: bool
    recipe: str
    builds: list[BuildReport]
    cache: dict  # hits, misses, hit_rate, mean_hit_seconds, mean_miss_seconds, mean_access_seconds
    schema: str = SCHEMA_ID

    def to_json(self) -> dict:
        return {
            "schema": self.schema,
            "passed": self.passed,
            "recipe": self.recipe,
            "builds": [b.to_json() for b in self.builds],
            "cache": self.cache,
        }


def collect(project, run: RunResult, *, cache: dict | None = None) -> Report:
    """The report of one run over every build of the plan that ran."""
    builds = [
        _build(project, run, name)
        for name in project.plan.builds
        if all(n in run.results for n in project.plan.builds[name])
    ]
    compare_with_float(builds)
    builds.sort(key=lambda b: (b.passed, b.name))  # failures first
    return Report(
        passed=all(b.passed for b in builds),
        recipe=str(project.recipe.path),
        builds=builds,
        cache=cache if cache is not None else run.stats.as_dict(),
    )


def compare_with_float(builds: list[BuildReport]) -> None:
    """Give each quantized build the latency of the float build of the same model and target, where the
    recipe has one: the speed-up is the point of quantizing."""
    by_name = {b.name: b for b in builds}
    for build in builds:
        if build.vs_float and build.vs_float.timed_together:
            continue
        reference = by_name.get(float_build_of(build.name) or "")
        ours, theirs = build.latency_ms, reference.latency_ms if reference else None
        build.vs_float = (
            VsFloat(reference.name, theirs["median"], ours["median"] / theirs["median"]) if ours and theirs else None
        )


def _build(project, run: RunResult, name: str) -> BuildReport:
    model, target = model_of(name), target_of(name)
    # the int8 build's second reference (onnxruntime's QDQ model) is read through validate's metrics
    nodes = {
        run.results[n].stage: run.results[n] for n in project.plan.builds[name] if not n.startswith("reference-qdq:")
    }
    metrics = _metrics(project, nodes.get("validate"))
    figures = _output_json(project, nodes.get("compile"), ANALYSIS) or {}
    quantization = _output_json(project, nodes.get("quantize"), QUANTIZE_SUMMARY)
    spec = project.recipe.validation_for(project.recipe.build_spec(model, target, quantization_of(name)))
    baseline = baseline_of(project, spec, name)
    results = gates.evaluate(spec, metrics, baseline)
    stages_ok = all(r.status in (Status.BUILT, Status.CACHED) for r in nodes.values())
    measured = metrics or NOT_MEASURED
    return BuildReport(
        name=name,
        model=model,
        target=target,
        artifact=_artifact(project, run, name),
        bound_inputs={n: i.value for n, i in project.recipe.spec.models[model].inputs.items() if i.value is not None},
        stages={stage: _stage(r) for stage, r in nodes.items()},
        validation=Validation(measured.ran, _not_validated(nodes, metrics)),
        accuracy=measured.accuracy,
        quantization=quantization,
        tuning=_tuning(_output_json(project, nodes.get("tune"), TUNE_SUMMARY), nodes.get("tune")),
        accuracy_vs_qdq=measured.accuracy_vs_qdq,
        latency_ms=measured.latency_ms,
        cold_ms=measured.cold_ms,
        others_cpu=measured.others_cpu,
        throttled=measured.throttled,
        throughput=measured.latency_ms["throughput"] if measured.latency_ms else None,
        scaling=measured.scaling,
        roofline=measured.roofline,
        artifact_bytes=measured.artifact_bytes,
        peak_rss_bytes=measured.peak_rss_bytes,
        fusion=figures.get("fusion"),
        placement=figures.get("placement"),
        schedule=figures.get("schedule"),
        kernels=[{k: v for k, v in kernel.items() if k != "args"} for kernel in figures.get("kernels") or []] or None,
        memory=_memory(figures.get("memory"), measured),
        gates=results,
        passed=stages_ok and all(g.passed for g in results),
        vs_baseline=_vs_baseline(project, spec, baseline, measured),
        provenance=_provenance(project, nodes, spec, measured),
        vs_float=_timed_beside_float(name, measured),
    )


def _timed_beside_float(name: str, measured: Measured) -> VsFloat | None:
    """A quantized build's latency against its float library timed in turns with it (timing.beside_float);
    otherwise compare_with_float compares the two builds' own timings."""
    ours, theirs = measured.latency_ms, measured.float_latency_ms
    if not (ours and theirs):
        return None
    return VsFloat(float_build_of(name), theirs["median"], ours["median"] / theirs["median"], timed_together=True)


NOT_MEASURED = Measured(ran=False)  # a build with no validate stage, or one that failed


def _not_validated(nodes: dict[str, NodeResult], metrics: Measured | None) -> str | None:
    """Why a build has no accuracy or timing figures, or None when it was validated."""
    if metrics is not None:
        return metrics.reason
    if "validate" not in nodes:
        return "validation is off for this build (validation.enabled = false)"
    return f"the validate stage {nodes['validate'].status.value}"


def _tuning(summary: dict | None, result: NodeResult | None) -> dict | None:
    """What tuning gave this build: kernels with a tuned schedule, and trials measured by this run and where
    its seconds went (none when the tune stage was cached, however many it measured when it ran)."""
    if summary is None or result is None:
        return None
    now = result.status == Status.BUILT
    return {
        "tasks": len(summary["tasks"]),
        "tuned_tasks": summary["tuned_tasks"],
        "trials_total": sum(t["trials"] for t in summary["tasks"]),
        "trials_measured_now": summary["measured_now"] if now else 0,
        "estimated_latency_us": summary["estimated_latency_us"],
        "seconds_now": summary.get("seconds", {}) if now else {},
    }


def _stage(result: NodeResult) -> StageRun:
    built = round(result.built_seconds, 4) if result.built_seconds is not None else None
    return StageRun(
        result.status.value, round(result.seconds, 4), result.key, built, result.error or None, result.log or None
    )


def _metrics(project, result: NodeResult | None) -> Measured | None:
    data = _output_json(project, result, METRICS)
    return None if data is None else Measured.from_json(data)


def _output_json(project, result: NodeResult | None, name: str) -> dict | None:
    if result is None or name not in result.outputs:
        return None
    try:
        return json.loads(project.store.read_object(result.outputs[name]))
    except DamagedObject as err:  # removed from the store: the next build redoes its stage
        project.store.note(f"{err}: the report leaves out {name} of {result.node}; the next build remakes it")
        return None


def _memory(planned: dict | None, measured: Measured) -> dict | None:
    """The planner's figures beside the peak resident memory the validate stage measured."""
    if planned is None:
        return None
    return {**planned, "measured_peak_rss_bytes": measured.peak_rss_bytes}


def _artifact(project, run: RunResult, name: str) -> str | None:
    """Where the library is, or None when no compile of it finished (nothing was published)."""
    for node_id in project.plan.builds[name]:
        node = project.plan.nodes[node_id]
        if node.stage == "compile" and run.results[node_id].status in (Status.BUILT, Status.CACHED):
            path = project.build_dir / next(iter(node.publish.values()))
            try:  # relative to the recipe, so a CI script reads the same path on every machine
                return str(path.relative_to(project.recipe.root))
            except ValueError:
                return str(path)
    return None


def baseline_of(project, spec, name: str) -> dict | None:
    """This build in its baseline report: None where there is no report, {} where the report lacks it."""
    report = project.recipe.baseline_report(spec)
    if report is None:
        return None
    data = json.loads(report.read_text())
    return next((b for b in data.get("builds", []) if b.get("name") == name), {})


def _vs_baseline(project, spec, baseline: dict | None, measured: Measured) -> dict | None:
    """This build's figures beside its baseline's, whether or not a baseline gate bounds them: where a change
    made the model slower or less accurate."""
    if baseline is None:
        return None
    together = measured.baseline_latency_ms is not None  # then its latency is the one timed beside this build
    now, base = (
        measured.latency_ms or {},
        (measured.baseline_latency_ms if together else baseline.get("latency_ms")) or {},
    )
    return {
        "report": project.recipe.shown(project.recipe.baseline_report(spec)),
        "timed_together": together,
        "accuracy": gates.accuracy_changes(measured.accuracy, baseline.get("accuracy")),
        "latency_ms": {stat: [base[stat], now[stat]] for stat in ("median", "p99") if stat in base and stat in now},
        "kernels": kernel_changes(
            (measured.roofline or {}).get("kernels"), (baseline.get("roofline") or {}).get("kernels")
        ),
    }


def kernel_changes(now: list[dict] | None, base: list[dict] | None) -> list[dict]:
    """The heaviest kernels both roofline runs timed, one call each as [baseline, now] microseconds. Kernel
    names change with the IR, so kernels are matched by the first ONNX layer they compute where both know it."""

    def key(k: dict) -> str:
        return k["layers"][0] if k.get("layers") else k["kernel"]

    theirs = {key(k): k for k in base or []}
    return [
        {
            "kernel": k["kernel"],
            "layers": k.get("layers", []),
            "us": [theirs[key(k)]["seconds"] * 1e6, k["seconds"] * 1e6],
        }
        for k in now or []
        if key(k) in theirs
    ]


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
