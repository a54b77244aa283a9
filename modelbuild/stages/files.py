"""The files each stage writes, by name: declared once, read by the stages that write them and by the plan
(pipeline/registry.py), which wires them to downstream inputs and the reports."""

from __future__ import annotations

IR = "ir.json"  # the Relax module, as TVM's JSON
SIGNATURE = "signature.json"  # the library's inputs and outputs (modelbuild.signature)
FROZEN_ONNX = "model.onnx"  # the frozen, simplified model: what the quantize stage calibrates
ANALYSIS = "analysis.json"  # compile's fusion, memory and kernel figures
LIBRARY_MANIFEST = "library.json"  # beside the library: what a program needs to load and call it
QDQ_ONNX, QUANTIZE_SUMMARY = "qdq.onnx", "quantize.json"
TUNED_RECORDS, TUNE_SUMMARY = "records.json", "tune.json"
GOLDEN = "golden.npz"  # the reference stage's inputs and onnxruntime's outputs
METRICS = "metrics.json"  # the validate stage's accuracy and timing
# written by compile where it can lower the module (a cross target too), not required of every run
IR_TEXTS = ("ir_before_fusion.py", "ir_after_fusion.py", "ir_planned.py")


class Role:
    """The names a stage's inputs are passed by (`inputs[Role.IR]`): the plan (pipeline/graph.py) wires each to
    an upstream stage's output or a declared file, and the stage reads it by the same name."""

    MODEL = "model"  # the ONNX model: the recipe's (import, reference) or the QDQ one (reference of int8)
    ONNX = "onnx"  # the frozen, simplified model quantize calibrates
    IR = "ir"
    SIGNATURE = "signature"
    TUNING = "tuning"  # compile: the tune stage's best records
    RECORDS = "records"  # tune: records a team seeds the target's database with
    DATABASE = "database"  # tune: the target's shared database folder
    LIBRARY = "library"
    GOLDEN = "golden"  # the reference's inputs and outputs; golden:NAME, the recipe's sample files
    GOLDEN_QDQ = "golden_qdq"  # onnxruntime's outputs of its own quantized model
    ANALYSIS = "analysis"
    FLOAT_LIBRARY = "float_library"  # an int8 build's float build, timed beside it
    BASELINE_LIBRARY = "baseline_library"  # a library from before the change, timed beside it
