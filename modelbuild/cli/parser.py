"""The arguments of every command, and which function runs each."""

from __future__ import annotations

import argparse
from pathlib import Path

from modelbuild import __version__
from modelbuild.cli.authoring import cmd_ci_workflow, cmd_init, cmd_schema
from modelbuild.cli.build import cmd_build, cmd_report
from modelbuild.cli.cache import cmd_cache, cmd_clean
from modelbuild.cli.inspection import cmd_doctor, cmd_explain, cmd_graph, cmd_status
from modelbuild.cli.optimise import cmd_search, cmd_tune

COMMANDS = (
    "build",
    "init",
    "status",
    "explain",
    "graph",
    "clean",
    "cache",
    "schema",
    "report",
    "tune",
    "doctor",
    "ci-workflow",
    "search",
)


def input_sizes(text: str) -> tuple[str, list[int]]:
    """`x=1,3,224,224` -> ('x', [1, 3, 224, 224]), as tvmc's --input-shapes took them; the name is what
    comes before the last '=' (exporters put '=' in no names, but ':' and '.' in many)."""
    name, equals, sizes = text.rpartition("=")
    try:
        shape = [int(size) for size in sizes.split(",")]
    except ValueError:
        shape = []
    if not equals or not name or not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: write NAME=SIZES, sizes positive and comma-separated: x=1,3,224,224"
        )
    return name, shape


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modelbuild", description="Build ONNX models into TVM libraries.")
    parser.add_argument("--version", action="version", version=f"modelbuild {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-f", "--file", type=Path, default=Path("deploy.toml"), help="the recipe (deploy.toml)")
    common.add_argument("--cache-dir", type=Path, help="the store (default: .cache beside the recipe)")
    common.add_argument("--build-dir", type=Path, help="where artifacts land (default: build beside the recipe)")
    common.add_argument(
        "--cache-mode",
        choices=("read", "readwrite", "off"),
        help="the remote cache: read (pull requests), readwrite (trusted CI) or off",
    )
    common.add_argument(
        "--baseline",
        type=Path,
        metavar="REPORT",
        help="compare with this earlier report.json (replaces [validation.baseline] report)",
    )
    sub = parser.add_subparsers(dest="command")

    build = sub.add_parser("build", parents=[common], help="build everything, or the builds selected")
    build.add_argument("selectors", nargs="*", help="builds to make: model@target, a model, or a glob")
    build.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=1,
        help="run up to N independent stages at once (a stage that times on this machine runs alone)",
    )
    build.add_argument(
        "--executor",
        metavar="WHERE",
        help="where stages run: local (this machine), ray://HOST:PORT (a Ray cluster; stages that time stay "
        "here), or auto (the recipe's cluster where it answers, else here); MODELBUILD_EXECUTOR sets it too",
    )
    build.add_argument("-k", "--keep-going", action="store_true", help="continue past a failed build")
    build.add_argument("-n", "--dry-run", action="store_true", help="say what would run and why")
    build.add_argument("--json", action="store_true", help="print a machine-readable summary")
    build.set_defaults(handler=cmd_build)

    init = sub.add_parser("init", help="write a deploy.toml for a model: inputs, a target and validation preset")
    init.add_argument("model", type=Path, help="the ONNX model")
    init.add_argument(
        "--target", default="host", help="target preset: host (this machine), x86-server, rpi4, cuda (an sm_80+ GPU)"
    )
    init.add_argument("--name", help="the model's name in the recipe (default: from the file name)")
    init.add_argument("-f", "--file", type=Path, default=Path("deploy.toml"), help="the recipe to write")
    init.add_argument("--force", action="store_true", help="overwrite an existing recipe")
    init.add_argument(
        "--input",
        dest="inputs",
        action="append",
        default=[],
        type=input_sizes,
        metavar="NAME=1,3,224,224",
        help="the sizes to build an input for, where the model leaves dimensions dynamic (repeat for each input)",
    )
    init.add_argument(
        "--int8", action="store_true", help="an int8 build beside the float one, with its own calibration and gates"
    )
    init.set_defaults(handler=cmd_init)

    status = sub.add_parser("status", parents=[common], help="list stale stages and why; exit 1 if any")
    status.add_argument("selectors", nargs="*")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=cmd_status)

    explain = sub.add_parser("explain", parents=[common], help="the key inputs of a build's stages")
    explain.add_argument("build")
    explain.add_argument(
        "--ir",
        action="store_true",
        help="write the IR before and after fusion and memory planning next to the artifact",
    )
    explain.set_defaults(handler=cmd_explain)

    graph = sub.add_parser("graph", parents=[common], help="the graph of stages")
    graph.add_argument("--format", choices=("tree", "dot", "mermaid"), default="tree")
    graph.set_defaults(handler=cmd_graph)

    clean = sub.add_parser("clean", parents=[common], help="remove the build folder (--all: the cache too)")
    clean.add_argument("--all", action="store_true", help="also empty the cache, except the tuning databases")
    clean.add_argument(
        "--tuning", action="store_true", help="with --all, remove the tuning databases too (`tune export` them first)"
    )
    clean.set_defaults(handler=cmd_clean)

    cache = sub.add_parser("cache", parents=[common], help="the cache: `cache stats`, `cache verify`, `cache gc`")
    cache.add_argument("action", choices=("stats", "verify", "gc"))
    cache.add_argument("--json", action="store_true")
    cache.add_argument("--fix", action="store_true", help="verify: remove the damaged objects and entries")
    cache.add_argument("--max-size", help="gc: evict least recently used entries until the cache fits, e.g. 20G")
    cache.add_argument("--max-age", type=float, help="gc: evict entries not used for this many days")
    cache.add_argument(
        "--include-current", action="store_true", help="gc: may evict what this recipe's builds still use too"
    )
    cache.set_defaults(handler=cmd_cache)

    report = sub.add_parser("report", parents=[common], help="re-render the reports from the cache, running nothing")
    report.add_argument("selectors", nargs="*")
    report.set_defaults(handler=cmd_report)

    tune = sub.add_parser("tune", parents=[common], help="move tuning records: `tune export FILE`, `tune import FILE`")
    tune.add_argument("action", choices=("export", "import"))
    tune.add_argument("path", type=Path, help="the records file")
    tune.set_defaults(handler=cmd_tune)

    doctor = sub.add_parser(
        "doctor", parents=[common], help="what this machine can build and validate for each target, and what to install"
    )
    doctor.add_argument("--json", action="store_true")
    doctor.set_defaults(handler=cmd_doctor)

    search = sub.add_parser(
        "search", parents=[common], help="find the fastest quantization of a build that passes its accuracy gates"
    )
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
