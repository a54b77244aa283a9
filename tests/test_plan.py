"""The plan: which nodes a recipe makes, what each declares, and selection."""

import textwrap

import pytest
from PIL import Image

from modelbuild.errors import SelectionError
from modelbuild.plan import build_plan, library_name
from modelbuild.recipe import load_recipe

RECIPE = """
[models.cls]
path = "m.onnx"
inputs.x = { shape = [1, 3, 8, 8] }

[targets.host]
kind = "llvm"
mcpu = "skylake"

[targets.pi]
kind = "llvm"
mtriple = "aarch64-linux-gnu"
mcpu = "cortex-a72"

[quantization.int8]
calibration = { source = "images", path = "calib", samples = 2 }

[validation]
golden = { source = "images", path = "calib", count = 3 }

[[builds]]
model = "cls"
targets = ["host", "pi"]
quantization = "int8"
"""


@pytest.fixture
def plan(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"x")
    (tmp_path / "calib").mkdir()
    for i in range(4):
        Image.new("RGB", (8, 8), (i, i, i)).save(tmp_path / "calib" / f"{i}.png")
    (tmp_path / "deploy.toml").write_text(textwrap.dedent(RECIPE))
    return build_plan(load_recipe(tmp_path / "deploy.toml"), lambda table: table)


def test_an_int8_build_compiles_the_quantized_ir_and_checks_two_references(plan):
    assert plan.builds["cls@host"] == ["import:cls", "quantize:cls@host", "compile:cls@host",
                                       "reference:cls@host", "reference-qdq:cls@host", "validate:cls@host"]
    assert plan.nodes["compile:cls@host"].deps["ir"] == ("quantize:cls@host", "ir.json")
    assert plan.nodes["quantize:cls@host"].deps["onnx"] == ("import:cls", "model.onnx")
    assert plan.nodes["reference-qdq:cls@host"].deps["model"] == ("quantize:cls@host", "qdq.onnx")
    assert plan.nodes["validate:cls@host"].deps["golden_qdq"] == ("reference-qdq:cls@host", "golden.npz")


def test_image_samples_are_declared_file_by_file_up_to_the_count(plan):
    calibration = [p.name for r, p in plan.nodes["quantize:cls@host"].files.items() if r.startswith("calibration")]
    golden = [p.name for r, p in plan.nodes["reference:cls@host"].files.items() if r.startswith("golden")]
    assert calibration == ["0.png", "1.png"] and golden == ["0.png", "1.png", "2.png"]


def test_a_cross_target_builds_objects_and_is_not_run_here(plan):
    assert plan.nodes["compile:cls@pi"].publish == {"model.tar": "cls/pi/model.tar",
                                                    "analysis.json": "cls/pi/analysis.json"}
    assert plan.nodes["validate:cls@pi"].params["runs_here"] is False
    assert library_name({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "cross-compiler": "gcc"}) == "model.so"


def test_selection_takes_dependencies_along(plan):
    sub = plan.select(["*@pi"])
    assert set(sub.builds) == {"cls@pi"} and "import:cls" in sub.nodes and "compile:cls@host" not in sub.nodes
    assert set(plan.select(["cls"]).builds) == {"cls@host", "cls@pi"}
    with pytest.raises(SelectionError, match="no build matches 'gpu'"):
        plan.select(["gpu"])
