"""`modelbuild build` (the default command) and `modelbuild report`: what ran, the figures and gates of
each build, the reports, and the exit code they decide."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from modelbuild.cli.common import (
    EXIT_GATE_FAILED,
    EXIT_OK,
    project_of,
    relative,
    say_error,
)
from modelbuild.engine.events import Status
from modelbuild.engine.scheduler import Options
from modelbuild.errors import BuildFailed, ModelbuildError
from modelbuild.pipeline.names import model_of, quantization_of, select, target_of


def cmd_build(args, console) -> int:
    """modelbuild.api.run_build with a live view; then the summary, the reports' verdict and the exit code."""
    from modelbuild.api import run_build
    from modelbuild.cli.console import LiveReporter

    project = project_of(args)
    plan = select(project.plan, args.selectors)
    with LiveReporter(console if not args.json else _null_console(), list(plan.nodes)) as reporter:
        outcome = run_build(
            project, args.selectors, jobs=args.jobs, keep_going=args.keep_going, dry_run=args.dry_run, reporter=reporter
        )
    run, report = outcome.run, outcome.report
    if report is None:  # a dry run
        for r in run.results.values():
            if r.status is Status.STALE:
                console.print(f"would run {r.node}: {'; '.join(map(str, r.reasons))}", markup=False)
        if not run.stale:
            console.print("nothing to do: every stage is cached", markup=False)
        return EXIT_OK
    if args.json:
        print(json.dumps(_summary_json(project, run, report), indent=2))
    else:
        _print_summary(console, project, plan, run)
        print_outcome(console, project, report)
    for message in project.store.messages():
        say_error(message, prefix="note: ")
    _to_github(project, report, stream=sys.stderr if args.json else sys.stdout)
    return _exit_code(run, report)


def _exit_code(run, report) -> int:
    """A failed stage's code (bad input first, then the environment, then the stage), else the gates'."""
    if run.failed:
        return BuildFailed(run.failed, report).exit_code
    return EXIT_OK if report.passed else EXIT_GATE_FAILED


def print_outcome(console, project, report) -> None:
    """One figures line per build, each failed gate with its value and limit, and where the report is."""
    from modelbuild.reports.markdown import outcome_line, summary_line

    for build in sorted(report.builds, key=lambda b: b.name):
        line = summary_line(build)
        if line:
            console.print(line, markup=False)
    for build in sorted(report.builds, key=lambda b: b.name):
        console.print(outcome_line(build), markup=False)
    for build in report.builds:
        for gate in build.gates:
            if not gate.passed:
                console.print(f"GATE FAILED {build.name}  {gate.describe()}", markup=False)
    verdict = "all gates passed" if report.passed else "gates FAILED"
    console.print(f"{verdict}: report {relative(project.build_dir / 'report.json')}", markup=False)


def _to_github(project, report, stream) -> None:
    """In a GitHub Actions job: the report as the job summary, failed gates as annotations on the recipe (on
    stderr under --json, whose stdout is the summary alone; the runner reads workflow commands from both)."""
    from modelbuild.reports import github, markdown

    if os.environ.get("GITHUB_STEP_SUMMARY"):
        github.append_summary(Path(os.environ["GITHUB_STEP_SUMMARY"]), markdown.render(report))
    if os.environ.get("GITHUB_ACTIONS") != "true":
        return

    def locate(build: str, gate: str):
        spec = project.recipe.build_spec(model_of(build), target_of(build), quantization_of(build))
        return project.recipe.gate_location(spec, gate)

    for line in github.annotations(report, locate, lambda path: relative(Path(path))):
        print(line, file=stream, flush=True)


def _print_summary(console, project, plan, run) -> None:
    from modelbuild.cli.console import is_live, summary_table

    results = list(run.results.values())
    if is_live(console):
        console.print(summary_table(results))
    for r in run.failed:
        console.print(f"FAILED {r.node}: {r.error}" + (f"\n  log: {r.log}" if r.log else ""), markup=False)
    built = sum(r.status is Status.BUILT for r in results)
    cached = sum(r.status is Status.CACHED for r in results)
    console.print(f"{built} built, {cached} cached, {len(run.failed)} failed", markup=False)
    for path in _artifacts(project, plan, run):
        console.print(f"artifact: {path}", markup=False)


def _artifacts(project, plan, run) -> list[str]:
    out = []
    for node in plan.nodes.values():
        result = run.results.get(node.id)
        if result and result.status in (Status.BUILT, Status.CACHED):
            out += [relative(project.build_dir / rel) for rel in node.publish.values()]
    return out


def _summary_json(project, run, report) -> dict:
    return {
        "passed": report.passed,
        "report": str(project.build_dir / "report.json"),
        "nodes": [
            {
                "node": r.node,
                "stage": r.stage,
                "build": r.build,
                "status": r.status.value,
                "seconds": round(r.seconds, 4),
                "key": r.key,
                "reasons": [x.as_dict() for x in r.reasons],
                "error": r.error,
                "log": r.log,
            }
            for r in run.results.values()
        ],
        "cache": run.stats.as_dict(),
    }


def _null_console():
    import io

    from modelbuild.cli.console import PlainConsole

    return PlainConsole(io.StringIO())


def cmd_report(args, console) -> int:
    project = project_of(args)
    run = project.run(args.selectors, Options(dry_run=True))
    if run.stale:
        names = ", ".join(r.node for r in run.stale[:3])
        raise ModelbuildError(f"not built yet: {names}; run `modelbuild` first (report runs nothing)")
    from modelbuild.api import write_reports

    report = write_reports(project, run, cache=project.store.stats().as_dict())
    print_outcome(console, project, report)
    return EXIT_OK if report.passed else EXIT_GATE_FAILED
