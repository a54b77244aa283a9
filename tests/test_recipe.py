"""Loading deploy.toml: valid recipes, includes, and one clear error per mistake."""

from __future__ import annotations

import json
import textwrap

import jsonschema
import pytest

from modelbuild.errors import RecipeError
from modelbuild.recipe import load_recipe
from modelbuild.recipe.schema import json_schema
from tests.helpers.paths import REPO

GOOD = """
[models.cls]
path = "m.onnx"
inputs.x = { shape = [1, 3, 48, 192], dtype = "float32" }

[targets.host]
kind = "llvm"
mcpu = "host"
num-cores = 2

[[builds]]
model = "cls"
targets = ["host"]
"""


def write(tmp_path, text, name="deploy.toml"):
    (tmp_path / "m.onnx").write_bytes(b"not parsed when loading")
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def error_of(tmp_path, text) -> RecipeError:
    with pytest.raises(RecipeError) as info:
        load_recipe(write(tmp_path, text))
    return info.value


def test_a_good_recipe_loads(tmp_path):
    recipe = load_recipe(write(tmp_path, GOOD))
    assert recipe.spec.models["cls"].inputs["x"].shape == [1, 3, 48, 192]
    assert recipe.spec.targets["host"]["num-cores"] == 2
    assert recipe.model_path("cls") == (tmp_path / "m.onnx").resolve()


def test_unknown_key_names_file_line_field_and_the_valid_keys(tmp_path):
    err = error_of(tmp_path, GOOD.replace('path = "m.onnx"', 'path = "m.onnx"\nsimplfy = true'))
    assert err.line == 4 and err.field == "models.cls.simplfy"
    assert str(err).endswith(
        "deploy.toml:4: models.cls.simplfy: unknown key 'simplfy' "
        "(fix: did you mean 'simplify'? valid keys here: path, inputs, simplify)"
    )
    assert "simplify" in err.fix


def test_wrong_type_says_expected_and_found(tmp_path):
    err = error_of(tmp_path, GOOD.replace("[1, 3, 48, 192]", '[1, 3, "tall", 192]'))
    assert err.field == "models.cls.inputs.x.shape[2]" and err.line == 4
    assert "expected a valid integer" in err.message and "'tall'" in err.message


def test_missing_field_points_at_its_table(tmp_path):
    err = error_of(tmp_path, GOOD.replace('path = "m.onnx"\n', ""))
    assert err.field == "models.cls.path" and err.line == 2
    assert "required" in err.message


def test_toml_syntax_error_gives_the_line(tmp_path):
    err = error_of(tmp_path, GOOD.replace("num-cores = 2", "num-cores = "))
    assert err.line == 9 and "invalid TOML" in err.message


def test_unknown_target_option_lists_the_valid_ones(tmp_path):
    err = error_of(tmp_path, GOOD.replace("num-cores = 2", "num_cores = 2"))
    assert err.field == "targets.host.num_cores" and err.line == 9
    assert "num-cores" in err.fix


def test_unknown_target_kind(tmp_path):
    err = error_of(tmp_path, GOOD.replace('kind = "llvm"', 'kind = "tpu"'))
    assert err.field == "targets.host.kind" and "llvm" in err.fix


def test_build_naming_an_unknown_target(tmp_path):
    err = error_of(tmp_path, GOOD.replace('targets = ["host"]', 'targets = ["host", "gpu"]'))
    assert err.field == "builds[0].targets[1]" and err.line == 13
    assert "no target named 'gpu'" in err.message


def test_missing_model_file(tmp_path):
    err = error_of(tmp_path, GOOD.replace("m.onnx", "absent.onnx"))
    assert err.field == "models.cls.path" and err.line == 3 and "not found" in err.message


def test_a_model_path_in_a_symlink_loop_is_a_recipe_error_not_a_traceback(tmp_path):
    (tmp_path / "a.onnx").symlink_to("b.onnx")
    (tmp_path / "b.onnx").symlink_to("a.onnx")
    err = error_of(tmp_path, GOOD.replace("m.onnx", "a.onnx"))
    assert err.field == "models.cls.path" and err.line == 3
    assert "'a.onnx' is a symbolic link that leads back to itself" in err.message


def test_includes_merge_and_the_including_file_wins(tmp_path):
    (tmp_path / "pieces").mkdir()
    (tmp_path / "pieces/t.toml").write_text('[targets.host]\nkind = "llvm"\nmcpu = "skylake"\nnum-cores = 8\n')
    recipe = load_recipe(write(tmp_path, 'include = ["pieces/t.toml"]\n' + GOOD.replace('mcpu = "host"\n', "")))
    assert recipe.spec.targets["host"] == {"kind": "llvm", "mcpu": "skylake", "num-cores": 2}


def test_an_error_in_an_included_file_names_that_file(tmp_path):
    (tmp_path / "t.toml").write_text('[targets.arm]\nkind = "llvm"\nmtripel = "aarch64-linux-gnu"\n')
    err = error_of(tmp_path, 'include = ["t.toml"]\n' + GOOD)
    assert err.file.endswith("t.toml") and err.line == 3


def test_missing_include(tmp_path):
    err = error_of(tmp_path, 'include = ["nowhere.toml"]\n' + GOOD)
    assert err.line == 1 and "not found" in err.message


def test_an_include_that_names_a_folder_is_a_recipe_error(tmp_path):
    """The fuzzer's include = [""]: the recipe's own folder, which read_text met with IsADirectoryError."""
    (tmp_path / "pieces").mkdir()
    for name in ("", "pieces"):
        err = error_of(tmp_path, f'include = ["{name}"]\n' + GOOD)
        assert err.line == 1 and err.field == "include[0]" and "folder" in err.message


def test_include_cycle(tmp_path):
    (tmp_path / "a.toml").write_text('include = ["b.toml"]\n')
    (tmp_path / "b.toml").write_text('include = ["a.toml"]\n')
    err = error_of(tmp_path, 'include = ["a.toml"]\n' + GOOD)
    assert "cycle" in err.message


def test_json_schema_accepts_every_recipe_the_project_ships():
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    for path in [REPO / "deploy.toml", *sorted((REPO / "recipes/examples").glob("*.toml"))]:
        recipe = load_recipe(path)
        jsonschema.validate(json.loads(recipe.spec.model_dump_json(by_alias=True)), schema)


def test_json_schema_rejects_unknown_keys():
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"models": {}, "targets": {}, "builds": [], "typo": 1}, json_schema())


def test_golden_files_need_a_path_that_exists(tmp_path):
    err = error_of(tmp_path, GOOD + '\n[validation]\ngolden = { source = "npz" }\n')
    assert err.field == "validation.golden.source" and "needs a path" in err.message
    err = error_of(tmp_path, GOOD + '\n[validation]\ngolden = { source = "npz", path = "g.npz" }\n')
    assert err.field == "validation.golden.path" and err.line == 16


def test_a_build_override_is_checked_too(tmp_path):
    text = GOOD.replace('targets = ["host"]', 'targets = ["host"]\n[builds.validation.baseline]\nreport = "b.json"')
    err = error_of(tmp_path, text)
    assert err.field == "builds[0].validation.baseline.report" and "not found" in err.message


def test_a_build_naming_an_unknown_tuning_section(tmp_path):
    err = error_of(tmp_path, GOOD.replace('targets = ["host"]', 'targets = ["host"]\ntuning = "fast"'))
    assert err.field == "builds[0].tuning" and "[tuning.fast]" in err.fix


def test_tuning_a_target_that_runs_neither_here_nor_on_a_device_says_to_name_one(tmp_path):
    pi = '[targets.pi]\nkind = "llvm"\nmtriple = "aarch64-linux-gnu"\nnum-cores = 4\n'
    text = GOOD.replace('targets = ["host"]', 'targets = ["pi"]\ntuning = "fast"') + "\n[tuning.fast]\n" + pi
    err = error_of(tmp_path, text)
    assert err.field == "builds[0].tuning" and err.line == 14
    assert "target 'pi' runs neither on this machine nor on a device" in err.message
    assert "add rpc = { tracker" in err.fix and "[targets.pi]" in err.fix
    write(tmp_path, text + 'rpc = { tracker = "127.0.0.1:9190", key = "rpi4" }\n')
    assert load_recipe(tmp_path / "deploy.toml").spec.builds[0].tuning == "fast"


def test_tuning_a_target_without_a_core_count_says_to_give_one(tmp_path):
    text = GOOD.replace("num-cores = 2\n", "").replace('targets = ["host"]', 'targets = ["host"]\ntuning = "fast"')
    err = error_of(tmp_path, text + "\n[tuning.fast]\n")
    assert err.field == "builds[0].tuning" and "has no num-cores" in err.message
    assert err.fix == "add num-cores = N (the device's physical cores) to [targets.host]"


def test_tuning_records_must_exist(tmp_path):
    err = error_of(tmp_path, GOOD + '\n[tuning.fast]\nrecords = "tuning/records.json"\n')
    assert err.field == "tuning.fast.records" and err.line == 16


def test_a_build_declared_twice(tmp_path):
    err = error_of(tmp_path, GOOD + '\n[[builds]]\nmodel = "cls"\ntargets = ["host"]\n')
    assert err.field == "builds[1].targets[0]" and "declared twice" in err.message


def test_per_build_validation_overrides_the_defaults(tmp_path):
    text = GOOD + "\n[validation.gates]\nmax_p99_ms = 5\nmin_cosine = 0.99\n"
    text = text.replace('targets = ["host"]', 'targets = ["host"]\n[builds.validation.gates]\nmax_p99_ms = 9')
    recipe = load_recipe(write(tmp_path, text))
    gates = recipe.validation_for(recipe.build_spec("cls", "host")).gates
    assert gates.max_p99_ms == 9 and gates.min_cosine == 0.99


def test_a_float_and_an_int8_build_of_one_model_and_target_each_keep_their_overrides(tmp_path):
    """The int8 build's override used to be ignored when the float build came first in the recipe."""
    text = GOOD.replace('targets = ["host"]', 'targets = ["host"]\n[builds.validation.gates]\nmin_cosine = 0.9999')
    text += (
        '\n[quantization.int8]\n\n[[builds]]\nmodel = "cls"\ntargets = ["host"]\nquantization = "int8"\n'
        "[builds.validation.gates]\nmin_cosine = 0.99\n"
    )
    recipe = load_recipe(write(tmp_path, text))
    assert recipe.validation_for(recipe.build_spec("cls", "host")).gates.min_cosine == 0.9999
    assert recipe.validation_for(recipe.build_spec("cls", "host", "int8")).gates.min_cosine == 0.99


def test_false_turns_a_recipe_wide_gate_off_for_one_build_and_the_others_keep_it(tmp_path):
    text = GOOD + "\n[validation.gates]\nmin_sqnr_db = 60\nmin_cosine = 0.9999\n"
    text += (
        '\n[quantization.int8]\n\n[[builds]]\nmodel = "cls"\ntargets = ["host"]\nquantization = "int8"\n'
        "[builds.validation.gates]\nmin_sqnr_db = false\nmin_cosine = 0.99\n"
    )
    recipe = load_recipe(write(tmp_path, text))
    int8 = recipe.validation_for(recipe.build_spec("cls", "host", "int8")).gates
    fp32 = recipe.validation_for(recipe.build_spec("cls", "host")).gates
    assert (int8.min_sqnr_db, int8.min_cosine) == (None, 0.99)
    assert (fp32.min_sqnr_db, fp32.min_cosine) == (60, 0.9999)
    schema = json_schema()
    gates_schema = {"$ref": "#/$defs/GatesSpec", "$defs": schema["$defs"]}
    jsonschema.validate({"min_sqnr_db": False}, gates_schema)  # as editors check it
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"min_sqnr_db": True}, gates_schema)


@pytest.mark.parametrize("line", ["samples = true", "min_runs = false"])
def test_a_boolean_where_a_number_belongs_is_an_error_not_a_one(tmp_path, line):
    """TOML's true used to be read as 1 (and false as 0: `max_abs_error = false`, a gate no build passes)."""
    section = "[quantization.q.calibration]" if line.startswith("samples") else "[validation.timing]"
    err = error_of(tmp_path, GOOD + f"\n{section}\n{line}\n")
    assert err.line == 16 and err.field.endswith(line.split()[0])
    assert err.message == f"expected a valid integer, found {line.split()[-1]}"


def test_int16_activations_need_the_symmetric_scheme(tmp_path):
    err = error_of(tmp_path, GOOD + '\n[quantization.q]\nscheme = "affine"\nint16_most_sensitive = 4\n')
    assert err.field == "quantization.q.int16_most_sensitive" and err.line == 17
    assert 'scheme = "symmetric"' in err.fix


def test_a_build_searches_a_declared_section_from_its_quantization(tmp_path):
    err = error_of(tmp_path, GOOD + 'search = "fast"\n')
    assert (err.field, err.line) == ("builds[0].search", 14) and "no search section named 'fast'" in err.message
    assert "declare [search.fast]" in err.fix
    err = error_of(tmp_path, GOOD + 'search = "fast"\n[search.fast]\nobjective = "p99"\n')
    assert err.field == "builds[0].search" and 'add quantization = "NAME"' in err.fix
    err = error_of(
        tmp_path, GOOD + 'quantization = "q"\nsearch = "fast"\n[quantization.q]\n[search.fast]\nprecisions = ["int4"]\n'
    )
    assert err.field == "search.fast.precisions[0]" and err.line == 18
    recipe = load_recipe(
        write(
            tmp_path,
            GOOD + 'quantization = "q"\nsearch = "fast"\n[quantization.q]\n[search.fast]\nmax_candidates = 12\n',
        )
    )
    assert recipe.spec.search["fast"].max_candidates == 12 and recipe.spec.builds[0].search == "fast"


def test_a_node_cannot_be_both_int16_and_float(tmp_path):
    err = error_of(tmp_path, GOOD + '\n[quantization.q]\nexclude_nodes = ["a"]\nint16_nodes = ["b", "a"]\n')
    assert err.field == "quantization.q.int16_nodes[1]" and "'a'" in err.message


def test_an_mcpu_llvm_does_not_know_is_refused_with_a_suggestion(tmp_path):
    err = error_of(tmp_path, GOOD.replace('mcpu = "host"', 'mcpu = "skylakee"'))
    assert (err.field, err.line) == ("targets.host.mcpu", 8)
    assert err.message == "LLVM knows no x86_64 CPU 'skylakee'"
    assert err.fix.startswith("did you mean 'skylake'")


def test_a_cross_target_mcpu_is_checked_against_its_own_architecture(tmp_path):
    arm = GOOD.replace('mcpu = "host"', 'mtriple = "aarch64-linux-gnu"\nmcpu = "cortex-a72"')
    assert load_recipe(write(tmp_path, arm)).spec.targets["host"]["mcpu"] == "cortex-a72"
    err = error_of(tmp_path, arm.replace("cortex-a72", "skylake"))
    assert err.message == "LLVM knows no aarch64 CPU 'skylake'"


@pytest.mark.parametrize("preset", sorted(p.name for p in (REPO / "recipes/validation").glob("*.toml")))
def test_every_shipped_validation_preset_loads_into_a_recipe(tmp_path, preset):
    text = f'include = ["{REPO / "recipes/validation" / preset}"]\n' + GOOD
    assert load_recipe(write(tmp_path, text)).spec.validation.gates.min_cosine >= 0.99  # each gates accuracy


def test_a_quantized_builds_golden_inputs_may_not_be_its_calibration_samples(tmp_path):
    (tmp_path / "lines").mkdir()
    text = GOOD.replace('targets = ["host"]', 'targets = ["host"]\nquantization = "int8"')
    text += (
        '\n[quantization.int8]\ncalibration = { source = "images", path = "lines" }\n'
        '\n[validation]\ngolden = { source = "images", path = "lines/" }\n'
    )
    err = error_of(tmp_path, text)
    assert err.field == "validation.golden.path" and err.line == 20
    assert err.message == "the golden inputs of cls+int8 are its calibration samples ('lines/')"


SHIPPED = ["deploy.toml", *sorted(f"recipes/examples/{p.name}" for p in (REPO / "recipes/examples").glob("*.toml"))]


@pytest.mark.parametrize("recipe", SHIPPED)
def test_a_recipe_read_back_from_its_snapshot_plans_exactly_what_validation_planned(tmp_path, recipe):
    """Same params, files and dependencies in every node, so the same cache keys, and the same gates."""
    from modelbuild.pipeline.graph import build_plan

    validated = load_recipe(REPO / recipe, snapshots=tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == 1
    snapped = load_recipe(REPO / recipe, snapshots=tmp_path)
    assert type(snapped.spec).__name__ == "Table" and type(validated.spec).__name__ == "Recipe"
    plans = [build_plan(r, lambda table: table) for r in (validated, snapped)]
    assert plans[0] == plans[1]
    for build in validated.spec.builds:
        assert (
            validated.validation_for(build).model_dump()
            == snapped.validation_for(
                snapped.build_spec(build.model, build.targets[0], build.quantization)
            ).model_dump()
        )


def test_an_edited_recipe_is_validated_again_and_its_mistakes_still_reported(tmp_path):
    snapshots = tmp_path / "snapshots"
    load_recipe(write(tmp_path, GOOD), snapshots=snapshots)
    err = error_of(tmp_path, GOOD.replace("num-cores = 2", "num-cores = 2\nnum_cores = 2"))
    assert err.field == "targets.host.num_cores"
    with pytest.raises(RecipeError):
        load_recipe(write(tmp_path, GOOD.replace('targets = ["host"]', 'targets = "host"')), snapshots=snapshots)
    assert len(list(snapshots.glob("*.json"))) == 1  # nothing kept of the broken recipe


def test_a_snapshot_table_dumps_and_copies_as_pydantic_does():
    from modelbuild.recipe.schema import QuantizationSpec
    from modelbuild.recipe.snapshot import freeze, thaw

    model = QuantizationSpec.model_validate({"calibration": {"samples": 4, "source": "images", "path": "c"}})
    table = thaw(json.loads(json.dumps(freeze(model))))
    exclude = {"calibration": {"path"}}
    assert table.model_dump(exclude=exclude) == model.model_dump(exclude=exclude)
    assert table.model_dump(exclude={"calibration"}) == model.model_dump(exclude={"calibration"})
    assert table.model_fields_set == model.model_fields_set == {"calibration"}
    assert table.calibration.model_fields_set == {"samples", "source", "path"}
    assert table.model_copy(update={"per_channel": False}).per_channel is False and table.per_channel is True


def test_an_include_that_is_not_a_list_of_paths_is_a_recipe_error(tmp_path):
    """Found by tests/test_recipe_fuzz.py: `include = 0` was a TypeError traceback."""
    err = error_of(tmp_path, "include = 0\n" + GOOD)
    assert (err.field, err.line, err.message) == ("include", 1, "expected a list of recipe files, found 0")


def test_a_recipe_that_is_not_utf8_is_a_recipe_error(tmp_path):
    """Found by tests/test_recipe_fuzz.py: a UnicodeDecodeError traceback."""
    path = tmp_path / "deploy.toml"
    path.write_bytes(b"\x80" + GOOD.encode())
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert info.value.message == "not UTF-8 text (byte 0)" and info.value.fix == "save the recipe as UTF-8 TOML"


@pytest.mark.parametrize(
    "rpc, field, message",
    [
        ('{ tracker = "localhost", key = "rpi4" }', "targets.host.rpc.tracker", "expected the tracker as host:port"),
        ('{ tracker = "127.0.0.1:9190" }', "targets.host.rpc", "expected a table with the device's key"),
        (
            '{ tracker = "127.0.0.1:9190", key = "rpi4", timeout = 0 }',
            "targets.host.rpc.timeout",
            "expected seconds > 0",
        ),
        (
            '{ tracker = "127.0.0.1:9190", key = "rpi4", board = 1 }',
            "targets.host.rpc.board",
            "unknown rpc option 'board'",
        ),
    ],
)
def test_a_device_over_rpc_is_checked_where_it_is_written(tmp_path, rpc, field, message):
    err = error_of(tmp_path, GOOD.replace("num-cores = 2", f"num-cores = 2\nrpc = {rpc}"))
    assert err.field == field and message in err.message and err.line == 10


def test_the_tracker_may_come_from_the_environment(tmp_path, monkeypatch):
    text = GOOD.replace("num-cores = 2", 'num-cores = 2\nrpc = { key = "rpi4" }')
    assert error_of(tmp_path, text).field == "targets.host.rpc.tracker"
    monkeypatch.setenv("MODELBUILD_RPC_TRACKER", "ci-farm:9190")
    from modelbuild.recipe.targets import device_of

    assert device_of(load_recipe(write(tmp_path, text)).spec.targets["host"]) == {
        "tracker": "ci-farm:9190",
        "key": "rpi4",
        "timeout": 60,
    }


@pytest.mark.parametrize(
    ("table", "found"),
    [
        ('kind = "llvm"\nmcpu = "host"\ndevices = ["cuda", "llvm"]', 'found ["cuda", "llvm"] on a llvm target'),
        ('kind = "cuda"\narch = "sm_80"\ndevices = ["llvm", "cuda"]', 'found ["llvm", "cuda"] on a cuda target'),
    ],
)
def test_a_split_between_devices_is_the_gpu_with_the_cpu_on_a_cuda_target(tmp_path, table, found):
    text = GOOD.replace('kind = "llvm"\nmcpu = "host"\nnum-cores = 2', table)
    err = error_of(tmp_path, text)
    assert err.field == "targets.host.devices" and err.line == 9 and found in err.message
    assert err.fix.startswith('kind = "cuda" with devices = ["cuda", "llvm"]')
    cuda = 'kind = "cuda"\narch = "sm_80"\ndevices = ["cuda", "llvm"]'
    split = GOOD.replace('kind = "llvm"\nmcpu = "host"\nnum-cores = 2', cuda)
    assert load_recipe(write(tmp_path, split)).spec.targets["host"]["devices"] == ["cuda", "llvm"]
