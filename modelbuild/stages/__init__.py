"""The stage registry: each stage is a function from declared inputs to files in an output folder.

A stage's code is named by an import path and loaded only in the worker process that runs it, so a build
whose stages are all cached never imports TVM, onnx or onnxruntime.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from modelbuild.errors import ModelbuildError
from modelbuild.hashing import sha256_file


@dataclass(frozen=True)
class Stage:
    """What the build system knows of a stage: its name, version, code, and the tools that shape its output."""

    name: str
    version: int  # bump when the stage's code changes what it writes: every key of that stage changes
    entry: str  # "module:function", called as function(inputs=..., params=..., out=...)
    tools: tuple[str, ...]
    summary: str
    # modules besides the entry's whose code shapes the output; their bytes enter the key, so an edit to a
    # stage or a helper it uses can never serve an output the old code wrote
    helpers: tuple[str, ...] = field(default=())

    @property
    def modules(self) -> tuple[str, ...]:
        return (self.entry.partition(":")[0], *self.helpers)


@cache
def source_digest(modules: tuple[str, ...]) -> str:
    """SHA-256 over the source files of these modules, found without importing them (nor TVM)."""
    import hashlib

    h = hashlib.sha256()
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ModelbuildError(f"stage module {name!r} not found")
        h.update(name.encode() + b"\0" + sha256_file(Path(spec.origin)).encode())
    return h.hexdigest()


STAGES: dict[str, Stage] = {}


def register(stage: Stage) -> Stage:
    STAGES[stage.name] = stage
    return stage


def get_stage(name: str) -> Stage:
    """The registered stage of that name; an unknown name lists the valid ones."""
    try:
        return STAGES[name]
    except KeyError:
        raise ModelbuildError(f"no stage named {name!r}; stages: {', '.join(sorted(STAGES))}") from None


register(Stage("import", 1, "modelbuild.stages.onnx_import:run", ("onnx", "onnxslim", "tvm"),
               "freeze input shapes, simplify, import ONNX into Relax", ("modelbuild.signature",)))
register(Stage("compile", 6, "modelbuild.stages.compile:run", ("tvm",),
               "compile the Relax module for a target and export the library",
               ("modelbuild.stages.lowering", "modelbuild.stages.default_schedule", "modelbuild.stages.integer_ops",
                "modelbuild.stages.integer_kernels", "modelbuild.stages.vnni_conv", "modelbuild.stages.vnni_depthwise",
                "modelbuild.stages.conv_transpose",
                "modelbuild.analysis", "modelbuild.tuning_db")))
register(Stage("quantize", 1, "modelbuild.stages.quantize:run", ("onnx", "onnxruntime", "tvm", "numpy"),
               "static int8 quantization with onnxruntime (QDQ), then integer kernels",
               ("modelbuild.stages.integer_ops", "modelbuild.stages.onnx_import", "modelbuild.stages.smoothing",
                "modelbuild.stages.bias_correction", "modelbuild.stages.activations", "modelbuild.stages.sensitivity",
                "modelbuild.stages.weight_rounding",
                "modelbuild.golden", "modelbuild.metrics", "modelbuild.signature")))
register(Stage("tune", 2, "modelbuild.stages.tune:run", ("tvm", "tvm-ffi"),
               "MetaSchedule tuning into the target's shared database; the best record of each task",
               ("modelbuild.stages.lowering", "modelbuild.stages.default_schedule", "modelbuild.stages.integer_ops",
                "modelbuild.stages.integer_kernels", "modelbuild.stages.vnni_conv", "modelbuild.stages.vnni_depthwise",
                "modelbuild.stages.conv_transpose",
                "modelbuild.analysis", "modelbuild.tuning_db")))
register(Stage("reference", 1, "modelbuild.stages.reference:run", ("onnxruntime", "numpy"),
               "golden inputs and the ONNX model's outputs from onnxruntime", ("modelbuild.golden", "modelbuild.signature")))
register(Stage("validate", 4, "modelbuild.stages.validate:run", ("tvm", "numpy"),
               "run the library on the golden inputs, compare with the reference, time it",
               ("modelbuild.stages.measure", "modelbuild.metrics", "modelbuild.analysis", "modelbuild.targets",
                "modelbuild.versions", "modelbuild.signature")))
