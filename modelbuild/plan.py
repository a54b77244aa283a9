"""The plan: the graph of stages a recipe asks for, each node with exactly the inputs it may read."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from modelbuild.errors import SelectionError
from modelbuild.recipe import LoadedRecipe
from modelbuild.sample_files import sample_files
from modelbuild.targets import host_machine, runs_on_host, tvm_target
from modelbuild.tuning_db import folder_for

TargetResolver = Callable[[dict], dict]
SIGNATURE = "signature.json"  # the import stage's inputs and outputs in graph order (modelbuild.signature)


@dataclass(frozen=True)
class Node:
    """One stage applied to one model or build.

    `params` is the recipe slice the stage reads, `files` the declared input files, `deps` maps an input
    role to the upstream node whose outputs fill it, and `publish` maps output files to paths under the
    build folder where users find them.
    """

    id: str
    stage: str
    build: str | None
    params: dict
    files: dict[str, Path] = field(default_factory=dict)
    deps: dict[str, tuple[str, str]] = field(default_factory=dict)  # role -> (node id, output file)
    publish: dict[str, str] = field(default_factory=dict)
    # Stores a stage may read and extend that are memos, not inputs: its output is the same with them cold
    # or warm (up to measurement noise), so they stay out of the key. The tuning database is one.
    memos: dict[str, Path] = field(default_factory=dict)


@dataclass
class Plan:
    """Nodes in a topological order, and the node ids that make up each build."""

    nodes: dict[str, Node]
    builds: dict[str, list[str]]

    def upstream(self, node_id: str) -> set[str]:
        """Every node that `node_id` transitively depends on."""
        seen: set[str] = set()
        todo = [dep for dep, _ in self.nodes[node_id].deps.values()]
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo.extend(dep for dep, _ in self.nodes[current].deps.values())
        return seen

    def select(self, selectors: list[str]) -> "Plan":
        """The sub-plan for builds matching any selector ('cls@host', 'cls', '*@rpi4'), dependencies included."""
        if not selectors:
            return self
        chosen = [b for b in self.builds if any(_matches(b, s) for s in selectors)]
        unmatched = [s for s in selectors if not any(_matches(b, s) for b in self.builds)]
        if unmatched:
            raise SelectionError(f"no build matches {unmatched[0]!r}; builds: {', '.join(self.builds)}")
        keep: set[str] = set()
        for build in chosen:
            for node_id in self.builds[build]:
                keep |= {node_id, *self.upstream(node_id)}
        return Plan(nodes={k: v for k, v in self.nodes.items() if k in keep},
                    builds={b: self.builds[b] for b in chosen})

    def downstream(self, node_id: str) -> set[str]:
        return {other for other in self.nodes if node_id in self.upstream(other)}


def _matches(build: str, selector: str) -> bool:
    return fnmatch.fnmatchcase(build, selector) or selector in (model_of(build), variant_of(build))


def build_name(model: str, target: str, quantization: str | None = None) -> str:
    """'model@target' for a float build, 'model+quantization@target' for a quantized one, so one recipe can
    build both and compare them ('+' is not allowed in recipe names)."""
    return f"{model}+{quantization}@{target}" if quantization else f"{model}@{target}"


def variant_of(build: str) -> str:
    """The folder a build publishes under: 'model' or 'model+quantization'."""
    return build.split("@", 1)[0]


def model_of(build: str) -> str:
    return variant_of(build).split("+", 1)[0]


def target_of(build: str) -> str:
    return build.split("@", 1)[1]


def quantization_of(build: str) -> str | None:
    variant = variant_of(build)
    return variant.split("+", 1)[1] if "+" in variant else None


def float_build_of(build: str) -> str | None:
    """The float build a quantized build is compared with (it may not be in the plan)."""
    return build_name(model_of(build), target_of(build)) if "+" in variant_of(build) else None


def build_plan(recipe: LoadedRecipe, resolve: TargetResolver, *, tuning_root: Path | None = None) -> Plan:
    """The plan for a recipe; `resolve` turns a target table into the one that enters keys (mcpu = host);
    tuning databases live under `tuning_root`."""
    spec = recipe.spec
    nodes: dict[str, Node] = {}
    builds: dict[str, list[str]] = {}
    resolved = {name: resolve(table) for name, table in spec.targets.items()
                if any(name in b.targets for b in spec.builds)}
    for build in spec.builds:
        importer = import_node(recipe, build.model)
        nodes.setdefault(importer.id, importer)
        for target in build.targets:
            name = build_name(build.model, target, build.quantization)
            builds[name] = [importer.id]
            ir = (importer.id, "ir.json")
            quantizer = None
            if build.quantization:
                quantizer = quantize_node(recipe, name, importer, build)
                nodes[quantizer.id], ir = quantizer, (quantizer.id, "ir.json")
                builds[name].append(quantizer.id)
            tuner = None
            if build.tuning:
                tuner = tune_node(recipe, name, ir, resolved[target], build, tuning_root)
                nodes[tuner.id] = tuner
                builds[name].append(tuner.id)
            compiler = compile_node(name, ir, target, resolved[target], build, tuner)
            nodes[compiler.id] = compiler
            builds[name].append(compiler.id)
            validation = recipe.validation_for(build)
            if validation.enabled:
                reference = shared_reference(recipe, importer, validation, nodes)
                references = [reference]
                if quantizer:
                    references.append(reference_node(recipe, f"reference-qdq:{name}", importer, validation,
                                                     qdq=quantizer))
                    nodes[references[1].id] = references[1]
                validator = validate_node(name, target, resolved[target], validation, importer, compiler,
                                          reference.id, qdq=references[1].id if quantizer else None)
                nodes[validator.id] = validator
                builds[name] += [*(r.id for r in references), validator.id]
    return Plan(nodes=nodes, builds=builds)


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
    params = {
        "inputs": {name: {"shape": list(i.shape), "dtype": i.dtype} for name, i in spec.inputs.items()},
        "simplify": spec.simplify,
    }
    return Node(id=f"import:{model}", stage="import", build=None, params=params,
                files={"model": recipe.model_path(model)})


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
    return Node(id=f"quantize:{build}", stage="quantize", build=build, params=params, files=files,
                deps={"onnx": (importer.id, "model.onnx"), "signature": (importer.id, SIGNATURE)})


def tune_node(recipe: LoadedRecipe, build: str, ir: tuple[str, str], target: dict, spec, tuning_root: Path | None) -> Node:
    """Tune the build's kernels into the target's shared database; output the best record of each."""
    tuning = recipe.spec.tuning[spec.tuning]
    files = {"records": recipe.root / tuning.records} if tuning.records else {}
    # tasks come from the fused IR before any scheduling, so the schedule option does not enter this key
    options = {k: v for k, v in compile_options(spec).items() if k != "schedule"}
    params = {"target": tvm_target(target), "options": options, "tuning": tuning.model_dump(exclude={"records"})}
    root = tuning_root or recipe.root / ".cache" / "tuning"
    return Node(id=f"tune:{build}", stage="tune", build=build, params=params, files=files, deps={"ir": ir},
                memos={"database": folder_for(root, tvm_target(target))})


def compile_node(build: str, ir: tuple[str, str], target_name: str, target: dict, spec, tuner: Node | None = None) -> Node:
    library = library_name(target)
    params = {"target": tvm_target(target), "library": library, "cross_compiler": target.get("cross-compiler"),
              "options": compile_options(spec)}
    variant = variant_of(build)
    deps = {"ir": ir}
    if tuner:
        deps["tuning"] = (tuner.id, "records.json")
    return Node(id=f"compile:{build}", stage="compile", build=build, params=params, deps=deps,
                publish={library: f"{variant}/{target_name}/{library}",
                         "analysis.json": f"{variant}/{target_name}/analysis.json"})


def reference_node(recipe: LoadedRecipe, node_id: str, importer: Node, validation, *, qdq: Node | None = None) -> Node:
    """Golden inputs and onnxruntime's outputs for the inputs import froze; its key has nothing of the target.

    With `qdq`, the model run is onnxruntime's own quantized model: the second reference of an int8 build."""
    golden = validation.golden
    model = importer.id.split(":", 1)[1]
    files = {} if qdq else {"model": recipe.model_path(model)}
    files |= sample_files("golden", golden, recipe.root, golden.count)
    params = {"golden": golden.model_dump(exclude={"path"})}
    deps = {"signature": (importer.id, SIGNATURE)}
    if qdq:
        deps["model"] = (qdq.id, "qdq.onnx")
    return Node(id=node_id, stage="reference", build=qdq.build if qdq else None, params=params, files=files,
                deps=deps)


def validate_node(build: str, target_name: str, target: dict, validation, importer: Node, compiler: Node,
                  reference: str, *, qdq: str | None = None) -> Node:
    runs_here = runs_on_host(target)
    timing = validation.timing
    params = {
        "timing": timing.model_dump(exclude={"threads"}),
        "threads": timing.threads or target.get("num-cores") or 1,
        "runs_here": runs_here,
        "reason": "" if runs_here else _why_not_here(target),
        # timings belong to the machine that measured them: a shared cache must not mix machines
        "machine": host_machine(),
    }
    variant = variant_of(build)
    library = compiler.params["library"]
    deps = {"library": (compiler.id, library), "golden": (reference, "golden.npz"),
            "signature": (importer.id, SIGNATURE), "analysis": (compiler.id, "analysis.json")}
    if qdq:
        deps["golden_qdq"] = (qdq, "golden.npz")
    return Node(id=f"validate:{build}", stage="validate", build=build, params=params, deps=deps,
                publish={"metrics.json": f"{variant}/{target_name}/validation.json"})


def _why_not_here(target: dict) -> str:
    if target.get("kind") != "llvm":
        return f"a {target.get('kind')} library needs that device; this machine runs llvm (CPU) libraries only"
    return f"built for {target.get('mtriple')}; this machine is not that architecture"
