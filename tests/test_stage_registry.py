"""A stage's code, found by reading import lines, is what Python's own parser finds: every modelbuild module a
stage's code imports enters its cache key, and a stage declares the files it writes."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from modelbuild.pipeline.registry import STAGES
from modelbuild.sources import NOT_OUTPUT_SHAPING, imported_closure
from modelbuild.stages.contracts import Contract


def parsed_imports(module: str) -> set[str]:
    """The modelbuild modules `module` imports, by Python's parser: the ground truth for the regex walk."""
    source = Path(importlib.util.find_spec(module).origin).read_text()
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("modelbuild")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("modelbuild"):
            found.add(node.module)
            for alias in node.names:  # `from modelbuild.compiler import lowering` names a module
                candidate = f"{node.module}.{alias.name}"
                if importlib.util.find_spec(node.module).submodule_search_locations and importlib.util.find_spec(
                    candidate
                ):
                    found.add(candidate)
    packages = {m for m in found if importlib.util.find_spec(m).submodule_search_locations}
    return found - packages - NOT_OUTPUT_SHAPING


def parsed_closure(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo += parsed_imports(current)
    return seen


@pytest.mark.parametrize("name", sorted(STAGES))
def test_a_stages_code_is_every_module_its_entry_reaches(name):
    stage = STAGES[name]
    assert set(stage.modules) == set().union(
        *(parsed_closure(m) for m in (stage.entry.split(":")[0], *stage.also_runs))
    )


def test_validate_covers_the_measuring_script_it_runs_in_a_subprocess():
    modules = STAGES["validate"].modules
    assert "modelbuild.measurement.measure" in modules and "modelbuild.validation.metrics" in modules


def test_the_compile_stage_reaches_its_schedules_and_kernels():
    modules = STAGES["compile"].modules
    assert {
        "modelbuild.compiler.default_schedule",
        "modelbuild.compiler.kernels.vnni_conv",
        "modelbuild.compiler.kernels.vnni_depthwise",
        "modelbuild.compiler.passes.conv_transpose",
    } <= set(modules)
    assert not any(m.startswith(("modelbuild.engine", "modelbuild.pipeline")) for m in modules)


def test_declared_outputs_take_their_variable_names_from_params():
    stage = Contract("compile", "m:f", (), "", outputs=("{library}", "analysis.json"))
    assert stage.output_names({"library": "model.tar"}) == ("model.tar", "analysis.json")
    assert imported_closure("modelbuild.stages.reference")[0] == "modelbuild.stages.reference"


def test_finding_a_stages_code_imports_none_of_it():
    """Walking the imports of every stage must not run them: a no-op build computes these digests. The
    names of the files the stages write (stages/contracts.py, plain strings) are all the plan imports of them."""
    import subprocess
    import sys

    code = (
        "import sys; from modelbuild.pipeline.registry import STAGES; from modelbuild.sources import "
        "source_digest; [source_digest(s.modules) for s in STAGES.values()]; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'tvm', 'onnx', 'onnxruntime'}), "
        "sorted(m for m in sys.modules if m.startswith(('modelbuild.stages.', 'modelbuild.quantization.'))"
        " and m != 'modelbuild.stages.contracts'))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[] []"
