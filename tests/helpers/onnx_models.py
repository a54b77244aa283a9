"""Tiny ONNX models the tests make, with known structure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

STEPS, BATCH, FEATURES, HIDDEN = 5, 3, 4, 6  # the recurrent models' sizes
LENGTHS = np.array([5, 2, 4], np.int32)  # the second and third samples stop early


def conv_relu(path: Path, *, channels: int = 4, seed: int = 0, doc: str = "", opset: int = 13) -> Path:
    """x[1,3,H,W] -> Conv(3x3, pad 1) + bias -> Relu -> y, with a dynamic H and W as exporters write them."""
    rng = np.random.default_rng(seed)
    weight = numpy_helper.from_array(rng.standard_normal((channels, 3, 3, 3)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv0", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu0"),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, "h", "w"])],
        initializer=[weight, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], doc_string=doc)
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def two_convs(path: Path, *, channels: int = 16, seed: int = 0, same_upper: bool = False) -> Path:
    """x[1,3,H,W] -> Conv -> Relu -> Conv -> y: enough multiply-adds that TVM's float sums round differently
    from onnxruntime's, so an exact-equality gate must fail. With `same_upper`, the second conv is 2x2 with
    auto_pad = SAME_UPPER (one pixel of padding, after), as in PP-HGNet's stem."""
    rng = np.random.default_rng(seed)
    second = 2 if same_upper else 3
    w1 = numpy_helper.from_array(rng.standard_normal((channels, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((channels, channels, second, second)).astype(np.float32), "w2")
    padding = {"auto_pad": "SAME_UPPER"} if same_upper else {"pads": [1, 1, 1, 1]}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2", **padding),
    ]
    graph = helper.make_graph(
        nodes,
        "two_convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, "h", "w"])],
        initializer=[w1, w2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def two_conv1ds(path: Path, *, channels: int = 16, seed: int = 0) -> Path:
    """x[1,8,T] -> Conv (5 taps) -> Relu -> Conv (3 taps, dilated 2, stride 2) -> y: the 1-D convs of a speech
    model (a TDNN's dilations), for the integer rewrite."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.standard_normal((channels, 8, 5)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((channels, channels, 3)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2", pads=[2, 2], dilations=[2], strides=[2]),
    ]
    graph = helper.make_graph(
        nodes,
        "two_conv1ds",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "t"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, "t2"])],
        initializer=[w1, w2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def two_in_two_out(path: Path, names: tuple[str, str, str, str] = ("zeta", "alpha", "z_out", "a_out")) -> Path:
    """Inputs zeta, alpha and outputs z_out [1, 4], a_out [1, 1], each listed against alphabetical order:
    z_out = zeta - alpha tells swapped inputs apart although their shapes agree. `names` renames them, in
    that order (as exporters name tensors: "input:0", "input.1")."""
    zeta, alpha, z_out, a_out = names
    nodes = [
        helper.make_node("Sub", [zeta, alpha], [z_out], name="sub"),
        helper.make_node("ReduceSum", [zeta], [a_out], name="sum", keepdims=1),
    ]
    graph = helper.make_graph(
        nodes,
        "two_in_two_out",
        [
            helper.make_tensor_value_info(zeta, TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info(alpha, TensorProto.FLOAT, [1, 4]),
        ],
        [
            helper.make_tensor_value_info(z_out, TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info(a_out, TensorProto.FLOAT, [1, 1]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def with_unsupported_op(path: Path) -> Path:
    """A model whose only node is an operator TVM's ONNX frontend lacks and the import does not write out
    (RandomNormalLike: no generator matches onnxruntime's)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])
    node = helper.make_node("RandomNormalLike", ["x"], ["y"], name="draw")
    graph = helper.make_graph([node], "unsupported", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def quantized_qdq(
    source: Path,
    path: Path,
    shape: list[int],
    *,
    samples: int = 8,
    activations: str = "QInt8",
    quant_format: str = "QDQ",
    symmetric: bool = True,
    reduce_range: bool = False,
) -> Path:
    """onnxruntime's static quantization of `source` (symmetric int8, per-channel weights), calibrated on
    seeded random inputs of `shape`: QDQ, or with quant_format="QOperator" QLinearConv / QLinearMatMul;
    symmetric=False gives affine activations (a zero point from the calibrated range); reduce_range=True
    7-bit weights."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    model = onnx.load(str(source))
    for dim, value in zip(model.graph.input[0].type.tensor_type.shape.dim, shape):
        dim.ClearField("dim_param")
        dim.dim_value = value
    fixed = path.with_suffix(".fixed.onnx")
    onnx.save(model, str(fixed))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter(
                [{"x": np.random.default_rng(i).standard_normal(shape).astype(np.float32)} for i in range(samples)]
            )

        def get_next(self):
            return next(self.batches, None)

    quantize_static(
        str(fixed),
        str(path),
        Reader(),
        quant_format=QuantFormat[quant_format],
        per_channel=True,
        reduce_range=reduce_range,
        activation_type=QuantType[activations],
        weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax,
        extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True},
    )
    return path


def dynamically_quantized(source: Path, path: Path) -> Path:
    """onnxruntime's dynamic quantization of `source`, as Hugging Face's model_quantized.onnx files are made:
    int8 weights, each activation quantized at run time from its own range (DynamicQuantizeLinear), Conv
    as ConvInteger and MatMul as MatMulInteger, each followed by a Cast to float and the rescale."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(source), str(path), weight_type=QuantType.QInt8)
    return path


def uneven_channels(path: Path, *, channels: int = 8, seed: int = 0) -> Path:
    """x[1,C,H,W] -> depthwise Conv + bias -> Conv + bias -> GlobalAveragePool -> y, with the input's channels
    scaled from 1 to 1000 (feed it `uneven_input`): the per-channel spread one int8 scale handles badly, and
    a pooled output that shows the mean error weight rounding leaves."""
    rng = np.random.default_rng(seed)
    initializers = [
        numpy_helper.from_array(rng.standard_normal((channels, 1, 3, 3)).astype(np.float32), "dw_w"),
        numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "dw_b"),
        numpy_helper.from_array(rng.standard_normal((channels, channels, 1, 1)).astype(np.float32), "pw_w"),
        numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "pw_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "dw_w", "dw_b"], ["d"], name="depthwise", pads=[1, 1, 1, 1], group=channels),
        helper.make_node("Conv", ["d", "pw_w", "pw_b"], ["p"], name="pointwise"),
        helper.make_node("GlobalAveragePool", ["p"], ["y"], name="pool"),
    ]
    graph = helper.make_graph(
        nodes,
        "uneven_channels",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 1, 1])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def spread_inside(path: Path, channels: int = 8) -> onnx.ModelProto:
    """uneven_channels with an even input and the spread made by the depthwise conv instead: its channel c's
    weights scaled by 1000^(c / (C - 1)). The depthwise conv reads an input one int8 scale fits; the pointwise
    conv reads channels 1 to 1000 apart, so its input rounding is nearly all the error."""
    model = onnx.load(str(uneven_channels(path, channels=channels)))
    weights = next(t for t in model.graph.initializer if t.name == "dw_w")
    scale = (1000.0 ** (np.arange(channels) / (channels - 1))).reshape(-1, 1, 1, 1)
    weights.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(weights) * scale).astype(np.float32), "dw_w"))
    return model


def uneven_input(seed: int, channels: int = 8) -> dict:
    """A sample for `uneven_channels`: positive-mean noise, channel c scaled by 1000^(c / (C - 1))."""
    rng = np.random.default_rng(seed)
    scale = (1000.0 ** (np.arange(channels) / (channels - 1))).reshape(1, -1, 1, 1)
    return {"x": ((rng.standard_normal((1, channels, 16, 16)) + 1.0) * scale).astype(np.float32)}


def quantized_without_and_with(model, samples: list[dict], step: str) -> tuple:
    """The quantize stage's QDQ results of `model` with only `step` (one of the QuantizationSpec switches,
    "smoothing" or "bias_correction") in play: off, then on."""
    from modelbuild.recipe.schema import QuantizationSpec
    from modelbuild.stages.quantize import quantized

    spec = QuantizationSpec(smoothing=False, bias_correction=False)
    return quantized(model, samples, spec), quantized(model, samples, spec.model_copy(update={step: True}))


def branch_on_rate(path: Path, *, else_repeats: int = 1) -> Path:
    """x[1,4] float and a scalar int64 `sr`: y = x * 2 when sr == 16000, else x * 3, through an `If`, as
    streaming audio models select their path by sample rate. With else_repeats > 1 the else branch returns
    x * 3 tiled that many times along the width: branches of different shapes, which no select can join."""

    def branch(name: str, factor: float, repeats: int = 1):
        constant = helper.make_node(
            "Constant", [], [f"{name}_k"], value=numpy_helper.from_array(np.array(factor, np.float32), f"{name}_value")
        )
        scale = helper.make_node(
            "Mul", ["x", f"{name}_k"], [f"{name}_y" if repeats == 1 else f"{name}_one"], name=f"{name}_mul"
        )
        nodes = [constant, scale]
        if repeats > 1:
            tiles = helper.make_node(
                "Constant",
                [],
                [f"{name}_tiles"],
                value=numpy_helper.from_array(np.array([1, repeats], np.int64), "tiles"),
            )
            nodes += [tiles, helper.make_node("Tile", [f"{name}_one", f"{name}_tiles"], [f"{name}_y"])]
        return helper.make_graph(
            nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [1, 4 * repeats])]
        )

    rate = numpy_helper.from_array(np.array(16000, np.int64), "rate16k")
    nodes = [
        helper.make_node("Equal", ["sr", "rate16k"], ["is16k"], name="is16k"),
        helper.make_node(
            "If",
            ["is16k"],
            ["y"],
            name="by_rate",
            then_branch=branch("then", 2.0),
            else_branch=branch("else", 3.0, else_repeats),
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "branch_on_rate",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4 if else_repeats == 1 else "width"])],
        initializer=[rate],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def branch_on_score(path: Path, *, nested: bool = False) -> Path:
    """x[2,4] float: when the sum of x is positive, y = tanh(x @ w) + b (a second network, as openWakeWord's
    verifier runs when its detector fires), else y = x * 0.5. Both branches compute a value named `t`, one
    holds its own weights, and `score` = sum(x) comes out too. With `nested`, the first branch adds 1 more
    where max(x) > 1, through an If of its own."""
    rng = np.random.default_rng(0)

    def graph(name, nodes, output, initializer=()):
        return helper.make_graph(
            nodes,
            name,
            [],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, [2, 4])],
            initializer=list(initializer),
        )

    network = [
        helper.make_node("MatMul", ["x", "w"], ["t"]),
        helper.make_node("Tanh", ["t"], ["u"]),
        helper.make_node("Add", ["u", "b"], ["fired"]),
    ]
    if nested:
        plus_one = graph("plus_one", [helper.make_node("Add", ["fired", "one"], ["lifted"])], "lifted")
        keep = graph("keep", [helper.make_node("Identity", ["fired"], ["kept"])], "kept")
        network += [
            helper.make_node("ReduceMax", ["x"], ["peak"], keepdims=0),
            helper.make_node("Greater", ["peak", "one"], ["high"]),
            helper.make_node("If", ["high"], ["verified"], then_branch=plus_one, else_branch=keep),
        ]
    weights = [numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")]
    then_branch = graph("verify", network, "verified" if nested else "fired", weights)
    else_branch = graph("pass", [helper.make_node("Mul", ["x", "half"], ["t"])], "t")
    constants = [
        numpy_helper.from_array(np.array(value, np.float32), name)
        for name, value in (("zero", 0.0), ("half", 0.5), ("one", 1.0))
    ]
    constants.append(numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"))
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["score"], keepdims=1),
        helper.make_node("Greater", ["score", "zero"], ["positive"]),
        helper.make_node("If", ["positive"], ["y"], name="verifier", then_branch=then_branch, else_branch=else_branch),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "branch_on_score",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
            [
                helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
                helper.make_tensor_value_info("score", TensorProto.FLOAT, [1, 1]),
            ],
            initializer=constants,
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def scaled_by_scalar(path: Path) -> Path:
    """x[1,4] float times a scalar float input `s`, plus row `row` (a scalar int64, 0 to 2) of a 3-row table:
    an index beyond the table fails onnxruntime, so generated inputs must keep to the declared range."""
    table = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "table")
    nodes = [
        helper.make_node("Mul", ["x", "s"], ["scaled"], name="scale"),
        helper.make_node("Gather", ["table", "row"], ["picked"], name="pick", axis=0),
        helper.make_node("Add", ["scaled", "picked"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "scaled_by_scalar",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("row", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=[table],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def conv_then_dense(path: Path, *, seed: int = 0, gemm: bool = False) -> Path:
    """x[1,3,8,8] -> Conv(8) + bias -> Relu -> Reshape [1, 512] -> MatMul [512, 10] -> y: a conv and a matmul
    for onnxruntime's quantizer to turn into QLinearConv and QLinearMatMul. With `gemm`, the dense layer is
    Gemm with its weight stored [10, 512] (transB = 1) and a bias, as PyTorch's Linear exports."""
    rng = np.random.default_rng(seed)
    dense = (rng.standard_normal((512, 10)) * 0.1).astype(np.float32)
    initializers = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([1, 512], np.int64), "flat"),
        numpy_helper.from_array(dense.T.copy() if gemm else dense, "dense"),
    ]
    if gemm:
        initializers.append(numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "dense_bias"))
    last = (
        helper.make_node("Gemm", ["f", "dense", "dense_bias"], ["y"], name="dense", transB=1)
        if gemm
        else helper.make_node("MatMul", ["f", "dense"], ["y"], name="dense")
    )
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "flat"], ["f"], name="flatten"),
        last,
    ]
    graph = helper.make_graph(
        nodes,
        "conv_then_dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def conv_then_upsample(path: Path, *, kernel: int = 2, stride: int = 2, pad: int = 0, seed: int = 0) -> Path:
    """x[1,3,8,8] -> Conv(8) -> Relu -> ConvTranspose(8 -> 4, kernel, stride, pads) + bias -> y, as a DB text
    detector's head upsamples (2x2, stride 2) or a decoder does (4x4, stride 2, pads 1)."""
    rng = np.random.default_rng(seed)
    side = (8 - 1) * stride - 2 * pad + kernel
    upsampling = (rng.standard_normal((8, 4, kernel, kernel)) * 0.3).astype(np.float32)
    initializers = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(upsampling, "up"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "up_bias"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node(
            "ConvTranspose",
            ["r", "up", "up_bias"],
            ["y"],
            name="upsample",
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_then_upsample",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, side, side])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def mixed_ops(path: Path, *, seed: int = 0) -> Path:
    """x[1,3,8,8] -> Conv -> Sigmoid -> Mul (swish) -> Add a second Conv -> AveragePool -> Concat with a
    LeakyRelu of itself -> GlobalAveragePool -> Reshape -> MatMul -> Softmax: what onnxruntime's QOperator
    quantizer turns into its com.microsoft QLinear* element-wise ops."""
    rng = np.random.default_rng(seed)
    initializers = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((8, 3, 1, 1)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array([1, 16], np.int64), "flat"),
        numpy_helper.from_array(rng.standard_normal((16, 5)).astype(np.float32), "dense"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c1"], ["s"], name="sigmoid"),
        helper.make_node("Mul", ["c1", "s"], ["swish"], name="swish"),
        helper.make_node("Conv", ["x", "w2"], ["c2"], name="conv2"),
        helper.make_node("Add", ["swish", "c2"], ["sum"], name="add"),
        helper.make_node("AveragePool", ["sum"], ["pooled"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("LeakyRelu", ["pooled"], ["leaky"], name="leaky", alpha=0.2),
        helper.make_node("Concat", ["pooled", "leaky"], ["both"], name="concat", axis=1),
        helper.make_node("GlobalAveragePool", ["both"], ["gap"], name="gap"),
        helper.make_node("Reshape", ["gap", "flat"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "dense"], ["logits"], name="dense"),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "mixed_ops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def streaming(path: Path, *, drift: float = 0.0) -> Path:
    """A streaming model: chunk x[1,4] and state[1,4] in, y = x + state and the next state
    stateN = tanh(0.5 * state + x) + drift out (drift != 0 makes a library whose state wanders off)."""
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    offset = numpy_helper.from_array(np.array(drift, np.float32), "drift")
    nodes = [
        helper.make_node("Add", ["x", "state"], ["y"], name="out"),
        helper.make_node("Mul", ["state", "half"], ["decayed"], name="decay"),
        helper.make_node("Add", ["decayed", "x"], ["mixed"], name="mix"),
        helper.make_node("Tanh", ["mixed"], ["squashed"], name="squash"),
        helper.make_node("Add", ["squashed", "drift"], ["stateN"], name="next"),
    ]
    spec = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in ("x", "state", "y", "stateN")]
    graph = helper.make_graph(nodes, "streaming", spec[:2], spec[2:], initializer=[half, offset])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


# op -> (x shape, w shape, node attributes): a ConvInteger and a MatMulInteger, as quantizers write them
INTEGER_OPS = {
    "ConvInteger": ((1, 3, 8, 8), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "MatMulInteger": ((2, 16), (16, 8), {}),
}


def integer_op(path: Path, op: str, *, seed: int = 0) -> Path:
    """One ConvInteger or MatMulInteger of uint8 x (zero point 120) and int8 w (zero point -3; onnxruntime
    takes per-tensor zero points only) -> int32 y, as onnxruntime's dynamic quantization writes them."""
    x_shape, w_shape, attributes = INTEGER_OPS[op]
    rng = np.random.default_rng(seed)
    initializers = [
        numpy_helper.from_array(rng.integers(-128, 128, w_shape).astype(np.int8), "w"),
        numpy_helper.from_array(np.array(120, np.uint8), "x_zero"),
        numpy_helper.from_array(np.array(-3, np.int8), "w_zero"),
    ]
    node = helper.make_node(op, ["x", "w", "x_zero", "w_zero"], ["y"], name="op", **attributes)
    graph = helper.make_graph(
        [node],
        op,
        [helper.make_tensor_value_info("x", TensorProto.UINT8, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def saved(nodes, inputs, outputs, opset=18, initializers=(), local=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(f.domain, 1) for f in local]
    model = helper.make_model(graph, opset_imports=imports, functions=list(local))
    model.ir_version = 10
    return model


def outputs(model, feed):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)


def recurrent_model(op: str, direction: str, variant: str) -> tuple[onnx.ModelProto, dict]:
    """One LSTM / GRU node with random weights; `variant` picks the attributes and optional inputs."""
    # layout1 is clip's model batch-first: the same weights, so one checks the other (onnxruntime has no layout 1)
    rng = np.random.default_rng(
        ["plain", "initial", "lengths", "full_lengths", "clip", "peephole", "relu"].index(
            "clip" if variant == "layout1" else variant
        )
    )
    dirs, gates = (2 if direction == "bidirectional" else 1), {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    layout = 1 if variant == "layout1" else 0
    x_shape = [STEPS, BATCH, FEATURES] if layout == 0 else [BATCH, STEPS, FEATURES]
    state_shape = [dirs, BATCH, HIDDEN] if layout == 0 else [BATCH, dirs, HIDDEN]
    weights = {
        "W": (dirs, gates * HIDDEN, FEATURES),
        "R": (dirs, gates * HIDDEN, HIDDEN),
        "B": (dirs, 2 * gates * HIDDEN),
    }
    if op == "LSTM" and variant == "peephole":
        weights["P"] = (dirs, 3 * HIDDEN)
    initializers = [
        numpy_helper.from_array((rng.standard_normal(s) * 0.5).astype(np.float32), n) for n, s in weights.items()
    ]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    feed = {"X": rng.standard_normal(x_shape).astype(np.float32)}
    inputs = ["X", "W", "R", "B", "", "", "", ""]
    if variant in ("initial", "lengths", "clip", "layout1"):  # initial states as graph inputs
        for position, name in ((5, "h0"), (6, "c0"))[: 2 if op == "LSTM" else 1]:
            graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, state_shape))
            feed[name] = rng.standard_normal(state_shape).astype(np.float32)
            inputs[position] = name
    if variant == "lengths":
        graph_inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [BATCH]))
        feed["lens"], inputs[4] = LENGTHS, "lens"
    if variant == "full_lengths":  # constants equal to the sequence length: nothing to mask
        initializers.append(numpy_helper.from_array(np.full(BATCH, STEPS, np.int32), "lens"))
        inputs[4] = "lens"
    if "P" in weights:
        inputs[7] = "P"
    attributes = {"hidden_size": HIDDEN, "direction": direction}
    if variant in ("clip", "layout1"):
        attributes |= {"layout": 1 if variant == "layout1" else 0, "clip": 0.7}
    if variant == "peephole" and op == "LSTM":
        attributes["input_forget"] = 1
    if variant == "peephole" and op == "GRU":
        attributes["linear_before_reset"] = 1
    if variant == "relu":
        attributes["activations"] = {"LSTM": ["Sigmoid", "Relu", "Tanh"], "GRU": ["Sigmoid", "Relu"], "RNN": ["Relu"]}[
            op
        ] * dirs
    used = inputs[: max(i for i, name in enumerate(inputs) if name) + 1]
    outputs = ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
    node = helper.make_node(op, used, outputs, name="rnn", **attributes)
    graph = helper.make_graph(
        [node],
        "rnn",
        graph_inputs,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model, feed


def unsorted_topk(path, k=10):
    graph = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=-1, sorted=0)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1000])],
        [
            helper.make_tensor_value_info("values", TensorProto.FLOAT, [1, k]),
            helper.make_tensor_value_info("indices", TensorProto.INT64, [1, k]),
        ],
        initializer=[numpy_helper.from_array(np.array([k], np.int64), "k")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    onnx.save(model, str(path))
    return path


def onnx_hard_swish_between_convs():
    """conv -> x * Clip(x + 3, 0, 6) / 6 -> conv: Clip's bounds are inputs and 3 and 6 tensors of shape [1], as
    the layout detector of the zoo has it."""
    from onnx import helper

    nodes = [
        helper.make_node("Add", ["a", "three"], ["b"]),
        helper.make_node("Clip", ["b", "zero", "top"], ["c"]),
        helper.make_node("Mul", ["a", "c"], ["d"]),
        helper.make_node("Div", ["d", "six"], ["e"]),
    ]
    return onnx_between_convs(
        "hard_swish",
        nodes,
        {"three": np.array([3.0]), "six": np.array([6.0]), "zero": np.array(0.0), "top": np.array(6.0)},
    )


def onnx_between_convs(name: str, nodes: list, constants: dict):
    """Conv(x, w1) -> `nodes` (from "a" to "e") -> Conv(e, w2) as an ONNX graph of opset 13, x [1, 8, 10, 12]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(25)
    constants = {"w1": rng.standard_normal((16, 8, 3, 3)), "w2": rng.standard_normal((16, 16, 1, 1)), **constants}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        *nodes,
        helper.make_node("Conv", ["e", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 10, 12])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in constants.items()],
    )
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
