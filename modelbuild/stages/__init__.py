"""The stages: thin adapters from declared input files and recipe params to library calls and output files.

Each is registered in modelbuild.pipeline.registry and runs in a worker process; only they import TVM, onnx
or onnxruntime, and only inside their functions, so a build whose stages are all cached never loads them.
"""
