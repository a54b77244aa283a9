"""The stage graph a recipe asks for: for each build, import, [quantize], [tune], compile, reference and
validate nodes, each with the recipe slice it reads, its declared files and the upstream outputs it takes,
wired by the roles of the stages' contracts (stages/contracts.py) and checked against them.

Params are plain data here: they enter the node's key, and a no-op build reads the recipe from a snapshot
without pydantic. Each stage parses them into the model its contract names (tests/test_params.py checks the
two agree). Every field is always written, None where it does not apply, so a key's form is the stage's
own and changes only with its contract's key_version."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from modelbuild.engine.plan import Node, Plan
from modelbuild.errors import ModelbuildError
from modelbuild.pipeline import registry
from modelbuild.pipeline.names import BuildId
from modelbuild.pipeline.sample_files import sample_files
from modelbuild.recipe import LoadedRecipe
from modelbuild.recipe.targets import (
    CUDA_COMPILER,
    LINKER,
    device_of,
    runs_on_host,
    tvm_target,
    validating_machine,
    why_not_run_here,
)
from modelbuild.stages.contracts import (
    ANALYSIS,
    COMPILE,
    FROZEN_ONNX,
    GOLDEN,
    IMPORT,
    IR,
    LIBRARY_MANIFEST,
    METRICS,
    QDQ_ONNX,
    QUANTIZE,
    REFERENCE,
    SIGNATURE,
    TUNE,
    TUNED_RECORDS,
    VALIDATE,
    Role,
)
from modelbuild.tuning.database import folder_for

TargetResolver = Callable[[dict], dict]


def build_plan(recipe: LoadedRecipe, resolve: TargetResolver, *, tuning_root: Path | None = None) -> Plan:
    """The plan for a recipe; `resolve` turns a target table into the one that enters keys (mcpu = host);
    tuning databases live under `tuning_root`."""
    spec = recipe.spec
    nodes: dict[str, Node] = {}
    builds: dict[str, list[str]] = {}
    beside_float = []  # (build entry, its id, its validate node, its timed-together baseline library)
    resolved = {
        name: resolve(table) for name, table in spec.targets.items() if any(name in b.targets for b in spec.builds)
    }
    for build in spec.builds:
        importer = import_node(recipe, build.model)
        nodes.setdefault(importer.id, importer)
        for target in build.targets:
            build_id = BuildId(build.model, target, build.quantization)
            name = str(build_id)
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
            compiler = compile_node(build_id, ir, signature, resolved[target], build, tuner)
            nodes[compiler.id] = compiler
            builds[name].append(compiler.id)
            validation = recipe.validation_for(build)
            if validation.enabled:
                reference = shared_reference(recipe, build.model, importer, validation, nodes)
                references = [reference]
                if quantizer:
                    references.append(
                        reference_node(
                            recipe, f"reference-qdq:{name}", build.model, importer, validation, qdq=quantizer
                        )
                    )
                    nodes[references[1].id] = references[1]
                together = baseline_library(recipe, build, build_id, resolved[target])
                validator = validate_node(
                    build_id,
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
                    beside_float.append((build, build_id, validator.id, together))
    for entry, build_id, validator_id, together in beside_float:  # the float build may come later in the recipe
        nodes[validator_id] = timed_beside_float(recipe, entry, build_id, nodes, nodes[validator_id], together)
    breaches = contract_breaches(nodes)
    if breaches:
        raise ModelbuildError(f"the plan breaks its stages' contracts ({breaches[0]}); this is a modelbuild bug")
    return Plan(
        nodes=nodes,
        builds=builds,
        stages=dict(registry.STAGES),
        digesters=dict(registry.DIGESTERS),
        companions=dict(registry.COMPANIONS),
    )


def contract_breaches(nodes: dict[str, Node]) -> list[str]:
    """Every node whose inputs are not what its stage's contract declares, as 'node: what'."""
    return [
        f"{node.id}: {breach}"
        for node in nodes.values()
        for breach in registry.get_stage(node.stage).breaches([*node.files, *node.deps, *node.memos])
    ]


def timed_beside_float(
    recipe: LoadedRecipe, build, build_id: BuildId, nodes: dict[str, Node], validator: Node, together
) -> Node:
    """A quantized build's validate node with the float build's library as an input, timed in turns with its
    own (timing.beside_float)."""
    target = build_id.target
    float_compile = nodes.get(f"compile:{build_id.float_build}")
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


def shared_reference(recipe: LoadedRecipe, model: str, importer: Node, validation, nodes: dict[str, Node]) -> Node:
    """The reference node of a model and golden spec, made once and shared by every build that asks for the
    same: builds of one model differ in target or quantization, never in onnxruntime's fp32 outputs."""
    for index in range(len(nodes) + 1):
        node_id = f"reference:{model}" + (f"~{index + 1}" if index else "")
        candidate = reference_node(recipe, node_id, model, importer, validation)
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
        id=f"import:{model}", stage=IMPORT.name, build=None, params=params, files={Role.MODEL: recipe.model_path(model)}
    )


def _declared(spec) -> dict:
    """An input's declaration as it enters the import key."""
    return {
        "shape": None if spec.shape is None else list(spec.shape),
        "dtype": spec.dtype,
        **{k: getattr(spec, k) for k in ("range", "value", "feedback")},
    }


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
        stage=QUANTIZE.name,
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
    device = device_of(target)
    params = {
        "target": tvm_target(target),
        "options": options,
        "tuning": tuning.model_dump(exclude={"records"}),
        "device": device,
        # a device's candidates are linked here into what it loads; a local one's are not linked at all
        "cross_compiler": target.get("cross-compiler") if device else None,
    }
    root = tuning_root or recipe.root / ".cache" / "tuning"
    return Node(
        id=f"tune:{build}",
        stage=TUNE.name,
        build=build,
        params=params,
        files=files,
        deps={Role.IR: ir},
        memos={Role.DATABASE: folder_for(root, tvm_target(target))},
        exclusive=not device,
    )


def compile_node(
    build: BuildId,
    ir: tuple[str, str],
    signature: tuple[str, str],
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
    if CUDA_COMPILER in target:  # absent from a CPU target's params, whose keys stay as they were
        params["cuda_compiler"] = target[CUDA_COMPILER]
    if target.get("devices"):
        params["devices"] = target["devices"]
    deps = {Role.IR: ir, Role.SIGNATURE: signature}
    if tuner:
        deps[Role.TUNING] = (tuner.id, TUNED_RECORDS)
    folder = f"{build.variant}/{build.target}"
    return Node(
        id=f"compile:{build}",
        stage=COMPILE.name,
        build=str(build),
        params=params,
        deps=deps,
        publish={name: f"{folder}/{name}" for name in (library, LIBRARY_MANIFEST, ANALYSIS)},
    )


def reference_node(
    recipe: LoadedRecipe, node_id: str, model: str, importer: Node, validation, *, qdq: Node | None = None
) -> Node:
    """Golden inputs and onnxruntime's outputs for the inputs import froze; its key has nothing of the target.

    With `qdq`, the model run is onnxruntime's own quantized model: the second reference of an int8 build."""
    golden = validation.golden
    files = {} if qdq else {Role.MODEL: recipe.model_path(model)}
    files |= sample_files("golden", golden, recipe.root, golden.count)
    params = {"golden": golden.model_dump(exclude={"path"})}
    deps = {Role.SIGNATURE: (importer.id, SIGNATURE)}
    if qdq:
        deps[Role.MODEL] = (qdq.id, QDQ_ONNX)
    return Node(
        id=node_id, stage=REFERENCE.name, build=qdq.build if qdq else None, params=params, files=files, deps=deps
    )


def validate_node(
    build: BuildId,
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
    params |= {"device": device, "gpu": not device and target.get("kind") == "cuda"}
    if target.get("devices"):
        params["devices"] = target["devices"]
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
        stage=VALIDATE.name,
        build=str(build),
        params=params,
        deps=deps,
        files=files,
        publish={METRICS: f"{build.variant}/{build.target}/validation.json"},
        exclusive=runs_here and not device,
    )


def baseline_library(recipe: LoadedRecipe, build, build_id: BuildId, target: dict) -> Path | None:
    """The baseline's own library of this build, to be timed in turns with it (baseline.timed_together): in
    the baseline's build folder, beside its report.json, where this build publishes its own; a build validated
    on a device has both uploaded there."""
    validation = recipe.validation_for(build)
    report = recipe.baseline_report(validation)
    together = validation.baseline is not None and validation.baseline.timed_together
    if report is None or not together or (why_not_run_here(target) and not device_of(target)):
        return None
    library = report.parent / build_id.variant / build_id.target / library_name(target)
    if not library.is_file():
        raise recipe.validation_error(
            build,
            ("baseline", "timed_together"),
            f"the baseline's library {recipe.shown(library)} is not there",
            "copy the baseline's whole build folder (its libraries beside report.json), or set timed_together = false",
        )
    return library
