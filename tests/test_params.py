"""Stage params: what the plan writes is what each stage reads, typed; a mismatch fails the node clearly."""

import pytest

from modelbuild.errors import StageError
from modelbuild.pipeline.graph import build_plan
from modelbuild.recipe import load_recipe
from modelbuild.recipe.params import (
    CompileParams,
    ImportParams,
    QuantizeParams,
    ReferenceParams,
    TuneParams,
    ValidateParams,
    parse,
)
from modelbuild.stages import reference

PARAMS = {
    "import": ImportParams,
    "quantize": QuantizeParams,
    "tune": TuneParams,
    "compile": CompileParams,
    "reference": ReferenceParams,
    "validate": ValidateParams,
}

RECIPE = """
[models.cls]
path = "m.onnx"
inputs.x = { shape = [1, 3, 8, 8] }

[targets.host]
kind = "llvm"
mcpu = "skylake"
num-cores = 2

[targets.pi]
kind = "llvm"
mtriple = "aarch64-linux-gnu"
mcpu = "cortex-a72"

[quantization.int8]
calibration = { method = "percentile", samples = 4 }
exclude_ops = ["Softmax"]

[tuning.quick]
trials_per_task = 4

[validation]
golden = { count = 3, seed = 7 }
timing = { scaling = true }

[[builds]]
model = "cls"
targets = ["host"]
tuning = "quick"

[[builds]]
model = "cls"
targets = ["pi"]

[[builds]]
model = "cls"
targets = ["host"]
quantization = "int8"
layout = "NCHW"
"""


@pytest.fixture
def plan(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"")
    (tmp_path / "deploy.toml").write_text(RECIPE)
    return build_plan(load_recipe(tmp_path / "deploy.toml"), lambda table: table, tuning_root=tmp_path / "tuning")


def test_every_node_of_a_plan_has_params_its_stage_reads(plan):
    assert {node.stage for node in plan.nodes.values()} == set(PARAMS)
    for node in plan.nodes.values():
        parsed = parse(PARAMS[node.stage], node.params).model_dump()
        # nothing the plan wrote (and the key hashed) is dropped or renamed on the way in; the stage sees
        # only defaults beyond it (a path that travels as files, the schedule a tune node leaves out)
        assert contained(node.params, parsed), node.id


def contained(plain, parsed) -> bool:
    if isinstance(plain, dict):
        return isinstance(parsed, dict) and all(k in parsed and contained(v, parsed[k]) for k, v in plain.items())
    return plain == parsed


def test_the_recipe_reaches_the_stages_typed(plan):
    quantize = parse(QuantizeParams, plan.nodes["quantize:cls+int8@host"].params).quantization
    assert (quantize.calibration.method, quantize.calibration.samples, quantize.exclude_ops) == (
        "percentile",
        4,
        ["Softmax"],
    )
    tune = parse(TuneParams, plan.nodes["tune:cls@host"].params)
    assert tune.tuning.trials_per_task == 4 and tune.options.layout == "auto"
    compile_int8 = parse(CompileParams, plan.nodes["compile:cls+int8@host"].params)
    assert (compile_int8.options.layout, compile_int8.library) == ("NCHW", "model.so")
    validate = parse(ValidateParams, plan.nodes["validate:cls@host"].params)
    assert (validate.threads, validate.timing.scaling, validate.runs_here) == (2, True, True)
    assert parse(ValidateParams, plan.nodes["validate:cls@pi"].params).reason.startswith("built for aarch64")
    assert parse(ReferenceParams, plan.nodes["reference:cls"].params).golden.seed == 7


def test_a_param_the_stage_does_not_take_fails_the_node_in_one_line(tmp_path):
    with pytest.raises(StageError) as caught:
        reference.run(inputs={}, params={"golden": {"sourse": "generate"}}, out=tmp_path)
    assert caught.value.message == (
        "the plan gave this stage params it does not take (ReferenceParams: "
        "golden.sourse: Extra inputs are not permitted); this is a modelbuild bug, "
        "please report it"
    )
