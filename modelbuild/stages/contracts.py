"""Each stage's contract, declared once: the input roles it reads, the params model they validate into, the
files it writes and the version of its key's form.

The plan (pipeline/graph.py) wires nodes from these declarations and checks every node against them; the
stages read their inputs by these roles, parse their params with `read_params` and write these files; the
reports find the files by the same names. Nothing here imports TVM, onnx or pydantic: a no-op build loads it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from modelbuild.sources import imported_closure

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


@dataclass(frozen=True)
class Contract:
    """A stage's contract: `entry` ('module:function') is called as function(inputs=..., params=..., out=...)
    with inputs by these roles and params that validate into `params`, and writes `outputs`."""

    name: str
    entry: str
    tools: tuple[str, ...]  # tools whose versions shape the output (modelbuild.versions names)
    summary: str
    inputs: tuple[str, ...] = ()  # roles every node of this stage is given
    # roles a node may be given; one ending in ':' is a family (golden:NAME, one per sample file)
    optional: tuple[str, ...] = ()
    params: str = ""  # the model its params validate into at entry: a class of modelbuild.recipe.params
    outputs: tuple[str, ...] = ()  # files every run must write; a name in braces is read from params
    # the form of the key's params: raised where what a param means changes while its form does not, so no
    # entry the old meaning wrote is served (a change of the stage's code changes its key by itself)
    key_version: int = 1
    # modules the stage runs in a subprocess (`python -m`) rather than imports: the walk cannot see them
    also_runs: tuple[str, ...] = ()

    @property
    def modules(self) -> tuple[str, ...]:
        """Every modelbuild module whose source shapes this stage's output."""
        found: dict[str, None] = {}
        for root in (self.entry.partition(":")[0], *self.also_runs):
            found.update(dict.fromkeys(imported_closure(root)))
        return tuple(found)

    def output_names(self, params: dict) -> tuple[str, ...]:
        return tuple(params[name[1:-1]] if name.startswith("{") else name for name in self.outputs)

    def breaches(self, roles: Iterable[str]) -> list[str]:
        """What a node given these input roles breaks of the contract: roles missing, roles not declared."""
        given = set(roles)
        missing = [f"{role} missing" for role in self.inputs if role not in given]
        undeclared = [f"{role} not declared" for role in sorted(given) if not self._declares(role)]
        return missing + undeclared

    def _declares(self, role: str) -> bool:
        return role in self.inputs or any(
            role == known or (known.endswith(":") and role.startswith(known)) for known in self.optional
        )


# one file per sample where the recipe names a folder (golden:NAME, calibration-image:00001); the role alone
# where it names an .npz (pipeline/sample_files.py)
GOLDEN_SAMPLES = (Role.GOLDEN, "golden:", "golden-image:")
CALIBRATION_SAMPLES = ("calibration", "calibration:", "calibration-image:")

IMPORT = Contract(
    "import",
    "modelbuild.stages.onnx_import:run",
    ("onnx", "onnxslim", "tvm"),
    "freeze input shapes, simplify, import ONNX into Relax",
    inputs=(Role.MODEL,),
    params="ImportParams",
    outputs=(IR, SIGNATURE, FROZEN_ONNX),
)
QUANTIZE = Contract(
    "quantize",
    "modelbuild.stages.quantize:run",
    ("onnx", "onnxruntime", "tvm", "numpy"),
    "static int8 quantization with onnxruntime (QDQ), then integer kernels",
    inputs=(Role.ONNX, Role.SIGNATURE),
    optional=CALIBRATION_SAMPLES,
    params="QuantizeParams",
    outputs=(IR, QDQ_ONNX, QUANTIZE_SUMMARY),
)
TUNE = Contract(
    "tune",
    "modelbuild.stages.tune:run",
    ("tvm", "tvm-ffi"),
    "MetaSchedule tuning into the target's shared database; the best record of each task",
    inputs=(Role.IR, Role.DATABASE),
    optional=(Role.RECORDS,),
    params="TuneParams",
    outputs=(TUNED_RECORDS, TUNE_SUMMARY),
)
COMPILE = Contract(
    "compile",
    "modelbuild.stages.compile:run",
    ("tvm",),
    "compile the Relax module for a target and export the library",
    inputs=(Role.IR, Role.SIGNATURE),
    optional=(Role.TUNING,),
    params="CompileParams",
    outputs=("{library}", ANALYSIS, LIBRARY_MANIFEST),
)
REFERENCE = Contract(
    "reference",
    "modelbuild.stages.reference:run",
    ("onnxruntime", "numpy"),
    "golden inputs and the ONNX model's outputs from onnxruntime",
    inputs=(Role.MODEL, Role.SIGNATURE),
    optional=GOLDEN_SAMPLES,
    params="ReferenceParams",
    outputs=(GOLDEN,),
)
VALIDATE = Contract(
    "validate",
    "modelbuild.stages.validate:run",
    ("tvm", "numpy"),
    "run the library on the golden inputs, compare with the reference, time it",
    inputs=(Role.LIBRARY, Role.GOLDEN, Role.SIGNATURE, Role.ANALYSIS),
    optional=(Role.GOLDEN_QDQ, Role.FLOAT_LIBRARY, Role.BASELINE_LIBRARY),
    params="ValidateParams",
    outputs=(METRICS,),
    also_runs=("modelbuild.measurement.measure",),
)
CONTRACTS = (IMPORT, QUANTIZE, TUNE, COMPILE, REFERENCE, VALIDATE)


def read_params(stage: Contract, params: dict) -> Any:
    """A node's params as the model the stage's contract names (recipe/params.py); a mismatch is the plan's
    bug, reported as the stage's failure."""
    import modelbuild.recipe.params as models

    return models.parse(getattr(models, stage.params), params)
