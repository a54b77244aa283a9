"""`modelbuild search BUILD`: each candidate the walk asks for is built as a build of its own (a quantization
section and a [[builds]] entry added to the recipe), in the same store as every build, so a candidate built
once is never built again, by a later search or by the build its snippet describes. Candidates publish under
build/search/<build>/, with the search's own report beside them."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from modelbuild.engine.scheduler import Options
from modelbuild.errors import EnvironmentFailure, ModelbuildError, SelectionError, StageError
from modelbuild.pipeline.names import build_name, model_of, quantization_of, select, target_of
from modelbuild.pipeline.project import Project
from modelbuild.recipe.schema import ValidationSpec
from modelbuild.reports import collect
from modelbuild.reports.model import BuildReport, Report
from modelbuild.search import candidates
from modelbuild.search.strategy import Candidate, Outcome, chosen, walk
from modelbuild.validation.gates import ACCURACY_GATES

Say = Callable[[str], None]
# latencies of one library timed in separate processes differ by 10-27% on a shared machine (docs/guide/validation.md,
# regression gates): candidates within 10% of the fastest are taken as equally fast
TIMING_NOISE = 0.10


@dataclass
class SearchResult:
    build: str  # the build searched, model+quantization@target
    section: str  # its [search.NAME]
    objective: str  # p50, p99 or size
    folder: Path  # build/search/<build>/
    trials: dict[Candidate, Outcome] = field(default_factory=dict)  # in the order built
    names: dict[Candidate, str] = field(default_factory=dict)  # each candidate's quantization section's name
    sections: dict[Candidate, object] = field(default_factory=dict)  # and the section it was built with
    stages_run: dict[Candidate, int] = field(default_factory=dict)  # stages this search ran (not cached)
    float_build: BuildReport | None = None  # the same model and target in float, for the ratio
    report: Report | None = None  # every candidate's build, as `modelbuild build` reports them
    seconds: float = 0.0

    @property
    def best(self) -> tuple[Candidate, Outcome] | None:
        return chosen(self.trials, noise=0.0 if self.objective == "size" else TIMING_NOISE)

    @property
    def float_objective(self) -> float | None:
        return candidates.OBJECTIVES[self.objective](self.float_build) if self.float_build else None


def run_search(
    project: Project, selector: str, say: Say = lambda line: None, clock: Callable[[], float] = time.monotonic
) -> SearchResult:
    """Search the one build `selector` names; `say` hears a line per candidate."""
    name = _searched_build(project, selector)
    recipe = project.recipe
    entry = recipe.build_spec(model_of(name), target_of(name), quantization_of(name))
    _check_searchable(project, entry, target_of(name))
    section = recipe.spec.search[entry.search]
    base = recipe.spec.quantization[entry.quantization]
    result = SearchResult(name, entry.search, section.objective, project.build_dir / "search" / name)
    started = clock()

    def evaluate(candidate: Candidate) -> Outcome:
        result.names[candidate] = candidates.section_name(entry.quantization, candidate)
        say(f"candidate {len(result.trials) + 1}: {candidate.describe()}")
        # only the first candidate's layer ranking is read: the others skip computing theirs
        built_with = candidates.quantization_of(base, candidate, ranked=not result.trials)
        result.sections[candidate] = built_with
        build = _built(project, entry, result, {candidate: built_with}, must_build=not result.trials)[0]
        outcome = candidates.outcome_of(build, section.objective)
        result.trials[candidate] = outcome
        result.stages_run[candidate] = sum(stage.status != "cached" for stage in build.stages.values())
        say(f"  {_verdict(outcome, section.objective)}" + ("" if result.stages_run[candidate] else " (cached)"))
        return outcome

    def may_continue(built: int) -> bool:
        minutes = (clock() - started) / 60
        return built < section.max_candidates and (section.max_minutes is None or minutes < section.max_minutes)

    walk(candidates.space_of(section, base), evaluate, may_continue)
    say("the float build, for comparison")
    result.float_build = _built(project, entry, result, {None: None})[0]
    result.report = _report(project, entry, result, {**result.sections, None: None})
    result.seconds = clock() - started
    return result


def _searched_build(project: Project, selector: str) -> str:
    """The one build the selector names that has a search section."""
    names = [
        b
        for b in select(project.plan, [selector]).builds
        if project.recipe.build_spec(model_of(b), target_of(b), quantization_of(b)).search
    ]
    if not names:
        raise SelectionError(
            f'{selector!r} selects no build with a search (fix: add search = "NAME" to its '
            f"[[builds]] entry and declare [search.NAME])"
        )
    if len(names) > 1:
        raise SelectionError(
            f"{selector!r} selects {len(names)} builds with a search: {', '.join(names)} (fix: "
            f"name one, as model+quantization@target)"
        )
    return names[0]


def _check_searchable(project: Project, entry, target: str) -> None:
    """A search judges candidates by the build's accuracy gates, on a library that runs here or on a device."""
    recipe = project.recipe
    validation = recipe.validation_for(entry)
    if not validation.enabled or not any(getattr(validation.gates, gate) is not None for gate in ACCURACY_GATES):
        raise recipe.validation_error(
            entry,
            ("gates",),
            "a search needs an accuracy gate to pass, and this build "
            "has none" + ("" if validation.enabled else " (validation is off)"),
            "set min_cosine = 0.99, or another accuracy gate, and enabled = true",
        )
    validate = project.plan.nodes[f"validate:{build_name(entry.model, target, entry.quantization)}"].params
    if not validate["runs_here"]:
        raise SelectionError(
            f"the candidates of a search are validated, and target {target!r} cannot run here: "
            f"{validate['reason']} (fix: give the target an rpc device, or search a build for "
            f"this machine)"
        )


def _candidate_project(project: Project, entry, result: SearchResult, sections: dict) -> Project:
    """The recipe with one [[builds]] entry per candidate (None: the float build, always there) and their
    quantization sections, publishing under the search's folder. Where the objective is the median latency,
    each candidate is timed in turns with the float library (timing.beside_float): the candidates are timed
    in processes of their own, and their ratios to the float library timed beside them do not move as one
    library's latency does between processes."""
    spec = project.recipe.spec
    quantization = dict(spec.quantization)
    builds = []
    target = target_of(result.build)
    beside = result.objective == "p50" and not _baseline_timed_together(project.recipe.validation_for(entry))
    for candidate, section in {**sections, None: None}.items():
        name = result.names[candidate] if candidate is not None else None
        update = {"targets": [target], "quantization": name, "search": None}
        if name is not None:
            quantization[name] = section
            if beside:
                update["validation"] = _beside_float(entry.validation)
        builds.append(entry.model_copy(update=update))
    recipe = replace(project.recipe, spec=spec.model_copy(update={"quantization": quantization, "builds": builds}))
    return Project(recipe=recipe, store=project.store, build_dir=result.folder)


def _baseline_timed_together(validation) -> bool:
    return validation.baseline is not None and validation.baseline.timed_together  # one library beside it at most


def _beside_float(validation: ValidationSpec | None) -> ValidationSpec:
    """A build's validation overrides with its float library timed in turns with it."""
    base = validation or ValidationSpec()
    return base.model_copy(update={"timing": base.timing.model_copy(update={"beside_float": True})})


def _built(
    project: Project, entry, result: SearchResult, sections: dict, *, must_build: bool = True
) -> list[BuildReport]:
    """Build the candidates (cached ones are read back) and report each as `modelbuild build` would. With
    `must_build` (the first candidate, the quantization section as written, and the float build), a failed
    stage ends the search with its error and exit code: there is nothing to search from or compare with."""
    report = _report(project, entry, result, sections, must_build=must_build)
    order = [build_name(model_of(result.build), target_of(result.build), result.names.get(c)) for c in sections]
    by_name = {b.name: b for b in report.builds}
    return [by_name[n] for n in order]


def _report(project: Project, entry, result: SearchResult, sections: dict, *, must_build: bool = False) -> Report:
    candidates_project = _candidate_project(project, entry, result, sections)
    run = candidates_project.run([], Options(keep_going=True))
    # a candidate that fails is rejected; the machine failing (a full disk) is no verdict on any candidate
    fatal = [r for r in run.failed if must_build or r.exit_code == EnvironmentFailure.exit_code]
    if fatal:
        error = ModelbuildError(f"{result.build}: the search cannot go on: {fatal[0].node} failed: {fatal[0].error}")
        error.exit_code = fatal[0].exit_code or StageError.exit_code
        raise error
    return collect(candidates_project, run)


def _verdict(outcome: Outcome, objective: str) -> str:
    value = (
        "-"
        if outcome.objective is None
        else (f"{outcome.objective:.0f} bytes" if objective == "size" else f"{outcome.objective:.3f} ms")
    )
    worst = f", worst cosine {outcome.accuracy:.6f}" if outcome.accuracy is not None else ""
    if outcome.passed:
        return f"passed: {objective} {value}{worst}"
    return f"rejected: {outcome.why or 'no accuracy gate applies'} ({objective} {value}{worst})"
