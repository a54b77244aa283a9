"""The command line: the only place that prints or exits."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import traceback
from dataclasses import asdict
from pathlib import Path

from modelbuild import __version__
from modelbuild.build.events import Status
from modelbuild.build.scheduler import Options
from modelbuild.errors import environment_failure, EnvironmentFailure, ModelbuildError
from modelbuild.pipeline.names import model_of, quantization_of, select, target_of

COMMANDS = ("build", "init", "status", "explain", "graph", "clean", "cache", "schema", "report", "tune",
            "doctor", "ci-workflow", "search")

EXIT_OK, EXIT_GATE_FAILED, EXIT_USAGE, EXIT_STAGE_FAILED, EXIT_ENVIRONMENT = 0, 1, 2, 3, 4
EXIT_STALE = 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    try:
        args = _parser().parse_args(_with_command(argv))
    except SystemExit as exit:  # argparse has printed its usage line
        return EXIT_USAGE if exit.code not in (0, None) else EXIT_OK
    try:
        return _run(args, debug)
    except BrokenPipeError:  # `modelbuild schema | head`: the reader left; that is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _with_command(argv: list[str]) -> list[str]:
    """argv with `build` put first when no command is named; a word one typo away from a command is refused,
    not taken for a build selector (`modelbuild biuld`)."""
    if argv and (argv[0] in COMMANDS or argv[0] in ("-h", "--help", "--version")):
        return argv
    if argv and not argv[0].startswith("-"):
        import difflib  # here, as every import on the way to a no-op build is paid on every build

        close = difflib.get_close_matches(argv[0], COMMANDS, n=1, cutoff=0.75)
        if close and "@" not in argv[0]:
            _error(f"unknown command {argv[0]!r} (fix: did you mean `modelbuild {close[0]}`? To build a model "
                   f"of that name, write `modelbuild build {argv[0]}`)")
            raise SystemExit(EXIT_USAGE)
    return ["build", *argv]


def _run(args, debug: bool) -> int:
    """Call the command; every failure is one line on stderr and its exit code (`--debug` adds the traceback)."""
    from modelbuild.console import make_console

    previous = signal.signal(signal.SIGINT, _interrupt_once) if _main_thread() else None
    try:
        return args.handler(args, make_console())
    except ModelbuildError as err:
        return _failed(err, err.exit_code, debug)
    except OSError as err:
        failure = environment_failure(err)
        if failure is None:
            raise
        return _failed(failure, EXIT_ENVIRONMENT, debug)
    except KeyboardInterrupt:  # outside a build's stages (those raise Interrupted)
        _error("interrupted: nothing half-built was recorded", prefix="")
        return 130
    finally:
        # after a Ctrl-C the command is ending: more presses stay ignored until the process has exited
        if previous is not None and signal.getsignal(signal.SIGINT) is _interrupt_once:
            signal.signal(signal.SIGINT, previous)


def _interrupt_once(signum, frame) -> None:
    """The first Ctrl-C stops the command; later ones are ignored, so they cannot cut short the clean-up the
    first one started (killing running stages takes well under a second)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _failed(err: BaseException, code: int, debug: bool) -> int:
    if debug:
        traceback.print_exc()
    _error(str(err))
    return code


def _error(message: str, prefix: str = "error: ") -> None:
    from modelbuild.console import make_console

    make_console(sys.stderr).print(prefix + message, markup=False)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modelbuild", description="Build ONNX models into TVM libraries.")
    parser.add_argument("--version", action="version", version=f"modelbuild {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-f", "--file", type=Path, default=Path("deploy.toml"), help="the recipe (deploy.toml)")
    common.add_argument("--cache-dir", type=Path, help="the store (default: .cache beside the recipe)")
    common.add_argument("--build-dir", type=Path, help="where artifacts land (default: build beside the recipe)")
    common.add_argument("--cache-mode", choices=("read", "readwrite", "off"),
                        help="the remote cache: read (pull requests), readwrite (trusted CI) or off")
    common.add_argument("--baseline", type=Path, metavar="REPORT",
                        help="compare with this earlier report.json (replaces [validation.baseline] report)")
    sub = parser.add_subparsers(dest="command")

    build = sub.add_parser("build", parents=[common], help="build everything, or the builds selected")
    build.add_argument("selectors", nargs="*", help="builds to make: model@target, a model, or a glob")
    build.add_argument("-j", "--jobs", type=int, default=1, help="run up to N independent stages at once")
    build.add_argument("-k", "--keep-going", action="store_true", help="continue past a failed build")
    build.add_argument("-n", "--dry-run", action="store_true", help="say what would run and why")
    build.add_argument("--json", action="store_true", help="print a machine-readable summary")
    build.set_defaults(handler=cmd_build)

    init = sub.add_parser("init", help="write a deploy.toml for a model: inputs, a target and validation preset")
    init.add_argument("model", type=Path, help="the ONNX model")
    init.add_argument("--target", default="host", help="target preset: host (this machine), x86-server, rpi4")
    init.add_argument("--name", help="the model's name in the recipe (default: from the file name)")
    init.add_argument("-f", "--file", type=Path, default=Path("deploy.toml"), help="the recipe to write")
    init.add_argument("--force", action="store_true", help="overwrite an existing recipe")
    init.set_defaults(handler=cmd_init)

    status = sub.add_parser("status", parents=[common], help="list stale stages and why; exit 1 if any")
    status.add_argument("selectors", nargs="*")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=cmd_status)

    explain = sub.add_parser("explain", parents=[common], help="the key inputs of a build's stages")
    explain.add_argument("build")
    explain.add_argument("--ir", action="store_true",
                         help="write the IR before and after fusion and memory planning next to the artifact")
    explain.set_defaults(handler=cmd_explain)

    graph = sub.add_parser("graph", parents=[common], help="the graph of stages")
    graph.add_argument("--format", choices=("tree", "dot", "mermaid"), default="tree")
    graph.set_defaults(handler=cmd_graph)

    clean = sub.add_parser("clean", parents=[common], help="remove the build folder (--all: the cache too)")
    clean.add_argument("--all", action="store_true", help="also empty the cache, except the tuning databases")
    clean.add_argument("--tuning", action="store_true",
                       help="with --all, remove the tuning databases too (`tune export` them first)")
    clean.set_defaults(handler=cmd_clean)

    cache = sub.add_parser("cache", parents=[common], help="the cache: `cache stats`, `cache verify`, `cache gc`")
    cache.add_argument("action", choices=("stats", "verify", "gc"))
    cache.add_argument("--json", action="store_true")
    cache.add_argument("--fix", action="store_true", help="verify: remove the damaged objects and entries")
    cache.add_argument("--max-size", help="gc: evict least recently used entries until the cache fits, e.g. 20G")
    cache.add_argument("--max-age", type=float, help="gc: evict entries not used for this many days")
    cache.add_argument("--include-current", action="store_true",
                       help="gc: may evict what this recipe's builds still use too")
    cache.set_defaults(handler=cmd_cache)

    report = sub.add_parser("report", parents=[common], help="re-render the reports from the cache, running nothing")
    report.add_argument("selectors", nargs="*")
    report.set_defaults(handler=cmd_report)

    tune = sub.add_parser("tune", parents=[common], help="move tuning records: `tune export FILE`, `tune import FILE`")
    tune.add_argument("action", choices=("export", "import"))
    tune.add_argument("path", type=Path, help="the records file")
    tune.set_defaults(handler=cmd_tune)

    doctor = sub.add_parser("doctor", parents=[common],
                            help="what this machine can build and validate for each target, and what to install")
    doctor.add_argument("--json", action="store_true")
    doctor.set_defaults(handler=cmd_doctor)

    search = sub.add_parser("search", parents=[common],
                            help="find the fastest quantization of a build that passes its accuracy gates")
    search.add_argument("build", help="the build, model+quantization@target; its [[builds]] entry names a search")
    search.add_argument("--json", action="store_true", help="print search.json instead of the table")
    search.set_defaults(handler=cmd_search)

    workflow = sub.add_parser("ci-workflow", help="write a GitHub Actions workflow that builds, gates and reports")
    workflow.add_argument("-o", "--output", type=Path, default=Path(".github/workflows/models.yml"))
    workflow.add_argument("--force", action="store_true", help="overwrite an existing workflow")
    workflow.set_defaults(handler=cmd_ci_workflow)

    schema = sub.add_parser("schema", help="print the JSON Schema of deploy.toml")
    schema.set_defaults(handler=cmd_schema)
    return parser


def _project(args):
    from modelbuild.pipeline.project import open_project

    return open_project(args.file, cache_dir=args.cache_dir, build_dir=args.build_dir, cache_mode=args.cache_mode,
                        baseline=args.baseline)


def cmd_build(args, console) -> int:
    from modelbuild.console import LiveReporter

    if args.jobs < 1:
        raise ModelbuildError(f"-j must be at least 1, got {args.jobs}")
    project = _project(args)
    plan = select(project.plan, args.selectors)
    options = Options(jobs=args.jobs, keep_going=args.keep_going, dry_run=args.dry_run)
    with LiveReporter(console if not args.json else _null_console(), list(plan.nodes)) as reporter:
        run = project.run(args.selectors, options, reporter)
    results = list(run.results.values())
    if args.dry_run:
        for r in results:
            if r.status is Status.STALE:
                console.print(f"would run {r.node}: {'; '.join(map(str, r.reasons))}", markup=False)
        if not run.stale:
            console.print("nothing to do: every stage is cached", markup=False)
        return EXIT_OK
    report = _write_reports(project, run)
    if args.json:
        print(json.dumps(_summary_json(project, run, report), indent=2))
    else:
        _print_summary(console, project, plan, run)
        _print_outcome(console, project, report)
    for message in project.store.messages():
        _error(message, prefix="note: ")
    _to_github(project, report, stream=sys.stderr if args.json else sys.stdout)
    return _exit_code(run, report)


def _write_reports(project, run, cache: dict | None = None):
    from modelbuild.reports import collect, write_reports

    report = collect(project, run, cache=cache)
    write_reports(report, project.build_dir)
    return report


def _exit_code(run, report) -> int:
    """Bad input first (the user's to fix), then the environment, then a failed stage, then the gates."""
    codes = {r.exit_code or EXIT_STAGE_FAILED for r in run.failed}
    for code in (EXIT_USAGE, EXIT_ENVIRONMENT, EXIT_STAGE_FAILED):
        if code in codes:
            return code
    return EXIT_OK if report.passed else EXIT_GATE_FAILED


def _print_outcome(console, project, report) -> None:
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
    console.print(f"{verdict}: report {_relative(project.build_dir / 'report.json')}", markup=False)


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

    for line in github.annotations(report, locate, lambda path: _relative(Path(path))):
        print(line, file=stream, flush=True)


def _print_summary(console, project, plan, run) -> None:
    from modelbuild.console import is_live, summary_table

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
            out += [_relative(project.build_dir / rel) for rel in node.publish.values()]
    return out


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _summary_json(project, run, report) -> dict:
    return {
        "passed": report.passed,
        "report": str(project.build_dir / "report.json"),
        "nodes": [{"node": r.node, "stage": r.stage, "build": r.build, "status": r.status.value,
                   "seconds": round(r.seconds, 4), "key": r.key, "reasons": [x.as_dict() for x in r.reasons],
                   "error": r.error,
                   "log": r.log} for r in run.results.values()],
        "cache": run.stats.as_dict(),
    }


def _null_console():
    import io

    from modelbuild.console import PlainConsole

    return PlainConsole(io.StringIO())


def cmd_init(args, console) -> int:
    from modelbuild import scaffold
    from modelbuild.errors import StageError
    from modelbuild.stages.onnx_import import model_signature

    if args.target not in scaffold.TARGET_PRESETS:
        raise ModelbuildError(f"no target preset {args.target!r} (fix: use one of "
                              f"{', '.join(scaffold.TARGET_PRESETS)})")
    if args.file.exists() and not args.force:
        raise ModelbuildError(f"{args.file} exists (fix: pass --force to overwrite it, or -f to write another file)")
    if not args.model.is_file():
        raise ModelbuildError(f"{args.model}: no such model file")
    try:
        signature = model_signature(args.model)
    except StageError as err:
        raise ModelbuildError(f"{args.model}: {err.message}") from None
    model_path = os.path.relpath(args.model.resolve(), args.file.resolve().parent)
    args.file.write_text(scaffold.write_recipe(model_path=model_path, signature=signature, target=args.target,
                                               name=args.name))
    dynamic = [name for name, spec in signature.inputs.items() if scaffold.dynamic_dims(spec["shape"])]
    console.print(f"wrote {_relative(args.file)} ({scaffold.model_kind(signature)} preset, target {args.target})",
                  markup=False)
    if dynamic:
        console.print(f"set the sizes to build for where it says TODO (dynamic in the model: "
                      f"{', '.join(dynamic)}), then run `modelbuild`", markup=False)
    else:
        console.print("the model's shapes are static: run `modelbuild` to build it", markup=False)
    return EXIT_OK


def cmd_status(args, console) -> int:
    project = _project(args)
    run = project.run(args.selectors, Options(dry_run=True))
    stale = [r for r in run.results.values() if r.status is Status.STALE]
    if args.json:
        print(json.dumps({"stale": [{"node": r.node, "reasons": [x.as_dict() for x in r.reasons]} for r in stale]},
                         indent=2))
    else:
        for r in stale:
            console.print(f"stale  {r.node}: {'; '.join(map(str, r.reasons))}", markup=False)
        if not stale:
            console.print(f"up to date: {len(run.results)} stages cached", markup=False)
    return EXIT_STALE if stale else EXIT_OK


def cmd_explain(args, console) -> int:
    from modelbuild.pipeline.explain import explain, write_ir

    project = _project(args)
    for line in explain(project, args.build):
        console.print(line, markup=False)
    if args.ir:
        for path in write_ir(project, args.build):
            console.print(f"wrote {_relative(path)}", markup=False)
    return EXIT_OK


def cmd_graph(args, console) -> int:
    from modelbuild.build.render import FORMATS

    print(FORMATS[args.format](_project(args).plan))
    return EXIT_OK


def cmd_clean(args, console) -> int:
    if args.tuning and not args.all:
        raise ModelbuildError("--tuning only goes with --all (fix: modelbuild clean --all --tuning)")
    project = _project(args)
    with _alone_on(project.store, "clean"):
        shutil.rmtree(project.build_dir, ignore_errors=True)
        console.print(f"removed {_relative(project.build_dir)}", markup=False)
        if args.all:
            keep = () if args.tuning else (project.tuning_root,)
            project.store.clear(keep=keep + (project.store.store_lock(shared=False).path,))
            kept = f" (kept tuning databases in {_relative(project.tuning_root)}; --tuning removes them)" \
                if keep and project.tuning_root.exists() else ""
            console.print(f"emptied {_relative(project.store.root)}{kept}", markup=False)
    return EXIT_OK


@contextlib.contextmanager
def _alone_on(store, command: str):
    """The store's exclusive lock, for commands that remove what a running build may be using."""
    lock = store.store_lock(shared=False)
    if store.root.exists() and not lock.try_acquire():
        raise EnvironmentFailure(f"a build is running on the cache {_relative(store.root)}: run `modelbuild "
                                 f"{command}` when it has finished")
    try:
        yield
    finally:
        lock.release()


def cmd_cache(args, console) -> int:
    project = _project(args)
    if args.action == "verify":
        return _cache_verify(project, args, console)
    if args.action == "gc":
        return _cache_gc(project, args, console)
    stats = project.store.stats()
    entries, size = project.store.usage()
    data = {"entries": entries, "bytes": size, **stats.as_dict()}
    if args.json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    console.print(
        f"entries {entries}  bytes {size}  hits {stats.hits}  misses {stats.misses}  "
        f"hit rate {stats.hit_rate:.2f}  mean hit {stats.mean_hit * 1000:.1f} ms  "
        f"mean miss {stats.mean_miss:.2f} s", markup=False)
    return EXIT_OK


def _cache_verify(project, args, console) -> int:
    from modelbuild.build.housekeeping import verify

    with _alone_on(project.store, "cache verify"):
        damaged = verify(project.store, fix=args.fix)
    if args.json:
        print(json.dumps({"damaged": [{"path": str(d.path), "reason": d.reason} for d in damaged],
                          "removed": args.fix}, indent=2))
    for d in damaged if not args.json else ():
        console.print(f"{'removed' if args.fix else 'DAMAGED'} {_relative(d.path)}: {d.reason}", markup=False)
    if not args.json:
        entries, size = project.store.usage()
        fix = "" if args.fix or not damaged else " (fix: modelbuild cache verify --fix removes them)"
        console.print(f"checked the cache: {len(damaged)} damaged{fix}; {entries} entries, {size} bytes of objects "
                      "intact", markup=False)
    return EXIT_STALE if damaged and not args.fix else EXIT_OK


def _cache_gc(project, args, console) -> int:
    from modelbuild.build.housekeeping import collect_garbage, parse_size

    if args.max_size is None and args.max_age is None:
        raise ModelbuildError("cache gc needs a limit (fix: modelbuild cache gc --max-size 20G, or --max-age 30)")
    max_bytes = parse_size(args.max_size) if args.max_size is not None else None
    keep = frozenset() if args.include_current else _current_keys(project)
    with _alone_on(project.store, "cache gc"):
        done = collect_garbage(project.store, max_bytes=max_bytes, max_age_days=args.max_age, keep=keep)
    if args.json:
        print(json.dumps(vars(done), indent=2))
        return EXIT_OK
    over = (f"; {done.kept_for_recipe} entries over the limit kept because this recipe's builds use them "
            "(--include-current evicts them too)") if done.kept_for_recipe else ""
    console.print(f"removed {done.entries_removed} entries and {done.objects_removed} objects, freed "
                  f"{done.bytes_freed} bytes; {done.bytes_left} bytes left{over}", markup=False)
    return EXIT_OK


def _current_keys(project) -> frozenset[str]:
    """The keys of every stage of this recipe that is cached now: what the next build will reuse."""
    run = project.run([], Options(dry_run=True))
    return frozenset(r.key for r in run.results.values() if r.status is Status.CACHED and r.key)


def cmd_report(args, console) -> int:
    project = _project(args)
    run = project.run(args.selectors, Options(dry_run=True))
    if run.stale:
        names = ", ".join(r.node for r in run.stale[:3])
        raise ModelbuildError(f"not built yet: {names}; run `modelbuild` first (report runs nothing)")
    report = _write_reports(project, run, cache=project.store.stats().as_dict())
    _print_outcome(console, project, report)
    return EXIT_OK if report.passed else EXIT_GATE_FAILED


def cmd_tune(args, console) -> int:
    from modelbuild.compiler import tuning_db

    project = _project(args)
    if args.action == "export":
        exported = tuning_db.export_all(project.tuning_root)
        args.path.parent.mkdir(parents=True, exist_ok=True)
        args.path.write_text(tuning_db.format_export(exported))
        records = sum(len(d["records"]) for d in exported["databases"])
        console.print(f"exported {records} records for {len(exported['databases'])} targets to {args.path}",
                      markup=False)
        return EXIT_OK
    try:
        exported = json.loads(args.path.read_text())
    except (OSError, ValueError) as err:
        raise ModelbuildError(f"{args.path}: cannot read tuning records ({err})") from None
    total = tuning_db.import_all(project.tuning_root, exported)
    console.print(f"imported {args.path}: {total} records known", markup=False)
    return EXIT_OK


def cmd_doctor(args, console) -> int:
    from modelbuild.pipeline import doctor

    project = _project(args)
    caps = doctor.probe_capabilities()
    tools = doctor.toolchains()
    checks = [doctor.assess(name, table, caps, shutil.which, doctor.tracker_answers)
              for name, table in project.recipe.spec.targets.items()]
    if args.json:
        print(json.dumps({"tvm": caps, "toolchains": tools, "targets": [asdict(c) | {"ready": c.ready}
                                                                         for c in checks]}, indent=2))
    else:
        if caps.get("tvm") is None:
            console.print(f"tvm: cannot be imported here: {caps.get('error')} (fix: pip install -e .)", markup=False)
        else:
            console.print(f"tvm {caps['tvm']}: llvm {caps['llvm_version'] or 'missing'}, cuda code generation "
                          f"{'yes' if caps['cuda_codegen'] else 'no'}, a cuda device here "
                          f"{'yes' if caps['cuda_device'] else 'no'}", markup=False)
        console.print("toolchains: " + ", ".join(f"{name} {path or 'not found'}" for name, path in tools.items()),
                      markup=False)
        for c in checks:
            validates = c.validates or f"no: {c.validate_note}"
            console.print(f"{c.target}: build {'yes' if c.builds_here else 'NO'} ({c.build_note}); validate "
                          f"{validates}", markup=False)
    return EXIT_OK if all(c.ready for c in checks) else EXIT_STALE


def cmd_search(args, console) -> int:
    from modelbuild.search import outputs
    from modelbuild.search.runner import run_search

    project = _project(args)
    say = (lambda line: None) if args.json else (lambda line: console.print(line, markup=False))
    result = run_search(project, args.build, say)
    base = project.recipe.spec.quantization[quantization_of(result.build)]
    paths = outputs.write(result, base)
    if args.json:
        print(json.dumps(outputs.to_json(result), indent=2))
    else:
        console.print(outputs.markdown(result), markup=False)
        if result.best is not None:
            console.print(f"snippet: {_relative(paths[0])} (commit it, include it, and build with quantization = "
                          f'"{outputs.snippet_name(result)}")', markup=False)
        console.print(f"report: {_relative(result.folder / 'search.md')}", markup=False)
    return EXIT_OK if result.best is not None else EXIT_GATE_FAILED


def cmd_ci_workflow(args, console) -> int:
    from importlib import resources

    if args.output.exists() and not args.force:
        raise ModelbuildError(f"{args.output} exists (fix: pass --force to overwrite it, or -o to write another file)")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(resources.files("modelbuild.reports").joinpath("github-actions.yml").read_text())
    console.print(f"wrote {_relative(args.output)}: restores .cache, builds against the base branch's last build, "
                  "publishes report.md and junit.xml, uploads build/; replace OWNER in its pip line", markup=False)
    return EXIT_OK


def cmd_schema(args, console) -> int:
    from modelbuild.recipe.schema import json_schema

    print(json.dumps(json_schema(), indent=2))
    return EXIT_OK
