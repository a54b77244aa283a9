"""The generated pages: every recipe field from the schema's pydantic models, every command and option from
the command line's argparse parser, and the benchmark page from the results the bench scripts wrote
(bench/results/*.json), and the layer table of the design page from the import rules. `python docs/reference.py`
rewrites them; a test fails where the committed pages
differ from what this writes, so they cannot drift from the code or the measurements.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PAGES = REPO / "docs" / "reference"
DESIGN = REPO / "docs" / "design.md"
LAYER_TABLE = "<!-- the table below is written by docs/reference.py from tests/helpers/layer_rules.py -->"
RESULTS = REPO / "bench" / "results"
HEAVY_GFLOP = 0.5  # convs and matmuls from this size are judged against the peak (bench/shapes.py)
WEIGHTED = ("conv", "grouped-conv", "depthwise-conv", "matmul", "gemm")


def recipe_page() -> str:
    from modelbuild.recipe.schema import Recipe

    out = [
        "# Recipe reference",
        "",
        "Every field of `deploy.toml`, generated from the schema (`modelbuild/recipe/schema.py`);",
        "`modelbuild schema` prints the same as JSON Schema for an editor. What the fields are for, with",
        "examples: [the recipe guide](../guide/recipe.md).",
    ]
    for name, model in _models(Recipe):
        out += ["", f"## {name}", "", _first_paragraph(model.__doc__), ""]
        out += ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
        for field, info in model.model_fields.items():
            key = info.alias or field
            out.append(
                f"| `{key}` | {_cell(_type_name(info.annotation))} | {_cell(_default(info))} | "
                f"{_cell(info.description or '')} |"
            )
    return "\n".join(out) + "\n"


def _models(root: type[BaseModel]) -> list[tuple[str, type[BaseModel]]]:
    """The root model and every model its fields hold, in the order they are first met: (section, model)."""
    found: list[tuple[str, type[BaseModel]]] = []
    seen: set[type] = set()

    def visit(section: str, model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        found.append((section, model))
        for field, info in model.model_fields.items():
            for nested in _nested_models(info.annotation):
                visit(_section(section, info.alias or field, info.annotation), nested)

    visit("deploy.toml", root)
    return found


def _section(parent: str, key: str, annotation) -> str:
    mapping = typing.get_origin(annotation) is dict
    listed = typing.get_origin(annotation) is list
    prefix = "" if parent == "deploy.toml" else f"{parent.strip('[]')}."
    if mapping:
        return f"[{prefix}{key}.NAME]"
    if listed:
        return f"[[{prefix}{key}]]"
    return f"[{prefix}{key}]"


def _nested_models(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _nested_models(arg)]


def _type_name(annotation) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(_toml(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args if a is not type(None)) + (
            " or none" if type(None) in args else ""
        )
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (list, tuple):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"table of {_type_name(args[1])}" if len(args) == 2 else "table"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table"
    return getattr(annotation, "__name__", str(annotation)).replace("typing.", "")


def _default(info) -> str:
    value = info.default_factory() if info.default_factory is not None else info.default
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return "its table's defaults"
    if value is None:
        return "none"
    if value in ({}, []):
        return "empty"
    return f"`{_toml(value)}`"


def _toml(value) -> str:
    """A value as a recipe writes it: strings in double quotes, true and false in lower case."""
    return json.dumps(value) if isinstance(value, (str, bool, list, dict)) else str(value)


def _first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def cli_page() -> str:
    from modelbuild.cli.parser import argument_parser

    parser = argument_parser()
    out = [
        "# Command-line reference",
        "",
        "Every command and option, generated from the parser (`modelbuild/cli/parser.py`); the same as",
        "`modelbuild COMMAND --help`. How they fit together: [the command-line guide](../guide/cli.md).",
        "",
        "## modelbuild",
        "",
        parser.description or "",
        "",
        *_options(parser),
    ]
    for name, command in _subcommands(parser).items():
        out += ["", f"## modelbuild {name}", "", command.description or _help_of(parser, name), ""]
        out += _options(command)
    return "\n".join(out) + "\n"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_of(parser: argparse.ArgumentParser, name: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == name:
                    return choice.help or ""
    return ""


def _options(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        names = ", ".join(action.option_strings) or action.dest.upper()
        if action.nargs in ("*", "+") and not action.option_strings:
            names += " …"
        choices = " (" + " | ".join(map(str, action.choices)) + ")" if action.choices else ""
        rows.append(f"| `{names}` | {_cell((action.help % vars(action) if action.help else '') + choices)} |")
    return ["| argument | meaning |", "| --- | --- |", *rows] if rows else []


def benchmarks_page() -> str:
    """Each speed-fuzzer draw in bench/results (shapes-SEED.json): its machine, commit and summary figures,
    newest first, then the families of operators and the worst ops of the newest."""
    draws = sorted(
        (json.loads(path.read_text()) for path in RESULTS.glob("shapes-*.json")),
        key=lambda d: (d["date"], d["seed"]),
        reverse=True,
    )
    out = [
        "# Benchmarks",
        "",
        "Generated from the results the benchmark scripts write (`bench/results/*.json`). The speed fuzzer,",
        "`python bench/shapes.py [--seed N]`, builds 200 operators of shapes drawn at random, untuned, and times",
        "each against onnxruntime in alternating blocks on the same threads; ratios are modelbuild's time over",
        "onnxruntime's (under 1 is faster), the peak an FMA loop measured in the same run. The goals",
        "(issue 72): median <= 0.9x, p90 <= 1.3x, max <= 2.0x; convs and matmuls of 0.5 GFLOP or more at 60%",
        "of the peak. Older measurements, in prose: `bench/results/README.md`.",
        "",
        "| date | seed | commit | CPU, threads | peak GFLOP/s | ops | median | p90 | max | heavy ops: of peak |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for d in draws:
        ratios = [r["ratio"] for r in d["rows"] if r.get("ratio")]
        heavy = [
            r["peak_fraction"]
            for r in d["rows"]
            if r.get("ratio") and r["gflop"] >= HEAVY_GFLOP and r["family"] in WEIGHTED
        ]
        m = d["machine"]
        out.append(
            f"| {d['date']} | {d['seed']} | {d['commit']} | {m['cpu']}, {m['threads']} | "
            f"{m['fp32_peak_gflops']:.0f} | {len(ratios)} of {len(d['rows'])} | {statistics.median(ratios):.2f}x | "
            f"{_nearest_rank(ratios, 90):.2f}x | {max(ratios):.2f}x | "
            f"{f'{statistics.median(heavy):.0%} (of {len(heavy)})' if heavy else '-'} |"
        )
    if draws:
        newest = draws[0]
        out += ["", f"## By family (seed {newest['seed']})", ""]
        out += ["| family | ops | median | max | above 1.3x |", "| --- | --- | --- | --- | --- |"]
        families: dict[str, list[float]] = {}
        for r in newest["rows"]:
            if r.get("ratio"):
                families.setdefault(r["family"], []).append(r["ratio"])
        for family, values in sorted(families.items(), key=lambda kv: -statistics.median(kv[1])):
            above = sum(v > 1.3 for v in values)
            out.append(
                f"| {family} | {len(values)} | {statistics.median(values):.2f}x | {max(values):.2f}x | {above} |"
            )
        out += ["", f"## The worst ten (seed {newest['seed']})", ""]
        out += ["| op | geometry | ratio | GFLOP/s | of peak |", "| --- | --- | --- | --- | --- |"]
        worst = sorted((r for r in newest["rows"] if r.get("ratio")), key=lambda r: -r["ratio"])[:10]
        out += [
            f"| {r['op']} | {r['geometry']} | {r['ratio']:.2f}x | {r['gflops']:.1f} | {r['peak_fraction']:.0%} |"
            for r in worst
        ]
        failed = [r for r in newest["rows"] if r.get("status", "ok") != "ok"]
        if failed:
            out += ["", "Not built: " + "; ".join(f"{r['op']} ({r['geometry']}): {r['status']}" for r in failed)]
    return "\n".join(out) + "\n"


def _nearest_rank(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def design_page() -> str:
    """docs/design.md with its layer table (the rows after the marker line) written from the import rules
    tests/test_layers.py enforces."""
    from tests.helpers import layer_rules

    lines = DESIGN.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip() == LAYER_TABLE) + 2  # and a blank line
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "".join(lines[: start - 1]) + "\n" + layer_rules.table() + "".join(lines[end:])


def generated() -> dict[Path, str]:
    """Each generated page's path and text."""
    return {
        PAGES / "recipe.md": recipe_page(),
        PAGES / "cli.md": cli_page(),
        REPO / "docs" / "benchmarks.md": benchmarks_page(),
        DESIGN: design_page(),
    }


def write() -> list[Path]:
    PAGES.mkdir(parents=True, exist_ok=True)
    for path, text in generated().items():
        path.write_text(text)
    return list(generated())


if __name__ == "__main__":
    for path in write():
        print(path.relative_to(REPO))
