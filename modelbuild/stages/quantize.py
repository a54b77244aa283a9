"""The quantize stage: static int8 quantization with onnxruntime, then integer kernels in TVM.

Before onnxruntime sees the model, each quantized conv's input is smoothed (smoothing.py), so one int8
scale fits all its channels. onnxruntime's `quantize_static` then calibrates activation ranges (minmax,
percentile, or entropy from onnxruntime's calibrator run here) on the declared samples and writes a QDQ
model with per-channel int8 weights, whose conv biases bias_correction.py corrects for the mean error int8
leaves. That model is imported into Relax and integer_ops.rewrite turns each dequantize -> conv2d / matmul
into int8 x int8 -> int32, so the library's hot loops are integer.

Outputs: ir.json (what the compile stage builds instead of the import stage's), qdq.onnx (the quantized
ONNX model, the second reference the validate stage compares against), quantize.json (weight bytes before
and after, what was calibrated on, what was smoothed and corrected, per-layer SQNR, each layer's share of
the output error (sensitivity.py), warnings).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from modelbuild import signature
from modelbuild.compiler import integer_ops
from modelbuild.errors import StageError, last_line
from modelbuild.frontend import float16, opset
from modelbuild.frontend.node_names import unique_node_names
from modelbuild.quantization import activations, bias_correction, sensitivity, smoothing, weight_rounding
from modelbuild.recipe.params import QuantizeParams
from modelbuild.recipe.schema import CalibrationSpec, QuantizationSpec
from modelbuild.stages import contracts
from modelbuild.stages.contracts import Role
from modelbuild.validation import golden
from modelbuild.validation.metrics import sqnr_db

PER_CHANNEL_OPSET = 13  # onnxruntime's per-channel QDQ needs the axis attribute of opset 13


def run(*, inputs: dict[str, Path], params: dict, out: Path) -> None:
    import onnx
    import tvm

    from modelbuild.stages.onnx_import import to_relax

    p: QuantizeParams = contracts.read_params(contracts.QUANTIZE, params)
    spec, declared = p.quantization, signature.read(inputs[Role.SIGNATURE]).inputs
    model = float16.computed_in_float32(_with_opset(onnx.load(str(inputs[Role.ONNX])), spec))
    samples = _calibration_samples(inputs, declared, spec.calibration)
    result = quantized(model, samples, spec)
    onnx.save(result.qdq, str(out / contracts.QDQ_ONNX))
    module = integer_ops.rewrite(to_relax(result.qdq, declared))
    (out / contracts.IR).write_text(tvm.ir.save_json(module))
    model = result.model
    summary = _summary(model, result.qdq, spec)
    summary["smoothed_convs"], summary["bias_corrected_convs"] = result.smoothed, result.corrected
    summary["int16_nodes"], summary["gptq_convs"] = result.int16_nodes, result.gptq_convs
    summary["layers"], summary["first_jump"] = layer_sqnr(model, result.qdq, samples[0])
    if spec.sensitivity:
        summary["sensitivity"] = sensitivity.layer_shares(
            result.qdq, result.prepared, samples, corrected=spec.bias_correction
        )
        summary["float_candidates"] = [row["node"] for row in sensitivity.largest(summary["sensitivity"]["layers"])]
    (out / contracts.QUANTIZE_SUMMARY).write_text(json.dumps(summary, indent=1, sort_keys=True))


@dataclass
class Quantized:
    model: object  # the float model as quantized: the input model, every node named (node_names.py)
    qdq: object  # onnxruntime's QDQ model of the smoothed model, biases corrected
    prepared: object  # the float model onnxruntime quantized: the input model, smoothed
    smoothed: int  # convs whose inputs were smoothed
    corrected: int  # convs whose biases were corrected
    int16_nodes: list[str] = field(default_factory=list)  # nodes whose input activations are int16
    gptq_convs: int = 0  # convs whose weights GPTQ rounded


# int16 ranges are the calibrated ones widened 2x, one bit of sixteen: held-out inputs beyond the calibration
# samples' minmax were clipped otherwise (classifier, int16 activations everywhere: RMS logit-margin error
# 0.236 at the calibrated ranges, 0.115 widened 2x)
INT16_HEADROOM = 2.0


def quantized(model, samples: list[dict], spec: QuantizationSpec) -> Quantized:
    """The QDQ model of `model` (ONNX in, ONNX out, no TVM): smoothing, onnxruntime's calibration and QDQ
    insertion (int16 inputs for the layers that need them), weight rounding, bias correction, as `spec` (a
    [quantization.NAME] section) says."""
    model = unique_node_names(model)
    _check_node_names(model, spec, "exclude_nodes")
    _check_node_names(model, spec, "int16_nodes")
    prepared = _smoothed(model, samples, spec) if spec.smoothing else model
    int16 = _int16_nodes(prepared, samples, spec)
    qdq = _quantize(prepared, samples, spec, int16_tensors=_data_inputs(prepared, int16))
    gptq = weight_rounding.round_convs(prepared, qdq, samples) if spec.weight_rounding == "gptq" else 0
    corrected = bias_correction.correct(prepared, qdq, samples) if spec.bias_correction else 0
    smoothed = sum(n.name.endswith(smoothing.SMOOTHED_SUFFIX) for n in prepared.graph.node)
    return Quantized(model, qdq, prepared, smoothed, corrected, int16, gptq)


def _int16_nodes(prepared, samples: list[dict], spec: QuantizationSpec) -> list[str]:
    """int16_nodes, and the int16_most_sensitive layers whose int8 data alone (sensitivity.py) costs the most
    output error in the int8 model: int16 changes only the data's rounding, so the measure leaves their
    weights in float."""
    if "*" in spec.int16_nodes:
        op_types = _quantized_op_types(prepared, spec)
        return [n.name for n in prepared.graph.node if n.op_type in op_types and n.name not in spec.exclude_nodes]
    chosen = list(spec.int16_nodes)
    if spec.int16_most_sensitive:
        qdq = _quantize(prepared, samples, spec)
        if spec.bias_correction:
            bias_correction.correct(prepared, qdq, samples)
        rows = sensitivity.layer_shares(
            qdq, prepared, samples, corrected=spec.bias_correction, kept_inputs=sensitivity.DATA
        )["layers"]
        ranked = [row["node"] for row in sorted(rows, key=lambda row: -row["error_power"])]
        chosen += [name for name in ranked if name not in chosen][: spec.int16_most_sensitive]
    return chosen


def _data_inputs(model, nodes: list[str]) -> list[str]:
    """The tensors the named nodes take as data (their first input), each once."""
    named = {node.name: node for node in model.graph.node}
    return list(dict.fromkeys(named[name].input[0] for name in nodes))


def _check_node_names(model, spec: QuantizationSpec, field_name: str) -> None:
    """Every name in exclude_nodes (or int16_nodes) must name a node of the model as imported: onnxruntime
    ignores unknown names, so a name from the original ONNX file that simplification changed (it merges
    BatchNorm into the conv before it, which then takes another name) left the layer as it was without a word."""
    names = {n.name for n in model.graph.node}
    unknown = [name for name in getattr(spec, field_name) if name not in names and name != "*"]
    if unknown:
        examples = [n.name for n in model.graph.node if n.op_type in _quantized_op_types(model, spec)][:3]
        raise StageError(
            f"{field_name}: no node named {', '.join(map(repr, unknown))} in the model as imported "
            f"(simplification renames the nodes it merges); use the names in report.md's SQNR "
            f"table, such as {', '.join(map(repr, examples))}"
        )


def _with_opset(model, spec: QuantizationSpec):
    if not spec.per_channel:
        return model
    return opset.raised_to(
        model, PER_CHANNEL_OPSET, needed_for="per-channel quantization", fix="set per_channel = false"
    )


def _smoothed(model, samples: list[dict], spec: QuantizationSpec):
    """The model with the inputs of the convs that will be quantized smoothed (smoothing.py)."""
    if "Conv" not in _quantized_op_types(model, spec):
        return model
    convs = {
        tensor: kept
        for tensor, nodes in smoothing.conv_inputs(model).items()
        if (kept := [n for n in nodes if n.name not in spec.exclude_nodes])
    }
    ranges = smoothing.channel_ranges(model, samples, sorted(convs))
    return smoothing.smooth(model, ranges, convs)


def _quantized_op_types(model, spec: QuantizationSpec) -> list[str]:
    present = {n.op_type for n in model.graph.node}
    return sorted((present if "*" in spec.ops else present & set(spec.ops)) - set(spec.exclude_ops))


def _calibration_samples(inputs: dict[str, Path], declared: dict, calibration: CalibrationSpec) -> list[dict]:
    if calibration.source == "random":
        arrays = golden.generate(
            declared, fill="random", seed=calibration.seed, count=calibration.samples, stream=golden.CALIBRATION
        )
    elif calibration.source == "images":
        images = [path for role, path in sorted(inputs.items()) if role.startswith("calibration-image:")]
        arrays = golden.load_images(images, declared, calibration.preprocess.model_dump())
    else:
        files = {
            ("golden" if role == "calibration" else role.replace("calibration:", "golden:")): path
            for role, path in inputs.items()
            if role.startswith("calibration")
        }
        arrays = golden.load(files, declared, calibration.samples)
    count = len(next(iter(arrays.values())))
    return [golden.sample(arrays, i) for i in range(count)]


def _quantize(model, samples: list[dict], spec: QuantizationSpec, *, int16_tensors: tuple[str, ...] | list[str] = ()):
    """onnxruntime's QDQ model of `model`; the activations `int16_tensors` in int16, with INT16_HEADROOM."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    symmetric = spec.scheme == "symmetric"
    # entropy ranges come from _entropy_ranges as overrides; quantize_static's own minmax pass is then unused
    method = {
        "minmax": CalibrationMethod.MinMax,
        "percentile": CalibrationMethod.Percentile,
        "entropy": CalibrationMethod.MinMax,
    }[spec.calibration.method]
    op_types = _quantized_op_types(model, spec)
    options = {
        "ActivationSymmetric": symmetric,
        "WeightSymmetric": True,
        "OpTypesToExcludeOutputQuantization": [] if spec.quantize_outputs else op_types,
    }
    if spec.calibration.method == "percentile":
        options["CalibPercentile"] = spec.calibration.percentile
    with tempfile.TemporaryDirectory(prefix="modelbuild-quantize-") as tmp:
        source, target = Path(tmp) / "float.onnx", Path(tmp) / "qdq.onnx"
        onnx.save(model, str(source))
        try:
            if spec.calibration.method == "entropy":
                options["TensorQuantOverrides"] = _entropy_ranges(source, samples, op_types, symmetric=symmetric)
            overrides = options.setdefault("TensorQuantOverrides", {})
            for tensor in int16_tensors:
                overrides.setdefault(tensor, [{}])[0]["quant_type"] = QuantType.QInt16
            quantize_static(
                str(source),
                str(target),
                _reader(samples),
                quant_format=QuantFormat.QDQ,
                per_channel=spec.per_channel,
                weight_type=QuantType.QInt8,
                activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
                calibrate_method=method,
                op_types_to_quantize=op_types,
                nodes_to_exclude=spec.exclude_nodes,
                extra_options=options,
            )
        except Exception as err:
            raise StageError(f"onnxruntime could not quantize the model: {last_line(err)}") from err
        return _widened_int16(onnx.load(str(target)))


def _widened_int16(qdq):
    """`qdq` with the scales of its int16 quantize / dequantize pairs multiplied by INT16_HEADROOM."""
    from onnx import TensorProto, numpy_helper

    initializers = {t.name: t for t in qdq.graph.initializer}
    scales = {
        node.input[1]
        for node in qdq.graph.node
        if node.op_type in ("QuantizeLinear", "DequantizeLinear")
        and len(node.input) > 2
        and node.input[2] in initializers
        and initializers[node.input[2]].data_type == TensorProto.INT16
    }
    for name in scales:
        scale = numpy_helper.to_array(initializers[name])
        initializers[name].CopyFrom(numpy_helper.from_array((scale * INT16_HEADROOM).astype(scale.dtype), name))
    return qdq


# 2048 histogram bins, as TensorRT's entropy calibrator; 128 quantized bins, onnxruntime's default (255
# clipped far more on the bundled classifier: worst cosine 0.06 against fp32, where 128 gave 0.95)
ENTROPY_BINS, ENTROPY_QUANTIZED_BINS = 2048, 128


def _entropy_ranges(source: Path, samples: list[dict], op_types: list[str], *, symmetric: bool) -> dict:
    """Per tensor of the model saved at `source`, the range that minimises the KL divergence between its
    histogram and its int8 version, as TensorQuantOverrides for quantize_static.

    quantize_static cannot pass a bin count to onnxruntime's entropy calibrator, whose defaults (128 bins,
    128 quantized bins) leave a single candidate range, the whole histogram: "entropy" there is minmax
    (identical scales on the bundled classifier). So the calibrator is run here with 2048 bins, and its
    ranges override the minmax ones quantize_static computes."""
    import numpy as np
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import create_calibrator

    calibrator = create_calibrator(
        source,
        op_types,
        augmented_model_path=str(source.with_name("entropy.onnx")),
        calibrate_method=CalibrationMethod.Entropy,
        extra_options={"num_bins": ENTROPY_BINS, "symmetric": symmetric, "num_quantized_bins": ENTROPY_QUANTIZED_BINS},
    )
    calibrator.collect_data(_reader(samples))
    ranges = calibrator.compute_data()
    return {name: [dict(zip(("rmin", "rmax"), np.float32(ranges[name].range_value), strict=True))] for name in ranges}


def _reader(samples: list[dict]):
    """The samples as the CalibrationDataReader onnxruntime's calibrators read."""
    from onnxruntime.quantization import CalibrationDataReader

    class Samples(CalibrationDataReader):
        def __init__(self):
            self.iterator = iter(samples)

        def get_next(self):
            return next(self.iterator, None)

    return Samples()


SQNR_JUMP_DB = 10.0  # a drop this large from one layer to the next marks where the int8 error comes from


def layer_sqnr(model, qdq, sample: dict) -> tuple[list[dict], str | None]:
    """SQNR of every float activation of the QDQ model against the fp32 model, in execution order, and the
    first tensor where it drops by more than SQNR_JUMP_DB: the layer to try leaving in float.

    onnxruntime runs both models with every intermediate exposed; the QDQ model stands in for the int8
    library, which computes the same values (see integer_ops)."""
    nodes = [(node, name) for node in model.graph.node for name in node.output if name]
    reference, quantized = activations.compute(model, sample), activations.compute(qdq, sample)
    rows = []
    for node, name in nodes:
        if name in reference and name in quantized and reference[name].dtype.kind == "f":
            rows.append(
                {
                    "tensor": name,
                    "node": node.name,
                    "op": node.op_type,
                    "sqnr_db": sqnr_db(
                        quantized[name].astype("float64").ravel(), reference[name].astype("float64").ravel()
                    ),
                }
            )
    jump = next((b["tensor"] for a, b in zip(rows, rows[1:]) if a["sqnr_db"] - b["sqnr_db"] > SQNR_JUMP_DB), None)
    return rows, jump


def _weight_bytes(model) -> int:
    from onnx import numpy_helper

    return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


def _precision(spec: QuantizationSpec) -> str:
    """What the kernels compute in, as the report labels the build: A8W8, A16W8, or A8W8 with some layers A16."""
    if spec.int16_nodes == ["*"]:
        return "A16W8 (int16 activations, int8 weights)"
    wider = len(spec.int16_nodes) + spec.int16_most_sensitive
    return "A8W8 (int8)" + (f", up to {wider} layers with int16 inputs" if wider else "")


def _summary(model, qdq, spec: QuantizationSpec) -> dict:
    calibration = spec.calibration
    warnings = []
    if calibration.source == "random":
        warnings.append(
            f"calibrated on {calibration.samples} random samples (seed {calibration.seed}), "
            "not real inputs: activation ranges, and so accuracy, may not hold on real data"
        )
    fp32, int8 = _weight_bytes(model), _weight_bytes(qdq)
    return {
        "weight_bytes_fp32": fp32,
        "weight_bytes_int8": int8,
        "weight_ratio": fp32 / int8 if int8 else None,
        "scheme": spec.scheme,
        "per_channel": spec.per_channel,
        "precision": _precision(spec),
        "calibration": calibration.model_dump(exclude={"path"}),  # the path is the recipe's, not a figure
        "warnings": warnings,
    }
