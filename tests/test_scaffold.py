"""`modelbuild init`: the recipe it writes for a model, read back by the real loader."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from modelbuild.cli import main
from modelbuild.cli.scaffold import Preset, model_kind, write_recipe
from modelbuild.errors import RecipeError
from modelbuild.recipe import load_recipe
from modelbuild.signature import Signature
from tests.helpers.onnx_models import conv_relu, two_in_two_out
from tests.helpers.paths import REPO

BUNDLED = REPO / "models" / "text_direction_cls.onnx"


def init(capsys, tmp_path, model, *args) -> tuple[int, str, str]:
    code = main(["init", str(model), "-f", str(tmp_path / "deploy.toml"), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_bundled_model_gets_placeholders_for_its_dynamic_dims_that_the_loader_names(tmp_path, capsys):
    code, out, _ = init(capsys, tmp_path, BUNDLED)
    assert code == 0 and "dynamic in the model: x" in out
    text = (tmp_path / "deploy.toml").read_text()
    assert "# TODO: dimensions 0 ('?'), 2 ('?'), 3 ('?') of 'x' are dynamic" in text
    with pytest.raises(RecipeError) as info:
        load_recipe(tmp_path / "deploy.toml")
    assert info.value.field == "models.text_direction_cls.inputs.x.shape[0]"
    assert info.value.message == "0 is a placeholder for a dimension the model leaves dynamic"
    (tmp_path / "deploy.toml").write_text(text.replace("[0, 3, 0, 0]", "[1, 3, 48, 192]"))
    recipe = load_recipe(tmp_path / "deploy.toml")
    assert recipe.model_path("text_direction_cls") == BUNDLED.resolve()
    assert recipe.spec.validation.gates.min_top1_agreement == 1.0  # [1, 2] scores: the classifier preset


def test_input_sizes_on_the_command_line_fill_the_dynamic_dims_and_the_recipe_loads_unedited(tmp_path, capsys):
    code, out, _ = init(capsys, tmp_path, BUNDLED, "--input", "x=1,3,48,192")
    assert code == 0 and "run `modelbuild` to build it" in out and "TODO" not in out
    text = (tmp_path / "deploy.toml").read_text()
    assert 'inputs.x = { shape = [1, 3, 48, 192], dtype = "float32" }' in text and "TODO" not in text
    assert load_recipe(tmp_path / "deploy.toml").spec.models["text_direction_cls"].inputs["x"].shape == [1, 3, 48, 192]


@pytest.mark.parametrize(
    "given, message",
    [
        ("y=1,3,48,192", "--input y: the model has no input 'y' (its inputs: x)"),
        ("x=1,48,192", "--input x: 3 sizes for an input of rank 4 ['?', 3, '?', '?']"),
        ("x=1,4,48,192", "--input x: dimension 1 is 3 in the model, not 4"),
    ],
)
def test_input_sizes_that_do_not_fit_the_model_are_one_line_exit_2(tmp_path, capsys, given, message):
    code, _, err = init(capsys, tmp_path, BUNDLED, "--input", given)
    assert code == 2 and err.strip() == f"error: {message}"
    assert not (tmp_path / "deploy.toml").exists()


def test_input_sizes_that_are_not_name_equals_sizes_are_a_usage_error(tmp_path, capsys):
    code, _, err = init(capsys, tmp_path, BUNDLED, "--input", "x:1,3")
    assert code == 2 and "'x:1,3': write NAME=SIZES" in err


def test_a_dynamic_batch_dimension_alone_gets_one_placeholder(tmp_path, capsys):
    conv_relu(tmp_path / "net.onnx")
    text = tmp_path / "deploy.toml"
    init(capsys, tmp_path, tmp_path / "net.onnx", "--target", "rpi4")
    written = text.read_text()
    assert 'inputs.x = { shape = [1, 3, 0, 0], dtype = "float32" }' in written
    assert "[targets.rpi4]" in written and 'mcpu = "cortex-a72"' in written
    assert "min_sqnr_db = 60" in written and "top1" not in written  # a feature map: the detector preset
    text.write_text(written.replace("[1, 3, 0, 0]", "[1, 3, 16, 16]"))
    assert load_recipe(text).spec.targets["rpi4"]["mtriple"] == "aarch64-linux-gnu"


def test_a_static_model_with_two_inputs_loads_as_written(tmp_path, capsys):
    two_in_two_out(tmp_path / "two.onnx")
    code, out, _ = init(capsys, tmp_path, tmp_path / "two.onnx")
    assert code == 0 and "static: run `modelbuild`" in out
    spec = load_recipe(tmp_path / "deploy.toml").spec
    assert list(spec.models["two"].inputs) == ["zeta", "alpha"]


def test_init_writes_a_schema_line_editors_read_and_the_schema_beside_the_recipe(tmp_path, capsys):
    import tomllib

    import jsonschema

    from modelbuild.recipe.schema import json_schema

    two_in_two_out(tmp_path / "two.onnx")
    code, out, _ = init(capsys, tmp_path, tmp_path / "two.onnx", "--int8")
    recipe = (tmp_path / "deploy.toml").read_text()
    assert code == 0 and recipe.splitlines()[0] == "#:schema ./modelbuild.schema.json"
    assert "modelbuild.schema.json" in out
    schema = json.loads((tmp_path / "modelbuild.schema.json").read_text())
    assert schema == json_schema()
    jsonschema.validate(tomllib.loads(recipe), schema)  # the recipe init wrote is one the schema accepts
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**tomllib.loads(recipe), "modles": {}}, schema)  # and a misspelt table is not


def test_init_refuses_to_overwrite_and_names_unknown_presets(tmp_path, capsys):
    two_in_two_out(tmp_path / "two.onnx")
    (tmp_path / "deploy.toml").write_text("# mine")
    code, _, err = init(capsys, tmp_path, tmp_path / "two.onnx")
    assert code == 2 and "exists (fix: pass --force" in err and (tmp_path / "deploy.toml").read_text() == "# mine"
    code, _, err = init(capsys, tmp_path, tmp_path / "two.onnx", "--force", "--target", "gpu")
    assert code == 2 and err.strip() == "error: no target preset 'gpu' (fix: use one of host, x86-server, rpi4, cuda)"


def test_a_model_onnx_cannot_read_is_named_once_in_the_error(tmp_path, capsys):
    import onnx

    model = onnx.load(str(conv_relu(tmp_path / "net.onnx")))
    onnx.save(model, str(tmp_path / "net.onnx"), save_as_external_data=True, location="net.data", size_threshold=0)
    (tmp_path / "net.data").unlink()  # its weights' file left behind
    code, _, err = init(capsys, tmp_path, tmp_path / "net.onnx")
    assert code == 2 and err.startswith("error: net.onnx is not a readable ONNX model: ") and err.count("net.onnx") == 1


def test_a_gpu_recipe_loads_as_written(tmp_path, capsys):
    two_in_two_out(tmp_path / "two.onnx")
    assert init(capsys, tmp_path, tmp_path / "two.onnx", "--target", "cuda")[0] == 0
    assert load_recipe(tmp_path / "deploy.toml").spec.targets["cuda"] == {"kind": "cuda", "arch": "sm_80"}


def test_the_kind_follows_the_outputs():
    scores = Signature(inputs={}, outputs={"p": {"shape": ["N", 1000], "dtype": "float32"}})
    maps = Signature(
        inputs={},
        outputs={"p": {"shape": [1, 1000], "dtype": "float32"}, "boxes": {"shape": [1, 100, 4], "dtype": "float32"}},
    )
    assert (model_kind(scores), model_kind(maps)) == ("classifier", "detector")
    assert "min_top1_agreement" not in write_recipe(model_path="m.onnx", signature=maps)
    embedding = Signature(inputs={}, outputs={"p": {"shape": [1, 2048], "dtype": "float32", "features": True}})
    assert model_kind(embedding) == "detector"  # its top-1 means nothing


def test_a_model_that_arrives_quantized_gets_the_tolerances_of_two_int8_implementations():
    """onnxruntime's int8 kernels and its float emulation of one QDQ ResNet-50 agree at cosine 0.9975: the float
    presets' 0.9999 and 1e-4 failed a correct library of EfficientWord-Net's pre-quantized model."""
    scores = Signature(inputs={}, outputs={"p": {"shape": [1, 1000], "dtype": "float32"}})
    text = write_recipe(model_path="m.onnx", signature=scores, preset=Preset.of(scores, quantized=True))
    assert "min_cosine = 0.99\n" in text and "min_top1_agreement = 0.99\n" in text and "max_abs_error" not in text
    assert "it arrives quantized" in text
    embedding = Signature(inputs={}, outputs={"p": {"shape": [1, 2048], "dtype": "float32", "features": True}})
    assert Preset.of(embedding, quantized=True).gates == {"min_cosine": 0.99}
    assert Preset.of(scores, quantized=True).title == "classifier int8"


# as tf2onnx and torch name tensors: TOML needs these keys quoted, and a '.' in a bare key would nest tables
EXPORTED = ("serving_default_zeta:0", "alpha.1", "StatefulPartitionedCall:1", "StatefulPartitionedCall:0")


def test_names_as_exporters_write_them_are_quoted_keys_the_loader_reads_back(tmp_path, capsys):
    two_in_two_out(tmp_path / "two.v2.onnx", names=EXPORTED)
    assert init(capsys, tmp_path, tmp_path / "two.v2.onnx")[0] == 0
    text = (tmp_path / "deploy.toml").read_text()
    assert '[models."two.v2"]' in text and 'inputs."serving_default_zeta:0" = ' in text
    assert 'inputs."alpha.1" = ' in text and 'model = "two.v2"' in text
    spec = load_recipe(tmp_path / "deploy.toml").spec
    assert list(spec.models["two.v2"].inputs) == ["serving_default_zeta:0", "alpha.1"]


def test_a_static_model_builds_and_validates_from_its_written_recipe_with_no_edits(tvm, tmp_path):
    two_in_two_out(tmp_path / "two.onnx", names=EXPORTED)

    def run(*a):
        return subprocess.run([sys.executable, "-m", "modelbuild", *a], cwd=tmp_path, capture_output=True, text=True)

    assert run("init", "two.onnx").returncode == 0
    proc = run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all gates passed" in proc.stdout


@pytest.mark.parametrize("keep_io_types", [False, True], ids=["float16-edges", "float32-edges"])
def test_a_float16_model_gets_gates_of_float16s_precision(tmp_path, capsys, keep_io_types):
    """Computed in float32 on a CPU, it differs from onnxruntime (which rounds every tensor to float16) by
    about 1e-3: the float32 preset's 60 dB failed the bundled classifier converted to float16 at 62.9 dB."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(conv_relu(tmp_path / "net.onnx")))
    onnx.save(convert_float_to_float16(model, keep_io_types=keep_io_types), str(tmp_path / "half.onnx"))
    code, out, _ = init(capsys, tmp_path, tmp_path / "half.onnx")
    text = (tmp_path / "deploy.toml").read_text()
    assert code == 0 and "(detector float16 preset, target host)" in out
    assert "min_sqnr_db = 40" in text and "max_abs_error" not in text
    code, out, _ = init(capsys, tmp_path, tmp_path / "net.onnx", "--force")
    assert "(detector preset, target host)" in out and "min_sqnr_db = 60" in (tmp_path / "deploy.toml").read_text()


def test_a_byte_input_draws_its_data_from_every_value_a_byte_holds():
    """A uint8 input is most often an image: random golden data of 0 to 9 exercises a sliver of it."""
    signature = Signature(
        inputs={
            "image_tensor:0": {"shape": [1, 32, 32, 3], "dtype": "uint8"},
            "ids": {"shape": [1, 16], "dtype": "int64"},
        },
        outputs={"scores": {"shape": [1, 8], "dtype": "float32"}},
    )
    text = write_recipe(model_path="m.onnx", signature=signature)
    assert 'inputs."image_tensor:0" = { shape = [1, 32, 32, 3], dtype = "uint8", range = [0, 256] }' in text
    assert 'inputs.ids = { shape = [1, 16], dtype = "int64" }' in text  # token ids: the vocabulary is the user's


def test_init_writes_the_int8_tolerances_for_a_model_that_arrives_quantized(tmp_path, capsys):
    from tests.helpers.onnx_models import quantized_qdq

    quantized_qdq(conv_relu(tmp_path / "net.onnx"), tmp_path / "q.onnx", [1, 3, 8, 8])
    code, out, _ = init(capsys, tmp_path, tmp_path / "q.onnx")
    assert code == 0 and "(detector int8 preset, target host)" in out
    assert "[validation.gates]\nmin_cosine = 0.99\n" in (tmp_path / "deploy.toml").read_text()


def test_init_int8_writes_an_int8_build_beside_the_float_one_each_with_its_own_gates(tmp_path, capsys):
    from tests.helpers.onnx_models import conv_then_dense

    code, out, _ = init(capsys, tmp_path, conv_then_dense(tmp_path / "net.onnx"), "--int8")
    assert code == 0 and "(classifier preset, and an int8 build, target host)" in out
    recipe = load_recipe(tmp_path / "deploy.toml")
    fp32, int8 = recipe.spec.builds
    assert (fp32.quantization, int8.quantization) == (None, "int8")
    assert recipe.spec.quantization["int8"].calibration.source == "random"
    float_gates, int8_gates = (recipe.validation_for(b).gates for b in (fp32, int8))
    assert (float_gates.max_abs_error, float_gates.min_cosine, float_gates.min_top1_agreement) == (1e-4, 0.9999, 1.0)
    # float's absolute bound is not inherited: int8 never meets it
    assert (int8_gates.max_abs_error, int8_gates.min_cosine, int8_gates.min_top1_agreement) == (None, 0.99, 0.99)
    # vs_float timed with the float library in turns; the recipe's other timing settings kept
    int8_timing = recipe.validation_for(int8).timing
    assert int8_timing.beside_float and not recipe.validation_for(fp32).timing.beside_float
    assert int8_timing.min_runs == recipe.spec.validation.timing.min_runs == 50


def test_init_int8_refuses_a_model_that_arrives_quantized(tmp_path, capsys):
    from tests.helpers.onnx_models import quantized_qdq

    quantized_qdq(conv_relu(tmp_path / "net.onnx"), tmp_path / "q.onnx", [1, 3, 8, 8])
    code, _, err = init(capsys, tmp_path, tmp_path / "q.onnx", "--int8")
    assert code == 2 and not (tmp_path / "deploy.toml").exists()
    assert err.count("\n") == 1 and "arrives quantized" in err and "(fix: leave out --int8)" in err


def test_an_int8_recipe_from_init_builds_and_passes_its_gates_with_no_edits(tvm, tmp_path):
    from tests.helpers.onnx_models import conv_then_dense

    conv_then_dense(tmp_path / "net.onnx")

    def run(*a):
        return subprocess.run([sys.executable, "-m", "modelbuild", *a], cwd=tmp_path, capture_output=True, text=True)

    assert run("init", "net.onnx", "--int8").returncode == 0
    proc = run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "net+int8@host" in proc.stdout and "all gates passed" in proc.stdout
    report = {b["name"]: b for b in json.loads((tmp_path / "build/report.json").read_text())["builds"]}
    assert report["net+int8@host"]["vs_float"]["timed_together"]
