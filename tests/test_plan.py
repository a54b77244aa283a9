"""The plan: which nodes a recipe makes, what each declares, and selection."""

import textwrap

import pytest
from PIL import Image

from modelbuild.errors import RecipeError, SelectionError
from modelbuild.pipeline.graph import build_plan, library_name
from modelbuild.pipeline.names import float_build_of, select
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
golden = { source = "images", path = "held-out", count = 3 }

[[builds]]
model = "cls"
targets = ["host", "pi"]
quantization = "int8"
"""


@pytest.fixture
def plan(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"x")
    images(tmp_path / "calib", 4)
    images(tmp_path / "held-out", 4)
    (tmp_path / "deploy.toml").write_text(textwrap.dedent(RECIPE))
    return build_plan(load_recipe(tmp_path / "deploy.toml"), lambda table: table)


def images(folder, count):
    folder.mkdir()
    for i in range(count):
        Image.new("RGB", (8, 8), (i, i, i)).save(folder / f"{i}.png")


def test_an_int8_build_compiles_the_quantized_ir_and_checks_two_references(plan):
    assert plan.builds["cls+int8@host"] == [
        "import:cls",
        "quantize:cls+int8@host",
        "compile:cls+int8@host",
        "reference:cls",
        "reference-qdq:cls+int8@host",
        "validate:cls+int8@host",
    ]
    assert plan.nodes["compile:cls+int8@host"].deps["ir"] == ("quantize:cls+int8@host", "ir.json")
    # the library's manifest carries the model's signature into the build folder
    assert plan.nodes["compile:cls+int8@host"].deps["signature"] == ("import:cls", "signature.json")
    assert plan.nodes["quantize:cls+int8@host"].deps["onnx"] == ("import:cls", "model.onnx")
    assert plan.nodes["reference-qdq:cls+int8@host"].deps["model"] == ("quantize:cls+int8@host", "qdq.onnx")
    assert plan.nodes["validate:cls+int8@host"].deps["golden_qdq"] == ("reference-qdq:cls+int8@host", "golden.npz")


def test_image_samples_are_declared_file_by_file_up_to_the_count(plan):
    calibration = [p.name for r, p in plan.nodes["quantize:cls+int8@host"].files.items() if r.startswith("calibration")]
    golden = [p.name for r, p in plan.nodes["reference:cls"].files.items() if r.startswith("golden")]
    assert calibration == ["0.png", "1.png"] and golden == ["0.png", "1.png", "2.png"]


def test_a_cross_target_builds_objects_and_is_not_run_here(plan):
    assert plan.nodes["compile:cls+int8@pi"].publish == {
        "model.tar": "cls+int8/pi/model.tar",
        "library.json": "cls+int8/pi/library.json",
        "analysis.json": "cls+int8/pi/analysis.json",
    }
    assert plan.nodes["validate:cls+int8@pi"].params["runs_here"] is False
    assert library_name({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "cross-compiler": "gcc"}) == "model.so"


def test_selection_takes_dependencies_along(plan):
    sub = select(plan, ["*@pi"])
    assert set(sub.builds) == {"cls+int8@pi"} and "import:cls" in sub.nodes and "compile:cls+int8@host" not in sub.nodes
    assert set(select(plan, ["cls"]).builds) == {"cls+int8@host", "cls+int8@pi"}
    with pytest.raises(SelectionError, match="no build matches 'gpu'"):
        select(plan, ["gpu"])


def test_a_float_and_an_int8_build_of_one_model_and_target_live_side_by_side(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"x")
    text = textwrap.dedent(RECIPE).replace('targets = ["host", "pi"]', 'targets = ["host"]')
    text += '\n[[builds]]\nmodel = "cls"\ntargets = ["host"]\n'
    images(tmp_path / "calib", 1)
    images(tmp_path / "held-out", 3)
    (tmp_path / "deploy.toml").write_text(text)
    plan = build_plan(load_recipe(tmp_path / "deploy.toml"), lambda table: table)
    assert set(plan.builds) == {"cls@host", "cls+int8@host"}
    assert plan.nodes["compile:cls@host"].publish["model.so"] == "cls/host/model.so"
    assert plan.nodes["compile:cls+int8@host"].publish["model.so"] == "cls+int8/host/model.so"
    assert plan.nodes["compile:cls@host"].deps["ir"] == ("import:cls", "ir.json")  # one import serves both
    assert float_build_of("cls+int8@host") == "cls@host" and float_build_of("cls@host") is None
    assert set(select(plan, ["cls+int8"]).builds) == {"cls+int8@host"}
    assert set(select(plan, ["cls"]).builds) == {"cls@host", "cls+int8@host"}


def test_every_build_of_a_model_shares_one_reference_that_reads_only_the_import(plan):
    """reference needs the inputs import froze, never the compiled library: it is not downstream of compile."""
    assert plan.nodes["validate:cls+int8@pi"].deps["golden"] == ("reference:cls", "golden.npz")
    assert plan.nodes["validate:cls+int8@host"].deps["golden"] == ("reference:cls", "golden.npz")
    assert [n for n in plan.nodes if n.startswith("reference:")] == ["reference:cls"]
    assert plan.upstream("reference:cls") == {"import:cls"}


def test_builds_with_different_golden_data_get_references_of_their_own(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"x")
    images(tmp_path / "calib", 1)
    images(tmp_path / "held-out", 3)
    text = textwrap.dedent(RECIPE) + "[builds.validation]\ngolden = { count = 2 }\n"
    text += '\n[[builds]]\nmodel = "cls"\ntargets = ["host"]\n'
    (tmp_path / "deploy.toml").write_text(text)
    plan = build_plan(load_recipe(tmp_path / "deploy.toml"), lambda table: table)
    assert plan.nodes["validate:cls+int8@host"].deps["golden"] == ("reference:cls", "golden.npz")
    assert plan.nodes["validate:cls+int8@pi"].deps["golden"] == ("reference:cls", "golden.npz")
    assert plan.nodes["validate:cls@host"].deps["golden"] == ("reference:cls~2", "golden.npz")


def test_the_graph_draws_each_edge_once_and_reference_beside_compile(plan):
    from modelbuild.engine.render import as_dot, as_tree

    dot = as_dot(plan)
    assert dot.count('"compile:cls+int8@host" -> "validate:cls+int8@host"') == 1  # library and figures: one edge
    assert '"compile:cls+int8@host" -> "reference:cls"' not in dot
    assert "  reference:cls                <- import:cls" in as_tree(plan)


def plans_of(root, base: str, tail: str, variants) -> list:
    """The plan of `base + variant + tail` for each variant (the target's last lines), in order."""
    plans = []
    for variant in variants:
        (root / "deploy.toml").write_text(base + variant + tail)
        plans.append(build_plan(load_recipe(root / "deploy.toml"), lambda t: t))
    return plans


def tuned(target: str, lines: str) -> str:
    """A one-model recipe with a [tuning.quick] section and one target, its lines last (plans_of adds more)."""
    return (
        textwrap.dedent("""\
        [models.cls]
        path = "m.onnx"
        inputs.x = { shape = [1, 3, 8, 8] }

        [tuning.quick]
        trials_per_task = 4

        """)
        + f"[targets.{target}]\n"
        + lines
    )


def test_a_device_enters_the_validate_key_and_not_the_compile_key(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"x")
    base = textwrap.dedent("""\
        [models.cls]
        path = "m.onnx"
        inputs.x = { shape = [1, 3, 8, 8] }

        [targets.board]
        kind = "llvm"
        mcpu = "skylake"
        """)
    tail = '\n[[builds]]\nmodel = "cls"\ntargets = ["board"]\n'
    here, there = plans_of(tmp_path, base, tail, ("", 'rpc = { tracker = "127.0.0.1:9190", key = "rpi4" }\n'))
    assert here.nodes["compile:cls@board"].params == there.nodes["compile:cls@board"].params
    assert here.nodes["validate:cls@board"].params["device"] is None
    assert there.nodes["validate:cls@board"].params["device"] == {
        "tracker": "127.0.0.1:9190",
        "key": "rpi4",
        "timeout": 60,
    }
    assert there.nodes["validate:cls@board"].params["machine"]["device"] == "rpi4"


def test_a_device_enters_the_tune_key_with_the_linker_of_its_candidates(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"x")
    base = tuned("pi", 'kind = "llvm"\nnum-cores = 4\ncross-compiler = "aarch64-linux-gnu-gcc"\n')
    tail = '\n[[builds]]\nmodel = "cls"\ntargets = ["pi"]\ntuning = "quick"\n'
    plans = plans_of(
        tmp_path,
        base,
        tail,
        ("", 'mtriple = "aarch64-linux-gnu"\nrpc = { tracker = "127.0.0.1:9190", key = "rpi4" }\n'),
    )
    here, there = (p.nodes["tune:cls@pi"].params for p in plans)
    assert here["device"] is None and here["cross_compiler"] is None  # a local tune links no candidate
    assert there["device"] == {"tracker": "127.0.0.1:9190", "key": "rpi4", "timeout": 60}
    assert there["cross_compiler"] == "aarch64-linux-gnu-gcc"


def test_the_stages_that_time_on_this_machine_run_alone_and_those_on_a_device_do_not(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"x")
    base = tuned("board", 'kind = "llvm"\nmcpu = "skylake"\nnum-cores = 4\n')
    tail = '\n[[builds]]\nmodel = "cls"\ntargets = ["board"]\ntuning = "quick"\n'
    here, there = plans_of(tmp_path, base, tail, ("", 'rpc = { tracker = "127.0.0.1:9190", key = "rpi4" }\n'))
    assert {n for n, node in here.nodes.items() if node.exclusive} == {"tune:cls@board", "validate:cls@board"}
    assert not any(node.exclusive for node in there.nodes.values())


def test_a_library_validated_nowhere_does_not_hold_the_machine(plan):
    assert not plan.nodes["validate:cls+int8@pi"].exclusive  # cross-compiled, no device: nothing is timed
    assert plan.nodes["validate:cls+int8@host"].exclusive


def test_beside_float_times_the_float_library_in_turns_wherever_the_float_build_comes_in_the_recipe(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"x")
    head = tuned("host", 'kind = "llvm"\n') + "\n[quantization.int8]\n\n[validation]\n"
    head += "timing = { beside_float = true }\n"
    int8, fp32 = (
        '\n[[builds]]\nmodel = "cls"\ntargets = ["host"]\nquantization = "int8"\n',
        '\n[[builds]]\nmodel = "cls"\ntargets = ["host"]\n',
    )
    (tmp_path / "deploy.toml").write_text(head + int8 + fp32)  # the float build after the int8 one
    plan = build_plan(load_recipe(tmp_path / "deploy.toml"), lambda t: t)
    assert plan.nodes["validate:cls+int8@host"].deps["float_library"] == ("compile:cls@host", "model.so")
    assert "float_library" not in plan.nodes["validate:cls@host"].deps  # a float build ignores it
    assert "beside_float" not in plan.nodes["validate:cls+int8@host"].params["timing"]  # the input is the key's

    (tmp_path / "deploy.toml").write_text(head + int8)
    with pytest.raises(RecipeError) as info:
        build_plan(load_recipe(tmp_path / "deploy.toml"), lambda t: t)
    assert info.value.field == "validation.timing.beside_float" and info.value.line == 14
    assert "no float build of 'cls' for target 'host'" in info.value.message
    assert 'targets = ["host"] and no quantization' in info.value.fix


def test_a_cuda_targets_kernel_compiler_and_its_split_enter_the_compile_key_and_not_tvms_target(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"x")
    recipe = textwrap.dedent("""\
        [models.cls]
        path = "m.onnx"
        inputs.x = { shape = [1, 3, 8, 8] }

        [targets.cpu]
        kind = "llvm"

        [targets.gpu]
        kind = "cuda"
        arch = "sm_80"
        devices = ["cuda", "llvm"]

        [[builds]]
        model = "cls"
        targets = ["cpu", "gpu"]
        """)
    (tmp_path / "deploy.toml").write_text(recipe)
    nvrtc = {"name": "nvrtc", "version": "12.9.86"}

    def resolved(target):  # what recipe/targets.resolve_target adds to a cuda target
        return {**target, "cuda-compiler": nvrtc} if target["kind"] == "cuda" else target

    plan = build_plan(load_recipe(tmp_path / "deploy.toml"), resolved)
    compile_gpu = plan.nodes["compile:cls@gpu"].params
    assert compile_gpu["cuda_compiler"] == nvrtc and compile_gpu["devices"] == ["cuda", "llvm"]
    assert compile_gpu["target"] == {"kind": "cuda", "arch": "sm_80"}
    assert plan.nodes["validate:cls@gpu"].params["devices"] == ["cuda", "llvm"]
    compile_cpu = plan.nodes["compile:cls@cpu"].params
    assert "cuda_compiler" not in compile_cpu and "devices" not in compile_cpu
