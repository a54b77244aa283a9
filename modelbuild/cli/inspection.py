"""Commands that look and change nothing: `status`, `explain`, `graph`, `doctor`."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict

from modelbuild.cli.common import EXIT_OK, EXIT_STALE, project_of, relative
from modelbuild.engine.events import Status
from modelbuild.engine.scheduler import Options


def cmd_status(args, console) -> int:
    from modelbuild.reports.remeasure import timing_doubts

    project = project_of(args)
    run = project.run(args.selectors, Options(dry_run=True), doubt=timing_doubts(project))
    stale = [r for r in run.results.values() if r.status is Status.STALE]
    if args.json:
        print(
            json.dumps(
                {"stale": [{"node": r.node, "reasons": [x.as_dict() for x in r.reasons]} for r in stale]}, indent=2
            )
        )
    else:
        for r in stale:
            console.print(f"stale  {r.node}: {'; '.join(map(str, r.reasons))}", markup=False)
        if not stale:
            console.print(f"up to date: {len(run.results)} stages cached", markup=False)
    return EXIT_STALE if stale else EXIT_OK


def cmd_explain(args, console) -> int:
    from modelbuild.pipeline.explain import explain, write_ir

    project = project_of(args)
    for line in explain(project, args.build):
        console.print(line, markup=False)
    if args.ir:
        for path in write_ir(project, args.build):
            console.print(f"wrote {relative(path)}", markup=False)
    return EXIT_OK


def cmd_graph(args, console) -> int:
    from modelbuild.engine.render import FORMATS

    print(FORMATS[args.format](project_of(args).plan))
    return EXIT_OK


def cmd_doctor(args, console) -> int:
    from modelbuild.pipeline import doctor

    project = project_of(args)
    caps = doctor.probe_capabilities()
    tools = doctor.toolchains()
    checks = [
        doctor.assess(name, table, caps, shutil.which, doctor.tracker_answers)
        for name, table in project.recipe.spec.targets.items()
    ]
    if args.json:
        print(
            json.dumps(
                {"tvm": caps, "toolchains": tools, "targets": [asdict(c) | {"ready": c.ready} for c in checks]},
                indent=2,
            )
        )
    else:
        if caps.get("tvm") is None:
            console.print(f"tvm: cannot be imported here: {caps.get('error')} (fix: pip install -e .)", markup=False)
        else:
            console.print(
                f"tvm {caps['tvm']}: llvm {caps['llvm_version'] or 'missing'}, cuda code generation "
                f"{'yes' if caps['cuda_codegen'] else 'no'}, a cuda GPU here: "
                f"{_gpus_here(caps)}",
                markup=False,
            )
        console.print(
            "toolchains: " + ", ".join(f"{name} {path or 'not found'}" for name, path in tools.items()), markup=False
        )
        for c in checks:
            validates = c.validates or f"no: {c.validate_note}"
            if c.validates and c.validate_note:
                validates += f", {c.validate_note}"
            console.print(
                f"{c.target}: build {'yes' if c.builds_here else 'NO'} ({c.build_note}); validate {validates}",
                markup=False,
            )
    return EXIT_OK if all(c.ready for c in checks) else EXIT_STALE


def _gpus_here(caps: dict) -> str:
    found = caps.get("gpus") or []
    if not found:
        return f"no ({caps.get('no_gpu') or 'none found'})"
    return ", ".join(f"{g['gpu']} (compute {g['compute_capability']}, CUDA driver {g['cuda_driver']})" for g in found)
