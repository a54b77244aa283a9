"""ONNX-level quantization algorithms around onnxruntime's calibration: smoothing, bias correction, GPTQ
weight rounding, per-layer sensitivity, intermediate activations. Never imports TVM."""
