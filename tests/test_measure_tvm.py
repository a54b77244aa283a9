"""Kernels timed alone, as the roofline and bench/kernel_times.py time them, on arguments they can run on."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np


def test_a_kernel_dividing_by_a_constant_is_timed_without_dividing_by_zero(tmp_path):
    """YOLOv10's labels are `pairs % 80` and its rows `pairs // 80`: the 80 is its kernel's argument, and
    zeros there killed the process with SIGFPE (timed in a child process, so that shows as a failure)."""
    import tvm
    from tvm import relax

    from modelbuild.compiler import lowering

    bb = relax.BlockBuilder()
    pairs = relax.Var("pairs", relax.TensorType((1, 100), "int64"))
    with bb.function("main", [pairs]):
        with bb.dataflow():
            classes = relax.const(np.array([80], np.int64), "int64")
            rows = bb.emit(relax.op.floor_divide(pairs, classes))
            out = bb.emit_output(relax.op.add(rows, relax.op.floor_mod(pairs, classes)))
        bb.emit_func_output(out)
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(bb.get(), target, fuse=True, layout=None, schedule=True)
        executable = tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))
    library = tmp_path / "model.so"
    executable.export_library(str(library))
    _, args = lowering.kernel_flops_and_args(phases.fused)
    kernels = [{"kernel": name, "args": shapes} for name, shapes in args.items()]
    assert any(len(shapes) == 3 and shapes[1] == [[1], "int64"] for shapes in args.values())  # the 80, passed
    timing = (
        "import json, sys\nimport tvm\nfrom modelbuild.measurement.measure import time_kernel\n"
        "module = tvm.runtime.load_module(sys.argv[1]).imports[0]\n"
        "print(json.dumps([time_kernel(module, k) for k in json.loads(sys.argv[2])]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", timing, str(library), json.dumps(kernels)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert all(seconds and seconds > 0 for seconds in json.loads(done.stdout))
