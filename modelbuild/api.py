"""modelbuild from Python: `modelbuild.build(...)` builds a recipe and returns its typed report.

The command line's `modelbuild build` is a layer over `run_build`: it renders the same outcome and turns it
into an exit code. From Python, failures are raised as the typed errors of modelbuild.errors instead:
RecipeError for a bad recipe, BuildFailed for failed stages, EnvironmentFailure for the machine.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from modelbuild.engine.events import Reporter, silent
from modelbuild.engine.plan import Plan
from modelbuild.engine.scheduler import Options, RunResult
from modelbuild.errors import BuildFailed, ModelbuildError
from modelbuild.pipeline.names import select
from modelbuild.pipeline.project import Project, open_project

if TYPE_CHECKING:
    from modelbuild.reports.model import Report


@dataclass(frozen=True)
class BuildOutcome:
    """What one build run did: its project, the plan it ran, every stage's result and the report."""

    project: Project
    plan: Plan
    run: RunResult
    report: Report | None  # None for a dry run, which writes no report


def build(
    recipe: str | os.PathLike = "deploy.toml",
    selectors: Sequence[str] = (),
    *,
    jobs: int | None = None,
    keep_going: bool = False,
    cache_dir: str | os.PathLike | None = None,
    build_dir: str | os.PathLike | None = None,
    cache_mode: str | None = None,
    baseline: str | os.PathLike | None = None,
    executor: str | None = None,
    reporter: Reporter = silent,
) -> Report:
    """Build the recipe's builds (or those `selectors` name: model@target, a model, a glob), write the
    reports into the build folder and return the report; failed gates are in it (`report.passed`). The store
    and build folder default to .cache/ and build/ beside the recipe, as on the command line; `executor` is
    --executor's (local, auto or ray://HOST:PORT). Raises
    BuildFailed if a stage failed, with the report of what did build."""
    project = open_project(
        Path(recipe),
        cache_dir=Path(cache_dir) if cache_dir else None,
        build_dir=Path(build_dir) if build_dir else None,
        cache_mode=cache_mode,
        baseline=Path(baseline) if baseline else None,
        executor=executor,
    )
    outcome = run_build(project, selectors, jobs=1 if jobs is None else jobs, keep_going=keep_going, reporter=reporter)
    assert outcome.report is not None, "only a dry run writes no report"
    if outcome.run.failed:
        raise BuildFailed(outcome.run.failed, outcome.report)
    return outcome.report


def run_build(
    project: Project,
    selectors: Sequence[str] = (),
    *,
    jobs: int = 1,
    keep_going: bool = False,
    dry_run: bool = False,
    reporter: Reporter = silent,
) -> BuildOutcome:
    """Run the selected builds of an open project and write their reports (not for a dry run); failed
    stages are in the outcome, not raised. A validate stage whose cached figures fail a timing gate runs
    again (reports.remeasure)."""
    from modelbuild.reports.remeasure import timing_doubts

    if jobs < 1:
        raise ModelbuildError(f"jobs (-j) must be at least 1, got {jobs}")
    plan = select(project.plan, list(selectors))
    options = Options(jobs=jobs, keep_going=keep_going, dry_run=dry_run)
    run = project.run(list(selectors), options, reporter, doubt=timing_doubts(project))
    report = None if dry_run else write_reports(project, run)
    return BuildOutcome(project, plan, run, report)


def write_reports(project: Project, run: RunResult, cache: dict | None = None) -> Report:
    """The run's report, written as report.json, report.md, junit.xml and report.html in the build folder."""
    from modelbuild.reports import collect, write_reports

    report = collect(project, run, cache=cache)
    write_reports(report, project.build_dir)
    return report
