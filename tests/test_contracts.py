"""Each stage's contract (stages/contracts.py): the plan is checked against it, and each stage reads what it
declares and nothing else."""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from modelbuild.engine.keys import action_key, key_inputs
from modelbuild.engine.plan import Node
from modelbuild.pipeline.graph import contract_breaches
from modelbuild.pipeline.names import BuildId
from modelbuild.recipe import params as models
from modelbuild.stages import contracts
from modelbuild.stages.contracts import COMPILE, CONTRACTS, REFERENCE, Role


def roles_read(stage) -> set[str]:
    """The Role names a stage's module reads (`Role.IR`), from its source."""
    spec = importlib.util.find_spec(stage.entry.partition(":")[0])
    assert spec and spec.origin
    tree = ast.parse(Path(spec.origin).read_text())
    return {
        getattr(Role, node.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "Role"
    }


@pytest.mark.parametrize("stage", CONTRACTS, ids=lambda s: s.name)
def test_a_stage_reads_only_the_roles_it_declares(stage):
    read = roles_read(stage)
    assert read, f"{stage.name} reads no input by its role"
    assert read <= {*stage.inputs, *stage.optional}


@pytest.mark.parametrize("stage", CONTRACTS, ids=lambda s: s.name)
def test_a_stages_params_name_a_model_of_recipe_params(stage):
    assert issubclass(getattr(models, stage.params), models.Strict)


def test_breaches_are_roles_missing_and_roles_not_declared():
    assert COMPILE.breaches([Role.IR, Role.SIGNATURE, Role.TUNING]) == []
    assert COMPILE.breaches([Role.IR, Role.GOLDEN]) == ["signature missing", "golden not declared"]
    # a family of sample files: any name after the prefix, and not the prefix's neighbours
    assert REFERENCE.breaches([Role.MODEL, Role.SIGNATURE, "golden:x", "golden-image:00001"]) == []
    assert REFERENCE.breaches([Role.MODEL, Role.SIGNATURE, "calibration:x"]) == ["calibration:x not declared"]


def test_the_plan_names_each_node_that_breaks_its_contract():
    nodes = {
        "compile:m@t": Node("compile:m@t", "compile", "m@t", {}, deps={Role.IR: ("import:m", "ir.json")}),
        "import:m": Node("import:m", "import", None, {}, files={Role.MODEL: Path("m.onnx")}),
    }
    assert contract_breaches(nodes) == ["compile:m@t: signature missing"]


def test_a_stages_params_are_parsed_into_its_model_and_a_mismatch_is_a_stage_failure():
    parsed = contracts.read_params(REFERENCE, {"golden": {"count": 2}})
    assert isinstance(parsed, models.ReferenceParams) and parsed.golden.count == 2
    with pytest.raises(Exception, match="ReferenceParams: goldne: Extra inputs"):
        contracts.read_params(REFERENCE, {"golden": {}, "goldne": 1})


def test_the_key_version_enters_the_key():
    node = Node("compile:m@t", "compile", "m@t", {"library": "model.so"})
    keys = {
        action_key(key_inputs(node, replace(COMPILE, key_version=version), files={}, upstream={}))
        for version in (1, 1, 2)
    }
    assert len(keys) == 2


def test_a_build_id_is_its_name_and_back():
    quantized = BuildId("cls", "host", "int8")
    assert str(quantized) == "cls+int8@host" and BuildId.parse("cls+int8@host") == quantized
    assert quantized.variant == "cls+int8" and str(quantized.float_build) == "cls@host"
    assert BuildId.parse("cls@host") == BuildId("cls", "host") and BuildId("cls", "host").variant == "cls"
