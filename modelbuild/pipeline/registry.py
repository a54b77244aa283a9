"""The stages a recipe's builds are made of: each a function from declared inputs to declared output files.

A stage's code is named by an import path and loaded only in the worker process that runs it, so a build
whose stages are all cached never imports TVM, onnx or onnxruntime.
"""

from __future__ import annotations

from modelbuild.engine.stage import Stage
from modelbuild.errors import ModelbuildError
from modelbuild.frontend.external_data import model_digest
from modelbuild.stages.files import (
    ANALYSIS,
    FROZEN_ONNX,
    GOLDEN,
    IR,
    LIBRARY_MANIFEST,
    METRICS,
    QDQ_ONNX,
    QUANTIZE_SUMMARY,
    SIGNATURE,
    TUNE_SUMMARY,
    TUNED_RECORDS,
    Role,
)

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


# the role of a declared ONNX model file, digested with the files it keeps its tensors in
MODEL = Role.MODEL
DIGESTERS = {MODEL: model_digest}

register(
    Stage(
        "import",
        "modelbuild.stages.onnx_import:run",
        ("onnx", "onnxslim", "tvm"),
        "freeze input shapes, simplify, import ONNX into Relax",
        (IR, SIGNATURE, FROZEN_ONNX),
    )
)
register(
    Stage(
        "compile",
        "modelbuild.stages.compile:run",
        ("tvm",),
        "compile the Relax module for a target and export the library",
        ("{library}", ANALYSIS, LIBRARY_MANIFEST),
    )
)
register(
    Stage(
        "quantize",
        "modelbuild.stages.quantize:run",
        ("onnx", "onnxruntime", "tvm", "numpy"),
        "static int8 quantization with onnxruntime (QDQ), then integer kernels",
        (IR, QDQ_ONNX, QUANTIZE_SUMMARY),
    )
)
register(
    Stage(
        "tune",
        "modelbuild.stages.tune:run",
        ("tvm", "tvm-ffi"),
        "MetaSchedule tuning into the target's shared database; the best record of each task",
        (TUNED_RECORDS, TUNE_SUMMARY),
    )
)
register(
    Stage(
        "reference",
        "modelbuild.stages.reference:run",
        ("onnxruntime", "numpy"),
        "golden inputs and the ONNX model's outputs from onnxruntime",
        (GOLDEN,),
    )
)
register(
    Stage(
        "validate",
        "modelbuild.stages.validate:run",
        ("tvm", "numpy"),
        "run the library on the golden inputs, compare with the reference, time it",
        (METRICS,),
        also_runs=("modelbuild.measurement.measure",),
    )
)
