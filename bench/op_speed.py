"""One ONNX operator at a time, at a realistic size, through modelbuild's import and lowering, against
onnxruntime: where a model nobody tuned for will fall off a cliff before any model shows it.

The zoo (zoo.py) measures whole models; a cliff in an operator only one user's model has (TVM legalising a
function to a libm call per element, a copy vectorised as gathers) shows here first: it found
LogSoftmax at 20x onnxruntime's time, opset-20 Gelu 12x, an NCHW -> NHWC Transpose 3.9x, Sin 1.8x.
Each case is a one-node model (float32 inputs drawn from a normal distribution, positive where the
operator needs it) compiled for this host with the default schedule; both runtimes get 2 threads and are
timed in alternating blocks (zoo.alternate). A single operator in NCHW carries the layout conversions a
real model's channels-last chain does not (pools, transposed convs): read those against the zoo.

Usage: python bench/op_speed.py [NAME ...] [--seconds S] [--list]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # modelbuild, when run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
import zoo  # noqa: E402  (its alternate(): blocks of runs, a pause between)

MAP = [1, 64, 128, 128]  # an NCHW activation of a million floats
ROWS = [1024, 1000]  # classifier rows


def cases() -> dict:
    """name -> (nodes, inputs {name: shape}, initializers {name: array}, opset, positive inputs)."""
    import numpy as np
    from onnx import helper

    rng = np.random.default_rng(1)
    node = helper.make_node

    def unary(op, shape=MAP, positive=False, opset=18, **attributes):
        return [node(op, ["x"], ["y"], **attributes)], {"x": shape}, {}, opset, positive

    return {
        "Exp": unary("Exp"),
        "Sigmoid": unary("Sigmoid"),
        "Tanh": unary("Tanh"),
        "Erf": unary("Erf"),
        "Log": unary("Log", positive=True),
        "Sin": unary("Sin"),
        "Cos": unary("Cos"),
        "Softplus": unary("Softplus"),
        "Mish": unary("Mish"),
        "Gelu": unary("Gelu", opset=20),
        "HardSwish": unary("HardSwish"),
        "Elu": unary("Elu"),
        "Atan": unary("Atan"),
        "Round": unary("Round"),
        "Sinh": unary("Sinh"),  # TVM could not compile it for a CPU at all
        # a YOLO head's class scores at 320 pixels: 2100 anchors, a row no 16-lane vector divides
        "Sigmoid_anchors": unary("Sigmoid", [1, 80, 2100]),
        "Softmax_anchors": unary("Softmax", [1, 80, 2100], axis=-1),
        "Softmax": unary("Softmax", ROWS, axis=-1),
        "LogSoftmax": unary("LogSoftmax", ROWS, axis=-1),
        "Softmax_attention": unary("Softmax", [1, 12, 197, 197], axis=-1),
        "LayerNorm": (
            [node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)],
            {"x": [1, 4096, 320]},
            {"s": np.ones(320, np.float32), "b": np.zeros(320, np.float32)},
            18,
            False,
        ),
        "Transpose_NCHW_NHWC": unary("Transpose", perm=[0, 2, 3, 1]),
        "Transpose_heads": unary("Transpose", [1, 197, 12, 64], perm=[0, 2, 1, 3]),
        "ReduceMean_channels": ([node("ReduceMean", ["x", "a"], ["y"])], {"x": MAP}, {"a": np.array([1])}, 18, False),
        "MatMul_QK": (
            [node("MatMul", ["x", "k"], ["y"])],
            {"x": [1, 12, 197, 64], "k": [1, 12, 64, 197]},
            {},
            18,
            False,
        ),
        # the speed fuzzer's worst convs: depthwise over many channels at small maps, over few at large ones,
        # dilated; a pointwise conv from few input channels over a large map
        **{
            f"Conv_depthwise_{f'{k}x{k}_' if k != 3 else ''}{c}x{h}x{w}{f'_d{d}' if d > 1 else ''}"
            f"{f'_s{s}' if s > 1 else ''}": (
                [
                    node(
                        "Conv",
                        ["x", "w"],
                        ["y"],
                        group=c,
                        kernel_shape=[k, k],
                        pads=[d * (k // 2)] * 4,
                        dilations=[d, d],
                        strides=[s, s],
                    )
                ],
                {"x": [1, c, h, w]},
                {"w": (rng.standard_normal((c, 1, k, k)) / k).astype(np.float32)},
                18,
                False,
            )
            for c, h, w, d, k, s in (
                (568, 12, 14, 1, 3, 1),
                (144, 28, 28, 2, 3, 1),
                (24, 101, 101, 1, 3, 1),
                (96, 30, 30, 1, 3, 1),
                # large kernels over small maps (MobileNetV3's and EfficientNet's 5x5, ConvNeXt's 7x7)
                (280, 10, 10, 1, 7, 1),
                (328, 16, 14, 1, 5, 1),
                (56, 37, 37, 1, 5, 1),
                (32, 62, 62, 1, 3, 2),
            )
        },
        # dense convs from little work per element of their input and output (which a single conv converts
        # to channels-last and back) to much
        **{
            f"Conv_{k}x{k}_{cin}_to_{cout}_{h}x{w}": (
                [node("Conv", ["x", "w"], ["y"], kernel_shape=[k, k], pads=[k // 2] * 4)],
                {"x": [1, cin, h, w]},
                {"w": (rng.standard_normal((cout, cin, k, k)) / (3 * k)).astype(np.float32)},
                18,
                False,
            )
            for k, cin, cout, h, w in (
                (1, 11, 24, 224, 174),
                (1, 32, 32, 112, 112),
                (1, 64, 64, 56, 56),
                (1, 128, 128, 28, 28),
                (3, 16, 16, 112, 112),
                (1, 256, 256, 14, 14),
                (3, 32, 32, 56, 56),
                (3, 64, 64, 28, 28),
            )
        },
        # grouped convs whose groups are thinner than a vector and merge into none, so they stay NCHW (4 groups
        # of 6 channels over rows of 94 columns, stride 2 over 56; 8 groups of 14 that merge only at 8 times the
        # work), and ones that merge (32 groups of 8)
        **{
            f"Conv_{k}x{k}_{cin}_to_{cout}_g{g}_{h}x{w}{f'_s{s}' if s > 1 else ''}": (
                [node("Conv", ["x", "w"], ["y"], group=g, kernel_shape=[k, k], pads=[k // 2] * 4, strides=[s, s])],
                {"x": [1, cin, h, w]},
                {"w": (rng.standard_normal((cout, cin // g, k, k)) / (3 * k)).astype(np.float32)},
                18,
                False,
            )
            for k, cin, cout, g, h, w, s in (
                (3, 24, 24, 4, 124, 94, 1),
                (3, 12, 20, 2, 96, 96, 1),
                (3, 48, 112, 8, 42, 42, 1),
                (3, 32, 26, 2, 106, 106, 2),
                (3, 40, 40, 4, 56, 56, 2),
                (5, 42, 42, 6, 61, 61, 2),
                (3, 256, 256, 32, 28, 28, 1),
            )
        },
        # channels-last pointwise convs as the matmuls they are (passes/pointwise_matmul.py): 256 -> 256 at
        # 57 x 57 with its bias and ReLU, and at 14 x 14, where the weights outnumber the pixels
        "MatMul_pixels_3249x256_by_256": (
            [node("MatMul", ["x", "w"], ["m"]), node("Add", ["m", "b"], ["a"]), node("Relu", ["a"], ["y"])],
            {"x": [3249, 256]},
            {
                "w": (rng.standard_normal((256, 256)) / 3).astype(np.float32),
                "b": rng.standard_normal(256).astype(np.float32),
            },
            18,
            False,
        ),
        "MatMul_pixels_196x256_by_256": (
            [node("MatMul", ["x", "w"], ["y"])],
            {"x": [196, 256]},
            {"w": (rng.standard_normal((256, 256)) / 3).astype(np.float32)},
            18,
            False,
        ),
        # token x channel matmuls by constant weights, as transformers' projections and MLPs compute them
        **{
            f"MatMul_{m}x{k}_by_{n}": (
                [node("MatMul", ["x", "w"], ["y"])],
                {"x": [1, m, k]},
                {"w": (rng.standard_normal((k, n)) / 3).astype(np.float32)},
                18,
                False,
            )
            for m, k, n in ((128, 256, 1024), (128, 1024, 256), (1500, 384, 1536), (197, 768, 192))
        },
        "MatMul_computed_column": (  # an attention-pooling score: rows by a column the model computed
            [node("MatMul", ["x", "v"], ["y"])],
            {"x": [294, 3210], "v": [3210, 1]},
            {},
            18,
            False,
        ),
        # matmuls by a computed right operand whose columns make no whole vectors, read by a few rows
        **{
            f"MatMul_computed_{'x'.join(map(str, left))}_by_{'x'.join(map(str, right))}": (
                [node("MatMul", ["x", "v"], ["y"])],
                {"x": left, "v": right},
                {},
                18,
                False,
            )
            for left, right in (([15, 546], [546, 2251]), ([1, 546], [546, 2251]), ([16, 4, 190], [16, 190, 402]))
        },
        "MatMul_anchors": (
            [node("MatMul", ["x", "w"], ["y"])],
            {"x": [1, 32, 64]},  # a prototype-mask head
            {"w": rng.standard_normal((64, 2100)).astype(np.float32)},
            18,
            False,
        ),
        "MatMul_linear": (
            [node("MatMul", ["x", "w"], ["y"])],
            {"x": [1, 197, 192]},
            {"w": rng.standard_normal((192, 768)).astype(np.float32)},
            18,
            False,
        ),
        "ScatterND": (
            [node("ScatterND", ["x", "i", "u"], ["y"])],
            {"x": [1000, 256]},
            {
                "i": rng.permutation(1000)[:100].reshape(100, 1).astype(np.int64),
                "u": rng.standard_normal((100, 256)).astype(np.float32),
            },
            18,
            False,
        ),
        "TopK": ([node("TopK", ["x", "k"], ["y", "i"], axis=-1)], {"x": [1, 25200]}, {"k": np.array([100])}, 18, False),
        # ReflectionPad2d / ReplicationPad2d before a style-transfer or super-resolution conv
        **{
            f"Pad_{mode}": (
                [node("Pad", ["x", "pads"], ["y"], mode=mode)],
                {"x": MAP},
                {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1])},
                18,
                False,
            )
            for mode in ("reflect", "edge")
        },
        # a spatial transformer's / optical flow's warp: bilinear sampling at a grid of the map's own size
        "GridSample": (
            [node("GridSample", ["x", "grid"], ["y"], align_corners=0)],
            {"x": [1, 64, 64, 64]},
            {"grid": rng.uniform(-1, 1, (1, 64, 64, 2)).astype(np.float32)},
            18,
            False,
        ),
        # a deformable detector's DCNv2 layer (torchvision's deform_conv2d): 64 -> 64 channels, 3x3 taps
        "DeformConv": (
            [node("DeformConv", ["x", "w", "offset", "b", "mask"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
            {"x": [1, 64, 64, 64], "offset": [1, 18, 64, 64], "mask": [1, 9, 64, 64]},
            {"w": (rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32), "b": np.zeros(64, np.float32)},
            19,
            False,
        ),
        # a two-stage detector's pooling: 100 boxes of a 56x56 map to 7x7
        "RoiAlign": (
            [
                node(
                    "RoiAlign",
                    ["x", "rois", "batch"],
                    ["y"],
                    output_height=7,
                    output_width=7,
                    sampling_ratio=2,
                    spatial_scale=0.25,
                )
            ],
            {"x": [1, 256, 56, 56]},
            {
                "rois": np.sort(rng.uniform(0, 220, (100, 2, 2)), axis=1).reshape(100, 4).astype(np.float32),
                "batch": np.zeros(100, np.int64),
            },
            16,
            False,
        ),  # rows x1, y1, x2, y2
        # Whisper's front end as torch.stft exports it: 400-sample Hann frames every 160 of a second of audio
        "STFT": (
            [node("STFT", ["x", "step", "window", "length"], ["y"])],
            {"x": [1, 16000, 1]},
            {"step": np.array(160), "window": np.hanning(400).astype(np.float32), "length": np.array(400)},
            17,
            False,
        ),
        # torch.fft.rfft over 64 rows of 512 (a DFT by matmuls: O(N^2) where onnxruntime's FFT is O(N log N))
        "DFT_rfft": (
            [node("DFT", ["x", "", "axis"], ["y"], onesided=1)],
            {"x": [1, 64, 512, 1]},
            {"axis": np.array(2)},
            20,
            False,
        ),
    }


def model(name: str, nodes, inputs: dict, initializers: dict, opset: int):
    from onnx import TensorProto, helper, numpy_helper

    outputs = list(dict.fromkeys(out for n in nodes for out in n.output))
    types = {o: TensorProto.INT64 if o == "i" else TensorProto.FLOAT for o in outputs}  # "i": TopK's indices
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, types[o], None) for o in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in initializers.items()],
    )
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    built.ir_version = 10
    return built


def compiled(onnx_model, inputs: dict, threads: int, layout: str = "auto"):
    """main() of the model imported and lowered as the compile stage does, for this host."""
    import tvm
    from tvm import relax

    from modelbuild.compiler import lowering
    from modelbuild.recipe import targets
    from modelbuild.stages import onnx_import

    module = onnx_import.to_relax(onnx_model, {k: {"shape": v, "dtype": "float32"} for k, v in inputs.items()})
    host = targets.resolve_target(
        {"kind": "llvm", "mcpu": "host", "num-cores": threads}, zoo.CACHE / "host-cpu.json"
    )  # as a recipe's mcpu = "host" builds
    target = tvm.target.Target(targets.tvm_target(host))
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(module, target, fuse=True, layout=layout, schedule=True)
        executable = tvm.compile(phases.planned, target=target, relax_pipeline=lowering.finish_passes(target))
    return relax.VirtualMachine(executable, tvm.cpu())["main"]


def measure(name: str, case, threads: int, seconds: float, layout: str = "auto") -> str:
    import numpy as np
    import onnxruntime as ort
    import tvm

    nodes, inputs, initializers, opset, positive = case
    onnx_model = model(name, nodes, inputs, initializers, opset)
    rng = np.random.default_rng(0)
    feed = {k: rng.standard_normal(v).astype(np.float32) for k, v in inputs.items()}
    if positive:
        feed = {k: np.abs(v) + np.float32(0.1) for k, v in feed.items()}
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(onnx_model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    expected = session.run(None, feed)
    try:
        main = compiled(onnx_model, inputs, threads, layout)
    except Exception as err:  # a refusal is a finding here, not a crash of the benchmark
        return f"| {name} | failed: {str(err).strip().splitlines()[-1][:100]} | | | |"
    tensors = [tvm.runtime.tensor(feed[k]) for k in inputs]
    got = main(*tensors)
    got = [got] if hasattr(got, "numpy") else list(got)
    error = max(float(np.abs(a.numpy().astype("float64") - b).max()) if b.size else 0.0 for a, b in zip(got, expected))
    medians = zoo.alternate(
        {"modelbuild": lambda: main(*tensors), "onnxruntime": lambda: session.run(None, feed)}, seconds
    )
    ratio = medians["modelbuild"] / medians["onnxruntime"]
    return (
        f"| {name} | {medians['modelbuild'] * 1e3:.3f} | {medians['onnxruntime'] * 1e3:.3f} | {ratio:.2f}x"
        f"{' <<' if ratio > 1.5 else ''} | {error:.1e} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="cases to run (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=1.0, help="timing per case and runtime")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--layout", default="auto", choices=["auto", "NCHW", "NHWC"], help="as a recipe's layout")
    args = parser.parse_args()
    table = cases()
    if args.list:
        print("\n".join(table))
        return
    unknown = [n for n in args.names if n not in table]
    if unknown:
        raise SystemExit(f"op_speed: no case {', '.join(unknown)}; --list shows them")
    os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))
    print(f"{args.threads} threads each; medians of alternating blocks; `<<` over 1.5x onnxruntime\n")
    print("| operator | modelbuild ms | onnxruntime ms | ratio | max abs error |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.names or table:
        print(measure(name, table[name], args.threads, args.seconds, args.layout), flush=True)


if __name__ == "__main__":
    main()
