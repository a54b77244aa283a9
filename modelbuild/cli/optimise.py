"""Commands around the slow stages: `tune export|import` moves tuning records, `search` finds the
fastest quantization that passes the gates."""

from __future__ import annotations

import json

from modelbuild.cli.common import EXIT_GATE_FAILED, EXIT_OK, project_of, relative
from modelbuild.errors import ModelbuildError
from modelbuild.pipeline.names import quantization_of


def cmd_tune(args, console) -> int:
    from modelbuild.tuning import database as tuning_db

    project = project_of(args)
    if args.action == "export":
        exported = tuning_db.export_all(project.tuning_root)
        args.path.parent.mkdir(parents=True, exist_ok=True)
        args.path.write_text(tuning_db.format_export(exported))
        records = sum(len(d["records"]) for d in exported["databases"])
        console.print(
            f"exported {records} records for {len(exported['databases'])} targets to {args.path}", markup=False
        )
        return EXIT_OK
    try:
        exported = json.loads(args.path.read_text())
    except (OSError, ValueError) as err:
        raise ModelbuildError(f"{args.path}: cannot read tuning records ({err})") from None
    total = tuning_db.import_all(project.tuning_root, exported)
    console.print(f"imported {args.path}: {total} records known", markup=False)
    return EXIT_OK


def cmd_search(args, console) -> int:
    from modelbuild.search import outputs
    from modelbuild.search.runner import run_search

    project = project_of(args)
    say = (lambda line: None) if args.json else (lambda line: console.print(line, markup=False))
    result = run_search(project, args.build, say)
    base = project.recipe.spec.quantization[quantization_of(result.build)]
    paths = outputs.write(result, base)
    if args.json:
        print(json.dumps(outputs.to_json(result), indent=2))
    else:
        console.print(outputs.markdown(result), markup=False)
        if result.best is not None:
            console.print(
                f"snippet: {relative(paths[0])} (commit it, include it, and build with quantization = "
                f'"{outputs.snippet_name(result)}")',
                markup=False,
            )
        console.print(f"report: {relative(result.folder / 'search.md')}", markup=False)
    return EXIT_OK if result.best is not None else EXIT_GATE_FAILED
