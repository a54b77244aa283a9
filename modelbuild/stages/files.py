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
