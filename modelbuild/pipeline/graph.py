"""The stage graph a recipe asks for: for each build, import, [quantize], [tune], compile, reference and
validate nodes, each with the recipe slice it reads, its declared files and the upstream outputs it takes.

Params are plain data here: they enter the node's key, and a no-op build reads the recipe from a snapshot
without pydantic. Each stage parses them into its model in recipe/params.py (tests/test_params.py checks the
two agree)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from modelbuild.compiler.tuning_db import folder_for
from modelbuild.engine.plan import Node, Plan
from modelbuild.pipeline import registry
from modelbuild.pipeline.names import build_name, target_of, variant_of
from modelbuild.pipeline.sample_files import sample_files
from modelbuild.recipe import LoadedRecipe
from modelbuild.recipe.targets import LINKER, device_of, runs_on_host, tvm_target, validating_machine, why_not_run_here
from modelbuild.stages.files import (
    ANALYSIS,
    FROZEN_ONNX,
    GOLDEN,
    IR,
    LIBRARY_MANIFEST,
    METRICS,
    QDQ_ONNX,
    SIGNATURE,
    TUNED_RECORDS,
    Role,
)

TargetResolver = Callable[[dict], dict]


def build_plan(recipe: LoadedRecipe, resolve: TargetResolver, *, tuning_root: Path | None = None) -> Plan:
    """The plan for a recipe; `resolve` turns a target table into the one that enters keys (mcpu = host);
    tuning databases live under `tuning_root`."""
    spec = recipe.spec
    nodes: dict[str, Node] = {}
    builds: dict[str, list[str]] = {}
    beside_float = []  # (build entry, its validate node, its timed-together baseline library)
    resolved = {
        name: resolve(table) for name, table in spec.targets.items() if any(name in b.targets for b in spec.builds)
    }
    for build in spec.builds:
        importer = import_node(recipe, build.model)
        nodes.setdefault(importer.id, importer)
        for target in build.targets:
            name = build_name(build.model, target, build.quantization)
            builds[name] = [importer.id]
            ir = (importer.id, IR)
            quantizer = None
            if build.quantization:
                quantizer = quantize_node(recipe, name, importer, build)
                nodes[quantizer.id], ir = quantizer, (quantizer.id, IR)
                builds[name].append(quantizer.id)
            tuner = None
            if build.tuning:
                tuner = tune_node(recipe, name, ir, resolved[target], build, tuning_root)
                nodes[tuner.id] = tuner
                builds[name].append(tuner.id)
            signature = (importer.id, SIGNATURE)
            compiler = compile_node(name, ir, signature, target, resolved[target], build, tuner)
            nodes[compiler.id] = compiler
            builds[name].append(compiler.id)
            validation = recipe.validation_for(build)
            if validation.enabled:
                reference = shared_reference(recipe, importer, validation, nodes)
                references = [reference]
                if quantizer:
                    references.append(
                        reference_node(recipe, f"reference-qdq:{name}", importer, validation, qdq=quantizer)
                    )
                    nodes[references[1].id] = references[1]
                together = baseline_library(recipe, build, name, target, resolved[target])
                validator = validate_node(
                    name,
                    target,
                    resolved[target],
                    validation,
                    importer,
                    compiler,
                    reference.id,
                    qdq=references[1].id if quantizer else None,
                    baseline_library=together,
                )
                nodes[validator.id] = validator
                builds[name] += [*(r.id for r in references), validator.id]
                if quantizer and validation.timing.beside_float:
                    beside_float.append((build, validator.id, together))
    for entry, validator_id, together in beside_float:  # the float build may come later in the recipe
        nodes[validator_id] = timed_beside_float(recipe, entry, nodes, nodes[validator_id], together)
    return Plan(nodes=nodes, builds=builds, stages=dict(registry.STAGES), digesters=dict(registry.DIGESTERS))


def timed_beside_float(recipe: LoadedRecipe, build, nodes: dict[str, Node], validator: Node, together) -> Node:
    """A quantized build's validate node with the float build's library as an input, timed in turns with its
    own (timing.beside_float)."""
    assert validator.build is not None, "a validate node belongs to a build"
    target = target_of(validator.build)
    float_compile = nodes.get(f"compile:{build_name(build.model, target, None)}")
    if together is not None:
        raise recipe.validation_error(
            build,
            ("timing", "beside_float"),
            "a build times one other library in turns with its own, and its baseline's is timed_together too",
            "set beside_float or the baseline's timed_together to false",
        )
    if float_compile is None:
        raise recipe.validation_error(
            build,
            ("timing", "beside_float"),
            f"there is no float build of {build.model!r} for target {target!r} to time beside it",
            f'add a [[builds]] entry with model = "{build.model}", targets = '
            f'["{target}"] and no quantization, or set beside_float = false',
        )
    library = float_compile.params["library"]
    return replace(validator, deps={**validator.deps, Role.FLOAT_LIBRARY: (float_compile.id, library)})


def shared_reference(recipe: LoadedRecipe, importer: Node, validation, nodes: dict[str, Node]) -> Node:
    """The reference node of a model and golden spec, made once and shared by every build that asks for the
    same: builds of one model differ in target or quantization, never in onnxruntime's fp32 outputs."""
    model = importer.id.split(":", 1)[1]
    for index in range(len(nodes) + 1):
        node_id = f"reference:{model}" + (f"~{index + 1}" if index else "")
        candidate = reference_node(recipe, node_id, importer, validation)
        existing = nodes.get(node_id)
        if existing is None:
            nodes[node_id] = candidate
            return candidate
        if existing == candidate:
            return existing
    raise AssertionError("unreachable: one of len(nodes) + 1 ids is free")


def import_node(recipe: LoadedRecipe, model: str) -> Node:
    spec = recipe.spec.models[model]
    params = {"inputs": {name: _declared(i) for name, i in spec.inputs.items()}, "simplify": spec.simplify}
    return Node(
        id=f"import:{model}", stage="import", build=None, params=params, files={Role.MODEL: recipe.model_path(model)}
    )


def _declared(spec) -> dict:
    """An input's declaration as it enters the import key: range and value only where set, so a recipe that
    uses neither keeps the keys it had."""
    out = {"shape": list(spec.shape), "dtype": spec.dtype} if spec.shape is not None else {"dtype": spec.dtype}
    return out | {k: getattr(spec, k) for k in ("range", "value", "feedback") if getattr(spec, k) is not None}


def library_name(target: dict) -> str:
    """model.so where it can be linked; a tar of objects for a cross target with no cross compiler."""
    if runs_on_host(target) or target.get("cross-compiler") or target.get("kind") != "llvm":
        return "model.so"
    return "model.tar"


def compile_options(spec) -> dict:
    return {"fuse": spec.fuse, "opt_level": spec.opt_level, "layout": spec.layout, "schedule": spec.schedule}


def quantize_node(recipe: LoadedRecipe, build: str, importer: Node, spec) -> Node:
    """Calibrate and quantize the imported (frozen, simplified) ONNX model; its IR replaces import's."""
    quantization = recipe.spec.quantization[spec.quantization]
    calibration = quantization.calibration
    files = sample_files("calibration", calibration, recipe.root, calibration.samples)
    params = {"quantization": quantization.model_dump(exclude={"calibration": {"path"}})}
    return Node(
        id=f"quantize:{build}",
        stage="quantize",
        build=build,
        params=params,
        files=files,
        deps={Role.ONNX: (importer.id, FROZEN_ONNX), Role.SIGNATURE: (importer.id, SIGNATURE)},
    )


def tune_node(
    recipe: LoadedRecipe, build: str, ir: tuple[str, str], target: dict, spec, tuning_root: Path | None
) -> Node:
    """Tune the build's kernels into the target's shared database; output the best record of each."""
    tuning = recipe.spec.tuning[spec.tuning]
    files = {Role.RECORDS: recipe.root / tuning.records} if tuning.records else {}
    # tasks come from the fused IR before any scheduling, so the schedule option does not enter this key
    options = {k: v for k, v in compile_options(spec).items() if k != "schedule"}
    params = {"target": tvm_target(target), "options": options, "tuning": tuning.model_dump(exclude={"records"})}
    device = device_of(target)
    if device:  # only then: the tune keys of recipes without devices stay as they were
        params |= {"device": device, "cross_compiler": target.get("cross-compiler")}
    root = tuning_root or recipe.root / ".cache" / "tuning"
    return Node(
        id=f"tune:{build}",
        stage="tune",
        build=build,
        params=params,
        files=files,
        deps={Role.IR: ir},
        memos={Role.DATABASE: folder_for(root, tvm_target(target))},
        exclusive=not device,
    )


def compile_node(
    build: str,
    ir: tuple[str, str],
    signature: tuple[str, str],
    target_name: str,
    target: dict,
    spec,
    tuner: Node | None = None,
) -> Node:
    """Compile the build's IR for the target; publish the library with its manifest (the signature, the
    target and the runtime it needs) and its analysis."""
    library = library_name(target)
    params = {
        "target": tvm_target(target),
        "library": library,
        "cross_compiler": target.get("cross-compiler"),
        "linker": target.get(LINKER),
        "options": compile_options(spec),
    }
    variant = variant_of(build)
    deps = {Role.IR: ir, Role.SIGNATURE: signature}
    if tuner:
        deps[Role.TUNING] = (tuner.id, TUNED_RECORDS)
    folder = f"{variant}/{target_name}"
    return Node(
        id=f"compile:{build}",
        stage="compile",
        build=build,
        params=params,
        deps=deps,
        publish={name: f"{folder}/{name}" for name in (library, LIBRARY_MANIFEST, ANALYSIS)},
    )


def reference_node(recipe: LoadedRecipe, node_id: str, importer: Node, validation, *, qdq: Node | None = None) -> Node:
    """Golden inputs and onnxruntime's outputs for the inputs import froze; its key has nothing of the target.

    With `qdq`, the model run is onnxruntime's own quantized model: the second reference of an int8 build."""
    golden = validation.golden
    model = importer.id.split(":", 1)[1]
    files = {} if qdq else {Role.MODEL: recipe.model_path(model)}
    files |= sample_files("golden", golden, recipe.root, golden.count)
    params = {"golden": golden.model_dump(exclude={"path"})}
    deps = {Role.SIGNATURE: (importer.id, SIGNATURE)}
    if qdq:
        deps[Role.MODEL] = (qdq.id, QDQ_ONNX)
    return Node(id=node_id, stage="reference", build=qdq.build if qdq else None, params=params, files=files, deps=deps)


def validate_node(
    build: str,
    target_name: str,
    target: dict,
    validation,
    importer: Node,
    compiler: Node,
    reference: str,
    *,
    qdq: str | None = None,
    baseline_library: Path | None = None,
) -> Node:
    device = device_of(target)
    not_here = why_not_run_here(target)
    runs_here = not_here is None or device is not None
    timing = validation.timing
    params = {
        "timing": timing.model_dump(exclude={"threads", "beside_float"}),  # the float library enters as an input
        "threads": timing.threads or target.get("num-cores") or 1,
        "runs_here": runs_here,
        "reason": "" if runs_here else not_here,
        # timings belong to the machine that measured them: a shared cache must not mix machines
        "machine": (
            {"device": device["key"], "tracker": device["tracker"], "via": "rpc"}
            if device
            else validating_machine(target)
        ),
    }
    if device:  # only then: the validate keys of recipes without devices stay as they were
        params["device"] = device
    elif target.get("kind") == "cuda":
        params["gpu"] = True
    variant = variant_of(build)
    library = compiler.params["library"]
    deps = {
        Role.LIBRARY: (compiler.id, library),
        Role.GOLDEN: (reference, GOLDEN),
        Role.SIGNATURE: (importer.id, SIGNATURE),
        Role.ANALYSIS: (compiler.id, ANALYSIS),
    }
    if qdq:
        deps[Role.GOLDEN_QDQ] = (qdq, GOLDEN)
    files = {Role.BASELINE_LIBRARY: baseline_library} if baseline_library else {}
    return Node(
        id=f"validate:{build}",
        stage="validate",
        build=build,
        params=params,
        deps=deps,
        files=files,
        publish={METRICS: f"{variant}/{target_name}/validation.json"},
        exclusive=runs_here and not device,
    )


def baseline_library(recipe: LoadedRecipe, build, name: str, target_name: str, target: dict) -> Path | None:
    """The baseline's own library of this build, to be timed in turns with it (baseline.timed_together): in
    the baseline's build folder, beside its report.json, where this build publishes its own; a build validated
    on a device has both uploaded there."""
    validation = recipe.validation_for(build)
    report = recipe.baseline_report(validation)
    together = validation.baseline is not None and validation.baseline.timed_together
    if report is None or not together or (why_not_run_here(target) and not device_of(target)):
        return None
    library = report.parent / variant_of(name) / target_name / library_name(target)
    if not library.is_file():
        raise recipe.validation_error(
            build,
            ("baseline", "timed_together"),
            f"the baseline's library {recipe.shown(library)} is not there",
            "copy the baseline's whole build folder (its libraries beside report.json), or set timed_together = false",
        )
    return library
