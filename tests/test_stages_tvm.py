"""The real import and compile stages with TVM: few, real and small."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from modelbuild.engine.events import Status
from modelbuild.engine.scheduler import Options
from modelbuild.pipeline.project import open_project
from tests.helpers.onnx_models import conv_relu, with_unsupported_op
from tests.helpers.paths import REPO

RECIPE = """
[models.tiny]
path = "tiny.onnx"
inputs.x = {{ shape = {shape}, dtype = "float32" }}

[targets.cpu]
kind = "llvm"
mcpu = "host"
num-cores = {cores}

[validation]
enabled = false  # these recipes test import and compile; validation has its own tests

[[builds]]
model = "tiny"
targets = ["cpu"]
"""


def write_recipe(root, shape="[1, 3, 8, 8]", cores=2):
    (root / "deploy.toml").write_text(textwrap.dedent(RECIPE.format(shape=shape, cores=cores)))


def build(root):
    run = open_project(root / "deploy.toml").run([], Options())
    assert not run.failed, [r.error for r in run.failed]
    return run, {node for node, r in run.results.items() if r.status is Status.BUILT}


@pytest.fixture
def tiny(tmp_path):
    conv_relu(tmp_path / "tiny.onnx")
    write_recipe(tmp_path)
    return tmp_path


def test_library_computes_what_onnxruntime_computes(tiny):
    import onnxruntime as ort
    import tvm
    from tvm import relax

    build(tiny)
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    library = tvm.runtime.load_module(str(tiny / "build/tiny/cpu/model.so"))
    assert library.implements_function("__vmtir__main", True)  # the VM's own code compiled, not bytecode
    vm = relax.VirtualMachine(library, tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    want = ort.InferenceSession(str(tiny / "tiny.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_each_edit_reruns_exactly_the_stages_it_touches(tiny):
    assert build(tiny)[1] == {"import:tiny", "compile:tiny@cpu"}
    assert build(tiny)[1] == set()

    write_recipe(tiny, shape="[1, 3, 16, 16]")
    assert build(tiny)[1] == {"import:tiny", "compile:tiny@cpu"}

    write_recipe(tiny, shape="[1, 3, 16, 16]", cores=1)
    assert build(tiny)[1] == {"compile:tiny@cpu"}

    os.utime(tiny / "tiny.onnx")
    assert build(tiny)[1] == set()

    conv_relu(tiny / "tiny.onnx", doc="re-exported with another doc string")  # new bytes, same graph
    assert build(tiny)[1] == {"import:tiny"}  # early cutoff: the IR is identical, compile stays cached


def test_editing_only_a_models_external_data_rebuilds_it_computing_the_new_weights(tiny):
    import onnx
    import onnxruntime as ort
    import tvm
    from tvm import relax

    onnx.save(
        onnx.load(str(tiny / "tiny.onnx")),
        str(tiny / "tiny.onnx"),
        save_as_external_data=True,
        location="tiny.onnx.data",
        size_threshold=0,
    )
    build(tiny)
    weights = np.fromfile(tiny / "tiny.onnx.data", dtype=np.float32)
    (-weights).tofile(tiny / "tiny.onnx.data")  # the .onnx keeps its bytes: it holds offsets, not values
    assert build(tiny)[1] == {"import:tiny", "compile:tiny@cpu"}  # were both cached, serving the old weights
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(tiny / "build/tiny/cpu/model.so")), tvm.cpu())
    want = ort.InferenceSession(str(tiny / "tiny.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-5)


def test_two_clones_compute_identical_keys(tmp_path):
    keys = []
    for clone in ("one", "two"):
        root = tmp_path / clone
        root.mkdir()
        conv_relu(root / "tiny.onnx")
        write_recipe(root)
        run, _ = build(root)
        keys.append({node: r.key for node, r in run.results.items()})
    assert keys[0] == keys[1]


def test_an_operator_tvm_lacks_is_named_with_its_node(tmp_path):
    with_unsupported_op(tmp_path / "tiny.onnx")
    (tmp_path / "deploy.toml").write_text(textwrap.dedent(RECIPE.format(shape="[1, 1, 4, 4]", cores=1)))
    run = open_project(tmp_path / "deploy.toml").run([], Options())
    failure = run.results["import:tiny"]
    assert failure.status is Status.FAILED
    assert failure.error == "operator RandomNormalLike (node 'draw') is not supported by TVM's ONNX frontend"
    assert not (tmp_path / ".cache/actions").exists()


@pytest.mark.parametrize(
    "edit, message",
    [
        (("inputs.x", "inputs.image"), "the model has no input 'image'"),
        (
            ('dtype = "float32"', 'dtype = "int64"'),
            "input 'x' is float32 in the model, the recipe declares int64 (fix: dtype = \"float32\")",
        ),
        (
            ("shape = [1, 3, 8, 8]", "shape = [1, 3, 8]"),
            "input 'x' has rank 4 in the model, the recipe declares shape [1, 3, 8]",
        ),
    ],
)
def test_a_recipe_the_model_contradicts_is_bad_input_reported_once(tiny, edit, message):
    recipe = (tiny / "deploy.toml").read_text().replace(*edit).replace("enabled = false", "enabled = true")
    (tiny / "deploy.toml").write_text(recipe)  # with validation: reference must not report it a second time
    proc = _cli("-f", str(tiny / "deploy.toml"), cwd=tiny)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    failures = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    assert failures == [f"FAILED import:tiny: {message}; the model's inputs: x float32 [1, 3, 'h', 'w']"]
    assert "show_meta" not in proc.stdout + proc.stderr  # no TVM IR printed
    assert not (tiny / ".cache/actions").exists()


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "modelbuild", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )


# x86-and-rpi4.toml validates its Pi build on a device: tests/test_emulated_arm64_tvm.py builds it with one
SHIPPED_HERE = [
    "deploy.toml",
    *sorted(p.name for p in (REPO / "recipes/examples").glob("*.toml") if p.name != "x86-and-rpi4.toml"),
]


@pytest.mark.parametrize("recipe", SHIPPED_HERE)
def test_the_recipes_the_project_ships_build(tmp_path, recipe, classifier_store):
    path = REPO / recipe if recipe == "deploy.toml" else REPO / "recipes/examples" / recipe
    proc = _cli(
        "-f", str(path), "--cache-dir", str(classifier_store), "--build-dir", str(tmp_path / "build"), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "build/report.json").read_text())
    assert report["passed"] and all(b["passed"] for b in report["builds"])  # its own gates, on this machine
    for b in report["builds"]:
        if b["target"].startswith("cuda"):  # TVM's own GPU pipeline: no fusion figures; run where a GPU is
            from modelbuild.host.gpus import local_gpus

            assert b["fusion"] is None and b["validation"]["ran"] == bool(local_gpus()[0]), b["validation"]
            continue
        fusion, memory = b["fusion"], b["memory"]
        assert fusion["kernels"] < fusion["operators"] and fusion["traffic_ratio"] > 1
        assert memory["lower_bound_bytes"] <= memory["planned_bytes"] <= memory["naive_bytes"]
        assert re.search(
            rf"^{re.escape(b['name'])}  ops {fusion['operators']} -> kernels {fusion['kernels']}  "
            r"traffic /[\d.]+  memory [\d.]+ [kM]B -> [\d.]+ [kM]B \(bound [\d.]+ [kM]B\)$",
            proc.stdout,
            re.M,
        ), proc.stdout
    artifacts = [line.split(": ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("artifact: ")]
    libraries = [a for a in artifacts if a.endswith((".so", ".tar"))]
    assert libraries and all((tmp_path / a).stat().st_size > 10_000 for a in libraries)
    # the no-op build, in a fresh process: everything cached, and none of the heavy libraries imported
    noop = (
        "import sys; from modelbuild.cli import main; code = main(sys.argv[1:]); "
        "print('heavy:', sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'tvm', 'onnx', 'onnxruntime', "
        "'onnxslim', 'PIL', 'pydantic', 'rich'}))"
    )
    again = subprocess.run(
        [
            sys.executable,
            "-c",
            noop,
            "-f",
            str(path),
            "--cache-dir",
            str(classifier_store),
            "--build-dir",
            str(tmp_path / "build"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert re.search(r"^0 built, \d+ cached, 0 failed$", again.stdout, re.M), again.stdout
    assert "heavy: []" in again.stdout


def test_explain_ir_writes_the_ir_before_and_after_fusion_and_planning(tiny):
    build(tiny)
    proc = _cli("explain", "tiny@cpu", "--ir", cwd=tiny)
    assert proc.returncode == 0, proc.stderr
    folder = tiny / "build/tiny/cpu/ir"
    before, after, planned = (folder / n for n in ("ir_before_fusion.py", "ir_after_fusion.py", "ir_planned.py"))
    # conv2d, bias add, relu, and the transposes in and out of channels-last at the model's edges
    assert before.read_text().count("R.call_tir(") == 5
    assert after.read_text().count("R.call_tir(") == 3  # the conv with its epilogue, and the two transposes
    assert "R.builtin.alloc_tensor" in planned.read_text()


def test_fuse_false_builds_the_unfused_library(tiny):
    text = (tiny / "deploy.toml").read_text().replace('model = "tiny"', 'model = "tiny"\nfuse = false')
    (tiny / "deploy.toml").write_text(text)
    run, _ = build(tiny)
    figures = json.loads((tiny / "build/tiny/cpu/analysis.json").read_text())["fusion"]
    assert figures["kernels"] == figures["operators"] and figures["traffic_ratio"] == 1


def test_a_cuda_target_builds_the_same_kind_of_library_with_or_without_a_gpu_and_runs_where_one_is(tiny):
    from modelbuild import cuda_binaries
    from modelbuild.cli import main
    from modelbuild.host.gpus import local_gpus

    text = (tiny / "deploy.toml").read_text().replace('targets = ["cpu"]', 'targets = ["gpu"]').replace(
        "enabled = false", "enabled = true"
    ) + '\n[targets.gpu]\nkind = "cuda"\narch = "sm_80"\n'
    (tiny / "deploy.toml").write_text(text)
    assert main(["build", "-f", str(tiny / "deploy.toml")]) == 0  # not validated here passes by default
    report = json.loads((tiny / "build/report.json").read_text())["builds"][0]
    assert report["fusion"] is None  # TVM's own GPU pipeline
    # the kernels as CUDA C on every machine, with their cubin and PTX compiled here carried beside them
    library = (tiny / "build/tiny/gpu/model.so").read_bytes()
    assert b'extern "C" __global__' in library and cuda_binaries.MARKER.encode() in library
    found, no_gpu = local_gpus()
    if not found:
        assert report["validation"] == {"ran": False, "reason": no_gpu}
        return
    # on a GPU (sm_80 or newer): validated there, against onnxruntime on the CPU, and timed by the GPU's clock
    assert report["validation"]["ran"] and report["passed"], report["gates"]
    machine = report["provenance"]["machine"]
    assert machine["gpu"] == found[0].name
    assert machine["cuda_kernels"].startswith("prebuilt "), machine  # nothing compiled where it ran
    assert report["accuracy"]["y"]["cosine"] > 0.99999 and report["accuracy"]["y"]["max_abs"] < 1e-4
    assert report["latency_ms"]["median"] > 0 and report["scaling"] is None and report["roofline"] is None


def test_each_cuda_preset_carries_a_cubin_of_its_arch_and_the_ptx_newer_gpus_take(tiny):
    """What the compile stage carries in a cuda library, read back without a GPU: a cubin of the preset's
    architecture and the PTX of its virtual one, compiled by the compiler its key names, the same bytes from
    two builds; loading it compiles nothing (cuda_binaries.kernels_for)."""
    import tomllib

    import tvm

    from modelbuild import cuda_binaries
    from modelbuild.recipe.params import CompileOptions
    from modelbuild.recipe.targets import cuda_compiler
    from modelbuild.stages import compile as compile_stage

    run, _ = build(tiny)
    project = open_project(tiny / "deploy.toml")
    ir = project.store.object_path(run.results["import:tiny"].outputs["ir.json"]).read_text()
    compiler = cuda_compiler(tiny / "linkers.json")
    options = CompileOptions(fuse=True, opt_level=3, layout="auto")

    def carried(target):
        executable, _ = compile_stage._build(tvm.ir.load_json(ir), tvm.target.Target(target), options, None, compiler)
        return next(m for m in _modules(executable.mod) if m.kind == "cuda").inspect_source("cuda")

    for preset, arch in (("cuda-sm80", 80), ("cuda-sm90", 90)):
        target = tomllib.loads((REPO / f"recipes/targets/{preset}.toml").read_text())["targets"][preset]
        source = carried(target)
        prebuilt = cuda_binaries.embedded(source)
        assert prebuilt.compiler == f"{compiler['name']} {compiler['version']}" and prebuilt.arch == target["arch"]
        # an ELF for NVIDIA's GPUs (EM_CUDA, 190) whose flags name the preset's architecture
        assert prebuilt.cubin[:4] == b"\x7fELF" and int.from_bytes(prebuilt.cubin[18:20], "little") == 190, preset
        assert _cubin_arch(prebuilt.cubin) == arch, preset
        assert f".target sm_{arch}".encode() in prebuilt.ptx, preset
        assert carried(target) == source  # the same bytes from the same recipe

        def compile_here(code):
            raise AssertionError("a compiler ran at load")

        newer = (arch // 10 + 1, 0)
        assert cuda_binaries.kernels_for(source, (arch // 10, arch % 10), compile_here) == prebuilt.cubin
        assert cuda_binaries.kernels_for(source, newer, compile_here) == prebuilt.ptx + b"\0"


def _cubin_arch(cubin: bytes) -> int:
    """The SM a cubin is for, from its ELF flags: their low byte in CUDA's first ELF ABI (e_ident's ABI
    version 7), their second byte in the next (version 8)."""
    flags = int.from_bytes(cubin[48:52], "little")
    return (flags >> 8) & 0xFF if cubin[8] >= 8 else flags & 0xFF


def _modules(module):
    yield module
    for imported in module.imports:
        yield from _modules(imported)


def test_every_shipped_target_preset_builds_here_the_arm_ones_as_aarch64_objects(tiny):
    from modelbuild.cli import main

    presets = sorted((REPO / "recipes/targets").glob("*.toml"))
    names = [re.search(r"^\[targets\.([\w-]+)\]", p.read_text(), re.M).group(1) for p in presets]
    text = f"include = {json.dumps([str(p) for p in presets])}\n" + (tiny / "deploy.toml").read_text().replace(
        "[targets.cpu]", "[targets.unused]"
    ).replace('targets = ["cpu"]', f"targets = {json.dumps(names)}")
    (tiny / "deploy.toml").write_text(text)
    assert main(["build", "-f", str(tiny / "deploy.toml"), "-j", "2"]) == 0
    shipped = {"x86-avx2", "x86-avx512", "rpi4", "arm64-dotprod", "arm64-i8mm", "cuda-sm80", "cuda-sm90"}
    assert shipped | {"cuda-sm80-with-cpu"} <= set(names)
    for name in names:
        folder = tiny / "build/tiny" / name
        library = next(folder.glob("model.*"))
        assert library.stat().st_size > 1000, name
        if "arm" in name or name == "rpi4":  # no cross linker here: object files, each an AArch64 ELF
            import tarfile

            with tarfile.open(library) as tar:
                objects = [tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith(".o")]
            assert objects and all(o[:4] == b"\x7fELF" and o[18:20] == b"\xb7\x00" for o in objects), name


def test_a_linker_that_fails_is_quoted_in_one_line_and_its_version_is_part_of_the_compile_key(tiny, capsys):
    from modelbuild.cli import main
    from tests.helpers.fake_stages import fake_compiler

    cc = fake_compiler(tiny / "cross-gcc", "cross-gcc 1.0", fails="cross-gcc: error: cannot find crt1.o")
    text = (
        (tiny / "deploy.toml")
        .read_text()
        .replace('mcpu = "host"', f'mtriple = "aarch64-linux-gnu"\nmcpu = "cortex-a72"\ncross-compiler = "{cc}"')
    )
    (tiny / "deploy.toml").write_text(text)
    assert main(["build", "-f", str(tiny / "deploy.toml")]) == 3
    assert f"linking model.so with {cc} failed: cross-gcc: error: cannot find crt1.o" in capsys.readouterr().out
    keys = []
    for version in ("cross-gcc 1.0", "cross-gcc 2.0"):
        fake_compiler(cc, version)
        plan = open_project(tiny / "deploy.toml").plan
        keys.append({n.id: n.params.get("linker") for n in plan.nodes.values()})
    assert (
        keys[0]["compile:tiny@cpu"]["version"] == "cross-gcc 1.0"
        and keys[1]["compile:tiny@cpu"]["version"] == "cross-gcc 2.0"
    )
    assert keys[0]["import:tiny"] is None


def test_a_fully_cached_build_imports_neither_tvm_nor_onnxruntime(tiny):
    build(tiny)
    code = (
        "import sys; from modelbuild.cli import main; rc = main(['-f', 'deploy.toml']); "
        "heavy = [m for m in ('tvm', 'tvm_ffi', 'onnxruntime', 'onnx', 'onnxslim', 'numpy') if m in sys.modules]; "
        "print('HEAVY', heavy); sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tiny, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "0 built, 2 cached, 0 failed" in proc.stdout
    assert "HEAVY []" in proc.stdout
