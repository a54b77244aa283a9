"""Unrolled LSTM and GRU layers against onnxruntime's own recurrent kernels, on the shapes models use.

Each layer is a one-node ONNX model with random weights, built by modelbuild's CLI untuned (the import stage
unrolls it, frontend/recurrent.py), then timed against onnxruntime running the original node, in
alternating blocks of runs with the same thread count (zoo.alternate). Prints the medians and the ratio per
layer and the geometric mean. Goal (issue 22): no layer above 2x onnxruntime.

Usage: python bench/recurrent.py [--threads 2] [--seconds 2]
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import alternate  # a sibling script: one way to time two runtimes side by side

# name -> (op, direction, steps, batch, features, hidden): a streaming VAD's one-step state update (silero),
# a CRNN text recogniser's bidirectional sequence, a keyword spotter's GRU, a long single-direction stream
LAYERS = {
    "vad_step": ("LSTM", "forward", 1, 1, 128, 128),
    "crnn_bilstm": ("LSTM", "bidirectional", 40, 1, 256, 256),
    "kws_gru": ("GRU", "forward", 49, 1, 40, 64),
    "stream_lstm": ("LSTM", "forward", 100, 1, 64, 128),
}


def layer_model(path: Path, op: str, direction: str, steps: int, batch: int, features: int, hidden: int) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    dirs, gates = (2 if direction == "bidirectional" else 1), (4 if op == "LSTM" else 3)
    weights = [
        numpy_helper.from_array((rng.standard_normal(shape) / math.sqrt(hidden)).astype(np.float32), name)
        for name, shape in (
            ("W", (dirs, gates * hidden, features)),
            ("R", (dirs, gates * hidden, hidden)),
            ("B", (dirs, 2 * gates * hidden)),
        )
    ]
    node = helper.make_node(op, ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=hidden, direction=direction)
    graph = helper.make_graph(
        [node],
        op,
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [steps, batch, features])],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, [steps, dirs, batch, hidden]),
            helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [dirs, batch, hidden]),
        ],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.save(model, str(path))


def build(root: Path, threads: int) -> None:
    lines = []
    for name, spec in LAYERS.items():
        layer_model(root / f"{name}.onnx", *spec)
        lines += [f"[models.{name}]", f'path = "{root / name}.onnx"', ""]
    lines += [
        "[targets.cpu]",
        'kind = "llvm"',
        'mcpu = "host"',
        f"num-cores = {threads}",
        "",
        "[validation]",
        "enabled = false",
        "",
    ]
    lines += [line for name in LAYERS for line in ("[[builds]]", f'model = "{name}"', 'targets = ["cpu"]', "")]
    (root / "deploy.toml").write_text("\n".join(lines))
    proc = subprocess.run(
        [sys.executable, "-m", "modelbuild", "-f", str(root / "deploy.toml")],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stdout + proc.stderr)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    import onnxruntime as ort
    import tvm
    from tvm import relax

    with tempfile.TemporaryDirectory(prefix="modelbuild-recurrent-") as tmp:
        root = Path(tmp)
        print(f"building {len(LAYERS)} layers untuned ...", flush=True)
        build(root, args.threads)
        print(f"\n{args.threads} threads each; medians of alternating blocks of runs\n")
        print(
            "| layer | op | steps x batch x features -> hidden | onnxruntime ms | modelbuild ms | ratio "
            "| max abs diff |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- |")
        ratios = []
        for name, (op, direction, steps, batch, features, hidden) in LAYERS.items():
            options = ort.SessionOptions()
            options.intra_op_num_threads = args.threads
            session = ort.InferenceSession(str(root / f"{name}.onnx"), options, providers=["CPUExecutionProvider"])
            x = np.random.default_rng(1).standard_normal((steps, batch, features)).astype(np.float32)
            vm = relax.VirtualMachine(tvm.runtime.load_module(str(root / f"build/{name}/cpu/model.so")), tvm.cpu())
            xt = tvm.runtime.tensor(x)
            ours, theirs = vm["main"](xt), session.run(None, {"X": x})
            diff = max(float(np.abs(a.numpy() - b).max()) for a, b in zip(ours, theirs))
            medians = alternate(
                {"onnxruntime": lambda: session.run(None, {"X": x}), "modelbuild": lambda: vm["main"](xt)}, args.seconds
            )
            ratio = medians["modelbuild"] / medians["onnxruntime"]
            ratios.append(ratio)
            print(
                f"| {name} | {op} {direction} | {steps} x {batch} x {features} -> {hidden} | "
                f"{medians['onnxruntime'] * 1e3:.3f} | {medians['modelbuild'] * 1e3:.3f} | {ratio:.2f}x | {diff:.1e} |",
                flush=True,
            )
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\ngeometric mean {geomean:.2f}x onnxruntime; worst {max(ratios):.2f}x (goal: none above 2x)")


if __name__ == "__main__":
    main()
