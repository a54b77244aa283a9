"""The quantize stage: static int8 quantization with onnxruntime, then integer kernels in TVM.

onnxruntime's `quantize_static` calibrates activation ranges (minmax, percentile or entropy) on the declared
samples and writes a QDQ model with per-channel int8 weights. That model is imported into Relax and
integer_ops.rewrite turns each dequantize -> conv2d / matmul into int8 x int8 -> int32, so the library's
hot loops are integer.

Outputs: ir.json (what the compile stage builds instead of the import stage's), qdq.onnx (onnxruntime's own
quantized model, the second reference the validate stage compares against), quantize.json (weight bytes
before and after, what was calibrated on, warnings).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from modelbuild import golden
from modelbuild.errors import StageError, last_line

IR_FILE = "ir.json"
QDQ_FILE = "qdq.onnx"
SUMMARY_FILE = "quantize.json"
PER_CHANNEL_OPSET = 13  # onnxruntime's per-channel QDQ needs the axis attribute of opset 13


def run(*, inputs: dict[str, Path], params: dict, out: Path) -> None:
    import onnx
    import tvm

    from modelbuild.stages import integer_ops
    from modelbuild.stages.onnx_import import to_relax

    spec, declared = params["quantization"], params["inputs"]
    model = _with_opset(onnx.load(str(inputs["onnx"])), spec)
    samples = _calibration_samples(inputs, declared, spec["calibration"])
    qdq = _quantize(model, samples, spec)
    onnx.save(qdq, str(out / QDQ_FILE))
    module = integer_ops.rewrite(to_relax(qdq, declared))
    (out / IR_FILE).write_text(tvm.ir.save_json(module))
    summary = _summary(model, qdq, spec)
    summary["layers"], summary["first_jump"] = layer_sqnr(model, qdq, samples[0])
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=1, sort_keys=True))


def _with_opset(model, spec: dict):
    from onnx import version_converter

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if spec["per_channel"] and opset < PER_CHANNEL_OPSET:
        try:
            return version_converter.convert_version(model, PER_CHANNEL_OPSET)
        except Exception as err:
            raise StageError(f"cannot convert opset {opset} to {PER_CHANNEL_OPSET} for per-channel weights "
                             f"({last_line(err)}); set per_channel = false") from err
    return model


def _calibration_samples(inputs: dict[str, Path], declared: dict, calibration: dict) -> list[dict]:
    if calibration["source"] == "random":
        arrays = golden.generate(declared, fill="random", seed=calibration["seed"], count=calibration["samples"])
    elif calibration["source"] == "images":
        images = [path for role, path in sorted(inputs.items()) if role.startswith("calibration-image:")]
        arrays = golden.load_images(images, declared, calibration["preprocess"])
    else:
        files = {("golden" if role == "calibration" else role.replace("calibration:", "golden:")): path
                 for role, path in inputs.items() if role.startswith("calibration")}
        arrays = golden.load(files, declared, calibration["samples"])
    count = len(next(iter(arrays.values())))
    return [{name: array[i] for name, array in arrays.items()} for i in range(count)]


def _quantize(model, samples: list[dict], spec: dict):
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    class Samples(CalibrationDataReader):
        def __init__(self):
            self.iterator = iter(samples)

        def get_next(self):
            return next(self.iterator, None)

    symmetric = spec["scheme"] == "symmetric"
    method = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile,
              "entropy": CalibrationMethod.Entropy}[spec["calibration"]["method"]]
    present = {n.op_type for n in model.graph.node}
    op_types = sorted((present if "*" in spec["ops"] else present & set(spec["ops"])) - set(spec["exclude_ops"]))
    with tempfile.TemporaryDirectory(prefix="modelbuild-quantize-") as tmp:
        source, target = Path(tmp) / "float.onnx", Path(tmp) / "qdq.onnx"
        onnx.save(model, str(source))
        try:
            quantize_static(str(source), str(target), Samples(), quant_format=QuantFormat.QDQ,
                            per_channel=spec["per_channel"], weight_type=QuantType.QInt8,
                            activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
                            calibrate_method=method, op_types_to_quantize=op_types,
                            nodes_to_exclude=spec["exclude_nodes"],
                            extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True,
                                           "OpTypesToExcludeOutputQuantization":
                                               [] if spec["quantize_outputs"] else op_types})
        except Exception as err:
            raise StageError(f"onnxruntime could not quantize the model: {last_line(err)}") from err
        return onnx.load(str(target))


SQNR_JUMP_DB = 10.0  # a drop this large from one layer to the next marks where the int8 error comes from


def layer_sqnr(model, qdq, sample: dict) -> tuple[list[dict], str | None]:
    """SQNR of every float activation of the QDQ model against the fp32 model, in execution order, and the
    first tensor where it drops by more than SQNR_JUMP_DB: the layer to try leaving in float.

    onnxruntime runs both models with every intermediate exposed; the QDQ model stands in for the int8
    library, which computes the same values (see integer_ops)."""
    from modelbuild.metrics import sqnr_db

    nodes = [(node, name) for node in model.graph.node for name in node.output if name]
    reference, quantized = _activations(model, sample), _activations(qdq, sample)
    rows = []
    for node, name in nodes:
        if name in reference and name in quantized and reference[name].dtype.kind == "f":
            rows.append({"tensor": name, "node": node.name, "op": node.op_type,
                         "sqnr_db": sqnr_db(quantized[name].astype("float64").ravel(),
                                            reference[name].astype("float64").ravel())})
    jump = next((b["tensor"] for a, b in zip(rows, rows[1:]) if a["sqnr_db"] - b["sqnr_db"] > SQNR_JUMP_DB),
                None)
    return rows, jump


def _activations(model, sample: dict) -> dict:
    """Every tensor a model computes on one sample, by name (onnxruntime, all intermediates as outputs)."""
    import onnx
    import onnxruntime as ort

    inferred = onnx.shape_inference.infer_shapes(model)
    typed = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    exposed = onnx.ModelProto()
    exposed.CopyFrom(inferred)
    present = {o.name for o in exposed.graph.output}
    for node in exposed.graph.node:
        for name in node.output:
            if name in typed and name not in present:
                exposed.graph.output.append(typed[name])
                present.add(name)
    session = ort.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    feed = {i.name: sample[i.name] for i in session.get_inputs()}
    return dict(zip(names, session.run(names, feed)))


def _weight_bytes(model) -> int:
    from onnx import numpy_helper

    return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


def _summary(model, qdq, spec: dict) -> dict:
    calibration = spec["calibration"]
    warnings = []
    if calibration["source"] == "random":
        warnings.append(f"calibrated on {calibration['samples']} random samples (seed {calibration['seed']}), "
                        "not real inputs: activation ranges, and so accuracy, may not hold on real data")
    fp32, int8 = _weight_bytes(model), _weight_bytes(qdq)
    return {"weight_bytes_fp32": fp32, "weight_bytes_int8": int8, "weight_ratio": fp32 / int8 if int8 else None,
            "scheme": spec["scheme"], "per_channel": spec["per_channel"], "calibration": calibration,
            "warnings": warnings}
