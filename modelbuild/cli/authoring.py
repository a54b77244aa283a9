"""Commands that write a file for the user to keep: `init` (a recipe), `ci-workflow`, `schema`."""

from __future__ import annotations

import json
import os

from modelbuild.cli.common import EXIT_OK, relative
from modelbuild.errors import ModelbuildError


def cmd_init(args, console) -> int:
    from modelbuild.cli import scaffold
    from modelbuild.errors import StageError
    from modelbuild.frontend.facts import model_facts
    from modelbuild.recipe.schema import json_schema

    if args.target not in scaffold.TARGET_PRESETS:
        raise ModelbuildError(
            f"no target preset {args.target!r} (fix: use one of {', '.join(scaffold.TARGET_PRESETS)})"
        )
    if args.file.exists() and not args.force:
        raise ModelbuildError(f"{args.file} exists (fix: pass --force to overwrite it, or -f to write another file)")
    if not args.model.is_file():
        raise ModelbuildError(f"{args.model}: no such model file")
    try:
        facts = model_facts(args.model)
    except StageError as err:  # a message that names the file already is not prefixed with it again
        named = err.message.startswith(args.model.name)
        raise ModelbuildError(err.message if named else f"{args.model}: {err.message}") from None
    if args.int8 and (facts.quantized or facts.float16):
        raise ModelbuildError(
            f"--int8: {args.model} {'arrives quantized' if facts.quantized else 'is float16'}, "
            f"and modelbuild quantizes float32 models (fix: leave out --int8"
            f"{'' if facts.quantized else ', or export the model in float32'})"
        )
    try:
        signature = scaffold.with_sizes(facts.signature, dict(args.inputs))
    except ValueError as err:
        raise ModelbuildError(str(err)) from None
    model_path = os.path.relpath(args.model.resolve(), args.file.resolve().parent)
    preset = scaffold.Preset.of(signature, float16=facts.float16, quantized=facts.quantized)
    schema = args.file.resolve().parent / scaffold.SCHEMA_FILE
    schema.write_text(json.dumps(json_schema(), indent=2) + "\n")
    args.file.write_text(
        scaffold.write_recipe(
            model_path=model_path,
            signature=signature,
            preset=preset,
            target=args.target,
            name=args.name,
            int8=args.int8,
            schema=f"./{scaffold.SCHEMA_FILE}",
        )
    )
    dynamic = [name for name, spec in signature.inputs.items() if scaffold.dynamic_dims(spec["shape"])]
    console.print(
        f"wrote {relative(args.file)} and {scaffold.SCHEMA_FILE} ({preset.title} preset"
        f"{', and an int8 build' if args.int8 else ''}, target {args.target})",
        markup=False,
    )
    if dynamic:
        console.print(
            f"set the sizes to build for where it says TODO (dynamic in the model: "
            f"{', '.join(dynamic)}), then run `modelbuild`",
            markup=False,
        )
    else:
        console.print("the model's shapes are static: run `modelbuild` to build it", markup=False)
    return EXIT_OK


def cmd_ci_workflow(args, console) -> int:
    from importlib import resources

    if args.output.exists() and not args.force:
        raise ModelbuildError(f"{args.output} exists (fix: pass --force to overwrite it, or -o to write another file)")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(resources.files("modelbuild.reports").joinpath("github-actions.yml").read_text())
    console.print(
        f"wrote {relative(args.output)}: restores .cache, builds against the base branch's last build, "
        "publishes report.md and junit.xml, uploads build/; replace OWNER in its pip line",
        markup=False,
    )
    return EXIT_OK


def cmd_schema(args, console) -> int:
    from modelbuild.recipe.schema import json_schema

    print(json.dumps(json_schema(), indent=2))
    return EXIT_OK
