"""modelbuild: a declarative build tool for deploying ONNX models with Apache TVM."""

__version__ = "0.1.0"
