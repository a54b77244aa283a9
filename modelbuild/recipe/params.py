"""What each stage reads: the params of its nodes, typed.

The pipeline writes a node's params as plain JSON data (they enter the node's key, so their exact form is
part of every cache entry), and the stage validates them into one of these models at entry: a field the
pipeline misspells or forgets fails the node with pydantic's message, never as a KeyError deep in a worker.
The recipe's own sections (golden, timing, tuning, quantization) are the schema's models, so a stage reads
what the user wrote with the defaults the schema gives.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import Field, ValidationError

from modelbuild.errors import StageError
from modelbuild.recipe.schema import GoldenSpec, InputSpec, QuantizationSpec, Strict, TimingSpec, TuningSpec


class ImportParams(Strict):
    inputs: dict[str, InputSpec]  # the shapes the recipe declares; others keep the model's own
    simplify: bool


class CompileOptions(Strict):
    """The build's compile settings (BuildSpec's fuse, opt_level, layout, schedule)."""

    fuse: bool
    opt_level: int
    layout: Literal["auto", "NCHW", "NHWC"]
    # tuning takes its tasks from the IR before any schedule, so a tune node's options leave this out
    schedule: Literal["default", "none"] = "default"


class CompileParams(Strict):
    target: dict[str, Any]  # TVM target JSON, mcpu resolved
    library: str  # model.so, or model.tar of objects when no cross linker is at hand
    cross_compiler: str | None
    linker: dict[str, str] | None = None  # {command, version}: only enters the key, the stage links with cross_compiler
    cuda_compiler: dict[str, str] | None = None  # {name, version}: what compiles a cuda target's kernels
    devices: list[str] | None = None  # ["cuda", "llvm"]: each operator placed on the GPU or the CPU
    options: CompileOptions


class TuneParams(Strict):
    target: dict[str, Any]
    options: CompileOptions
    tuning: TuningSpec  # records travel as a declared file, not a param
    device: dict[str, Any] | None = None  # where candidates are measured over RPC: {tracker, key, timeout}
    cross_compiler: str | None = None  # links each candidate into a .so the device loads without a compiler


class QuantizeParams(Strict):
    quantization: QuantizationSpec  # calibration.path travels as declared files, not a param


class ReferenceParams(Strict):
    golden: GoldenSpec  # path travels as declared files


class ValidateParams(Strict):
    timing: TimingSpec  # threads resolved into `threads`
    threads: int = Field(ge=1)
    runs_here: bool
    reason: str  # why not, where runs_here is false
    machine: dict[str, Any]  # the host the timings belong to: a shared cache must not mix machines
    device: dict[str, Any] | None = None  # {tracker, key, timeout}: validated through TVM's RPC tracker
    gpu: bool = False  # a cuda library, run on this machine's first GPU
    devices: list[str] | None = None  # a heterogeneous library's: run on the GPU and this CPU


Params = TypeVar("Params", bound=Strict)


def parse(kind: type[Params], params: dict) -> Params:
    """A node's params as the stage's model; a mismatch is the plan's bug, reported as a stage failure."""
    try:
        return kind.model_validate(params)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(map(str, first["loc"])) or "params"
        raise StageError(
            f"the plan gave this stage params it does not take ({kind.__name__}: {where}: "
            f"{first['msg']}); this is a modelbuild bug, please report it"
        ) from None
