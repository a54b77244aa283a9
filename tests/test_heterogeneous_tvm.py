"""A build split between a GPU and the CPU (devices = ["cuda", "llvm"]), built and checked without a GPU: the
placement the report shows, the library's two device modules, and the split's arithmetic, run on two CPU
devices against onnxruntime."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelbuild.cli import main
from modelbuild.engine.scheduler import Options
from modelbuild.pipeline.project import open_project

pytestmark = pytest.mark.tvm

RECIPE = """
[models.scorer]
path = "scorer.onnx"
inputs.x = { shape = [256, 1024], dtype = "float32" }

[models.rows]
path = "rows.onnx"
inputs.x = { shape = [256, 1024], dtype = "float32" }

[targets.split]
kind = "cuda"
arch = "sm_80"
devices = ["cuda", "llvm"]

[validation]
enabled = false  # the split runs on a GPU, and the rows' count varies with the inputs

[[builds]]
model = "scorer"
targets = ["split"]

[[builds]]
model = "rows"
targets = ["split"]
"""


def scorer(path):
    """x[256, 1024] -> MatMul [256, 512] -> Relu -> TopK 5 -> values * 2: a dense layer for the GPU and a TopK,
    which TVM lowers to its CPU library."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="dense"),
        helper.make_node("Relu", ["m"], ["r"], name="relu"),
        helper.make_node("TopK", ["r", "k"], ["values", "indices"], name="best", axis=-1),
        helper.make_node("Mul", ["values", "two"], ["y"], name="scale"),
    ]
    graph = helper.make_graph(
        nodes,
        "scorer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 5])],
        initializer=[
            numpy_helper.from_array(rng.standard_normal((1024, 1024)).astype(np.float32), "w"),
            numpy_helper.from_array(np.array([5], np.int64), "k"),
            numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


def rows(path):
    """x[256, 1024] -> MatMul [256, 512] -> Relu -> ReduceMax per row -> > 40 -> NonZero: which rows score
    high. TVM runs NonZero in its CPU runtime, whatever the target."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="dense"),
        helper.make_node("Relu", ["m"], ["r"], name="relu"),
        helper.make_node("ReduceMax", ["r"], ["best"], name="best", axes=[1], keepdims=0),
        helper.make_node("Greater", ["best", "limit"], ["kept"], name="keep"),
        helper.make_node("NonZero", ["kept"], ["rows"], name="rows"),
    ]
    graph = helper.make_graph(
        nodes,
        "rows",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 1024])],
        [helper.make_tensor_value_info("rows", TensorProto.INT64, [1, None])],
        initializer=[
            numpy_helper.from_array(rng.standard_normal((1024, 1024)).astype(np.float32), "w"),
            numpy_helper.from_array(np.array(40.0, np.float32), "limit"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


@pytest.fixture
def split(tmp_path):
    scorer(tmp_path / "scorer.onnx")
    rows(tmp_path / "rows.onnx")
    (tmp_path / "deploy.toml").write_text(RECIPE)
    return tmp_path


def test_a_split_build_runs_the_heavy_work_on_the_gpu_and_what_it_lacks_on_the_cpu_and_says_why(split):
    from modelbuild import cuda_binaries, manifest

    assert main(["build", "-f", str(split / "deploy.toml")]) == 0
    builds = {b["name"]: b for b in json.loads((split / "build/report.json").read_text())["builds"]}
    placement = builds["rows@split"]["placement"]
    assert placement["by_op"]["cuda"] == {"relax.greater": 1, "relax.matmul": 1, "relax.max": 1, "relax.nn.relu": 1}
    why = "no GPU kernel: TVM runs relax.nonzero as a call into its CPU runtime"
    assert [(c["op"], c["why"]) for c in placement["on_cpu"]] == [("relax.nonzero", why)]
    # the input goes up, the 256 row flags come down: once each
    assert placement["copies"] == 2 and placement["bytes_copied"] == 256 * 1024 * 4 + 256
    # TVM's GPU pipeline has a TopK, and the cost model keeps the scorer on the GPU, its input copied up once
    scorer_placement = builds["scorer@split"]["placement"]
    assert scorer_placement["operators"]["llvm"] == 0 and scorer_placement["copies"] == 1
    assert scorer_placement["bytes_copied"] == 256 * 1024 * 4
    markdown = (split / "build/report.md").read_text()
    assert "Placement: 4 operators on the GPU, 1 on the CPU; 2 copies between them" in markdown
    assert f"| relax.nonzero | {why} |" in markdown
    folder = split / "build/rows/split"
    assert manifest.read(folder).devices == ("cuda", "llvm")
    library = (folder / "model.so").read_bytes()
    assert b'extern "C" __global__' in library and cuda_binaries.MARKER.encode() in library  # the GPU's kernels


def test_the_split_computes_what_onnxruntime_computes_run_on_two_cpu_devices(split):
    """The same placement and copies, with a second CPU device standing for the GPU: what a GPU machine
    would run, less the GPU's kernels."""
    import onnxruntime as ort
    import tvm
    from tvm import relax

    from modelbuild.gpu import heterogeneous
    from modelbuild.gpu.placement import CPU, GPU, place

    project = open_project(split / "deploy.toml")
    run = project.run(["scorer@split"], Options())
    ir = project.store.object_path(run.results["import:scorer"].outputs["ir.json"])
    module = tvm.ir.load_json(ir.read_text())
    gpu = {"kind": "cuda", "arch": "sm_80"}
    # the TopK kept off the GPU, as an operator without a GPU kernel would be: copies both ways
    operators = [
        replace(o, gpu_kernel=False, why_cpu="kept on the CPU") if o.op == "relax.topk" else o
        for o in heterogeneous.find_operators(module, gpu)
    ]
    placement = place(operators)
    assert placement.devices[:3] == (GPU, GPU, CPU) and len(placement.copies) == 2
    two_cpus = {
        GPU: relax.VDevice(tvm.target.Target("llvm"), 1, "global"),
        CPU: relax.VDevice(tvm.target.Target("llvm"), 0, "global"),
    }
    placed = heterogeneous.placed_module(module, gpu, operators, placement, vdevices=two_cpus)
    devices = [tvm.cpu(1) if device == GPU else tvm.cpu(0) for device in placement.vm_devices]
    vm = relax.VirtualMachine(tvm.compile(placed, target="llvm"), devices)
    x = np.random.default_rng(1).standard_normal((256, 1024)).astype(np.float32)
    ours = vm["main"](tvm.runtime.tensor(x)).numpy()
    theirs = ort.InferenceSession(str(split / "scorer.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(ours, theirs[0], rtol=1e-4, atol=1e-3)
