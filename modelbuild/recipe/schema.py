"""The recipe's schema: pydantic models that reject unknown keys, so a typo is never silently ignored."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")]
# a tensor is named as its model names it: exporters write "input:0" (tf2onnx), "input.1", "onnx::Conv_0" (torch)
TensorName = Annotated[str, StringConstraints(min_length=1)]


def toml_key(name: str) -> str:
    """A name as a recipe writes it as a key: bare where TOML allows, else quoted (an ONNX name may hold ':' or
    '/', and a '.' in a bare key would make nested tables)."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)  # a TOML basic string


DType = Literal["float32", "float16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, strict=True)


Scalar = float | int | bool
Value = Scalar | list[Any]  # a scalar or nested lists of them


class InputSpec(Strict):
    """One model input: frozen to a static shape before import, or bound to a constant."""

    shape: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None, description="The shape to build for; [] for a scalar. Required unless value is given."
    )
    dtype: DType = "float32"
    range: list[float] | None = Field(
        default=None,
        min_length=2,
        max_length=2,
        description="[low, high): generated golden and calibration data are drawn from it (uniformly; integers "
        "low <= v < high), e.g. valid token ids [0, 257]. Default: normal floats, integers 0 to 9.",
    )
    value: Value | None = Field(
        default=None,
        description="Bind the input to this constant before simplification: control flow and shape "
        "arithmetic on it fold away, and it leaves the library's signature.",
    )
    feedback: TensorName | None = Field(
        default=None,
        description="An output fed back into this input from one golden sample to the next (a "
        "streaming model's state): the samples are consecutive chunks of one stream, "
        "the first starting from zeros; the library is fed its own outputs.",
    )

    @model_validator(mode="after")
    def _shape_or_value(self) -> InputSpec:
        if self.value is None:
            if self.shape is None:
                raise ValueError(
                    "give the shape to build for (shape = [1, 3, 224, 224]; [] for a scalar), "
                    "or bind the input to a value (value = 16000)"
                )
            return self
        if self.range is not None or self.feedback is not None:
            raise ValueError("a bound input has one value: drop range and feedback, or drop value")
        shape = nested_shape(self.value)
        if shape is None:
            raise ValueError(f"value is not a scalar or a rectangular list: {self.value!r}")
        if self.shape is not None and self.shape != shape:
            raise ValueError(f"value has shape {shape}, the input declares shape {self.shape}")
        return self


def nested_shape(value: Any) -> list[int] | None:
    """The shape of a scalar ([]) or of nested lists of equal lengths; None when ragged."""
    if not isinstance(value, list):
        return []
    if not value:
        return None
    inner = [nested_shape(v) for v in value]
    if any(s is None or s != inner[0] for s in inner):
        return None
    return [len(value), *inner[0]]


class ModelSpec(Strict):
    """An ONNX model and the shapes it is built for."""

    path: str = Field(description="The .onnx file, relative to the recipe.")
    inputs: dict[TensorName, InputSpec] = Field(
        default_factory=dict,
        description="Shapes to build for; an input left out keeps the model's own shape, which must then be static.",
    )
    simplify: bool = Field(default=True, description="Simplify with onnxslim before import.")


class ImagePreprocess(Strict):
    """How an image file becomes an input tensor: x = (pixel * scale - mean) / std, per channel."""

    resize: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None, min_length=2, max_length=2, description="[height, width]; default: the input's"
    )
    scale: float = 1 / 255
    mean: list[float] = Field(default_factory=lambda: [0.0, 0.0, 0.0])
    std: list[float] = Field(default_factory=lambda: [1.0, 1.0, 1.0])
    layout: Literal["NCHW", "NHWC"] = "NCHW"
    color: Literal["RGB", "BGR", "L"] = "RGB"


class GoldenSpec(Strict):
    """Where the golden inputs come from: generated with a seed, or loaded from files."""

    source: Literal["generate", "npz", "npy_dir", "images"] = "generate"
    fill: Literal["random", "zeros", "ones"] = "random"
    seed: int = 0
    count: int = Field(default=4, ge=1, description="Number of golden samples.")
    path: str | None = Field(default=None, description="The .npz file, .npy folder or image folder.")
    preprocess: ImagePreprocess = ImagePreprocess()


class TimingSpec(Strict):
    """How latency is measured: warm-up, then at least min_runs runs and at least min_seconds."""

    warmup: int = Field(default=10, ge=0)
    min_runs: int = Field(default=50, ge=1)
    min_seconds: float = Field(default=1.0, ge=0)
    max_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Stop timing after this long even if min_runs is not reached: a slow "
        "library still validates in bounded time (the report gives the runs).",
    )
    threads: int | None = Field(default=None, ge=1, description="Default: the target's num-cores.")
    processes: int = Field(
        default=1,
        ge=1,
        description="Time the library in this many fresh processes, one after another: two "
        "processes of one library differ by more than the runs within one, so a "
        "baseline gate needs 3 or more to tell a regression from that variation.",
    )
    scaling: bool = Field(
        default=False,
        description="Also time 1..threads threads and fit Amdahl's law (opt-in: one more timing run per thread count).",
    )
    roofline: bool = Field(
        default=False,
        description="Time the heaviest kernels against the machine's peaks "
        "(opt-in: costs a BLAS and memory benchmark).",
    )
    beside_float: bool = Field(
        default=False,
        description="A quantized build: time the library of the float build of its model and "
        "target (declared in the recipe) in turns with its own, in the same processes, "
        "so vs_float compares runs that saw the same machine (one library moves "
        "10-27% between processes on a shared machine). A float build ignores it.",
    )


class BaselineSpec(Strict):
    """Gates relative to an earlier report.json (for example the main branch's)."""

    report: str | None = Field(
        default=None,
        description="The baseline's report.json, relative to the recipe; or `modelbuild --baseline "
        "REPORT`, which replaces it. With neither (a push to main has no baseline), "
        "the baseline gates are not checked.",
    )
    timed_together: bool = Field(
        default=False,
        description="Time the baseline's own library (the baseline's build folder, its report.json "
        "and libraries, copied whole) in turns with this build's, in the same "
        "processes: the machine's noise falls on both, so the latency gates see a "
        "15% slowdown that separate timings lose in noise. Builds validated here.",
    )
    max_p50_increase: float | None = Field(default=None, description="0.10 = at most 10% above the baseline")
    max_p99_increase: float | None = None
    min_throughput_ratio: float | None = Field(default=None, description="0.9 = at least 90% of the baseline")
    max_cosine_drop: float | None = Field(
        default=None,
        ge=0,
        description="0.001 = no output's cosine against the float reference 0.001 below the baseline's",
    )
    max_sqnr_drop_db: float | None = Field(
        default=None, ge=0, description="3 = no output's SQNR 3 dB below the baseline's"
    )


def _false_turns_off(schema: dict) -> None:
    """Editors validating a recipe against the JSON Schema accept the `false` the loader takes as "off"."""
    for prop in schema["properties"].values():
        prop.setdefault("anyOf", []).append({"const": False})


class GatesSpec(Strict):
    """What "good enough" means; every gate is optional. A build's own gates override the recipe's one by one,
    and `false` turns one off (float's recipe-wide SQNR under an int8 build, say)."""

    model_config = ConfigDict(**Strict.model_config, json_schema_extra=_false_turns_off)

    @model_validator(mode="before")
    @classmethod
    def _false_turns_a_gate_off(cls, data):
        # set to None explicitly, the gate stays in the fields a build sets, so it overrides the recipe's limit
        return {k: None if v is False else v for k, v in data.items()} if isinstance(data, dict) else data

    max_abs_error: float | None = None
    max_rel_error: float | None = None
    min_cosine: float | None = None
    min_sqnr_db: float | None = None
    min_top1_agreement: float | None = Field(default=None, ge=0, le=1)
    max_p50_ms: float | None = None
    max_p99_ms: float | None = None
    min_throughput: float | None = Field(default=None, description="Inferences per second.")


class ValidationSpec(Strict):
    """How a built library is checked against the ONNX model run by onnxruntime."""

    enabled: bool = True
    golden: GoldenSpec = GoldenSpec()
    timing: TimingSpec = TimingSpec()
    gates: GatesSpec = GatesSpec()
    baseline: BaselineSpec | None = None
    not_run_here: Literal["pass", "fail"] = Field(
        default="pass", description="A target this machine cannot run (cross-compiled, no GPU): pass or fail."
    )


class TuningSpec(Strict):
    """MetaSchedule tuning: how many trials each task gets, how candidates are searched and measured."""

    trials_per_task: int = Field(default=64, ge=0, description="0 applies the records already known, no search.")
    max_trials: int | None = Field(default=None, ge=0, description="A cap on trials measured in one run.")
    tasks: int | None = Field(
        default=None,
        ge=1,
        description="Search only this many tasks: those that take longest under the default "
        "schedule (time x calls); the others keep it. None searches every task.",
    )
    strategy: Literal["evolutionary", "replay-trace", "replay-func"] = "evolutionary"
    cost_model: Literal["xgb", "mlp", "random"] = "xgb"
    number: int = Field(default=3, ge=1, description="Runs per measurement.")
    repeat: int = Field(default=1, ge=1)
    min_repeat_ms: int = Field(default=100, ge=0)
    timeout_s: float = Field(default=30.0, gt=0)
    runner: Literal["local"] = Field(
        default="local",
        description="Where candidates are measured: this machine, or "
        "the devices of the target's rpc key, one candidate at a time on each.",
    )
    seed: int = 0
    records: str | None = Field(default=None, description="A `modelbuild tune export` file to start from.")


class CalibrationSpec(Strict):
    """Where calibration samples come from, and how ranges are chosen from them."""

    method: Literal["minmax", "percentile", "entropy"] = Field(
        default="minmax",
        description="minmax had the best worst case on both bundled models (what a min_cosine "
        "gate checks); percentile the best median on the detector (docs/guide/int8.md)",
    )
    percentile: float = Field(
        default=99.99,
        gt=50,
        le=100,
        description="with method percentile: the share of |x| kept unclipped "
        "(onnxruntime's default, 99.999, clipped too little here)",
    )
    samples: int = Field(default=32, ge=1)
    source: Literal["random", "npz", "npy_dir", "images"] = Field(
        default="random", description="random data is a last resort: the report warns about it"
    )
    path: str | None = Field(default=None, description="The .npz file, .npy folder or image folder of source.")
    preprocess: ImagePreprocess = ImagePreprocess()
    seed: int = Field(default=0, description="The seed of random samples.")


# ConvTranspose is quantized too: unet_ish's int8 library ran at 0.72x of its float one with its three 2x2
# upsamplings in int8 (in float their 1x1 convs ran channels-last and the reorderings, fused with the skips'
# concatenations, read them back in NCHW), the bundled detector's at 0.98x (bench/results, Intel Xeon with AMX)
INTEGER_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")


class QuantizationSpec(Strict):
    """Static int8 quantization with onnxruntime (QDQ), then integer kernels in TVM."""

    scheme: Literal["symmetric", "affine"] = Field(
        default="symmetric", description="symmetric: int8 activations, zero point 0; affine: uint8 with zero point"
    )
    per_channel: bool = True
    calibration: CalibrationSpec = CalibrationSpec()
    ops: list[str] = Field(
        default_factory=lambda: list(INTEGER_OPS),
        description="op types quantized (their inputs get quantize/dequantize); ['*'] for every op onnxruntime "
        "can quantize. The default is the ops whose integer kernels are faster: a quantize/dequantize "
        "pair around an element-wise op costs more than the op and adds rounding error",
    )
    quantize_outputs: bool = Field(
        default=False,
        description="also quantize the outputs of the quantized ops, as onnxruntime does by "
        "default. modelbuild's integer kernels rescale to float, so quantizing only "
        "their inputs is faster and loses less accuracy",
    )
    smoothing: bool = Field(
        default=True,
        description="divide each quantized conv's input channels by their calibrated magnitude "
        "and multiply its weights by it, so one int8 scale fits every channel",
    )
    bias_correction: bool = Field(
        default=True,
        description="subtract from each quantized conv's bias the mean error int8 leaves in its "
        "output, measured on calibration samples",
    )
    exclude_ops: list[str] = Field(default_factory=list, description="op types left in float, e.g. Softmax")
    exclude_nodes: list[str] = Field(default_factory=list, description="node names left in float")
    int16_nodes: list[str] = Field(
        default_factory=list,
        description="node names whose input activations are int16 (weights stay int8), "
        "['*'] for every quantized node: computed as two int8 operators, twice "
        "their int8 cost, for the layers whose int8 inputs lose most (the "
        "report's sensitivity table)",
    )
    int16_most_sensitive: int = Field(
        default=0,
        ge=0,
        description="also give int16 inputs to this many layers, those whose int8 data alone "
        "costs the most output error on the calibration samples",
    )
    sensitivity: bool = Field(
        default=True,
        description="rank the quantized layers by their share of the output error, for the report "
        "and the search (two model runs per layer and calibration sample: 8 s on the "
        "bundled classifier, 40 s on the detector)",
    )
    weight_rounding: Literal["nearest", "gptq"] = Field(
        default="nearest",
        description="gptq rounds each conv's weights so that the rounding errors compensate "
        "on the calibration inputs (GPTQ); it pays where activations are precise "
        "(int16), not with int8 activations (docs/guide/int8.md)",
    )


class SearchSpec(Strict):
    """`modelbuild search BUILD`: the fastest configuration of a quantized build that passes the build's own
    accuracy gates on its held-out golden inputs. It starts from the build's quantization section, raises the
    layers its sensitivity ranking puts first to a higher precision, a few more at a time, and tries the
    settings below; every candidate is a cached build."""

    precisions: list[Literal["int16", "float"]] = Field(
        default_factory=lambda: ["int16", "float"],
        min_length=1,
        description="what the most sensitive layers may be raised to, each tried: int16 inputs (int8 weights, "
        "about twice an int8 layer's cost) or float",
    )
    weight_rounding: list[Literal["nearest", "gptq"]] | None = Field(
        default=None, min_length=1, description="weight roundings to try; default: the quantization section's"
    )
    calibration_methods: list[Literal["minmax", "percentile", "entropy"]] | None = Field(
        default=None, min_length=1, description="calibration methods to try; default: the quantization section's"
    )
    calibration_samples: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None, min_length=1, description="calibration sample counts to try; default: the section's"
    )
    objective: Literal["p50", "p99", "size"] = Field(
        default="p50",
        description="what the chosen configuration is lowest in: median or p99 latency, or "
        "library bytes (the same on every machine)",
    )
    max_candidates: int = Field(default=30, ge=1, description="stop after this many candidate builds")
    max_minutes: float | None = Field(default=None, gt=0, description="stop starting candidates after this long")


class BuildSpec(Strict):
    """Which model goes to which targets, how they are compiled, and how validation differs from the defaults."""

    model: Name
    targets: list[Name] = Field(min_length=1)
    fuse: bool = Field(default=True, description="Operator fusion (false builds the unfused library, to measure).")
    opt_level: int = Field(default=3, ge=0, le=4)
    layout: Literal["auto", "NCHW", "NHWC"] = Field(
        default="auto",
        description="conv2d layout: auto converts float convs to NHWC (vectorised over channels) "
        "where their work pays for the transposes at the model's edges, and keeps integer convs NCHW; "
        "NCHW keeps the model's; NHWC converts all.",
    )
    tuning: Name | None = Field(default=None, description="A [tuning.NAME] section; none builds untuned.")
    quantization: Name | None = Field(default=None, description="A [quantization.NAME] section; none is float.")
    schedule: Literal["default", "none"] = Field(
        default="default",
        description="Kernels without a tuning record get modelbuild's parallel, vectorised "
        "default schedule; none leaves them as stock TVM does (serial loops).",
    )
    validation: ValidationSpec | None = None
    search: Name | None = Field(
        default=None,
        description="A [search.NAME] section that `modelbuild search` runs for this build; a "
        "build never searches: it builds its quantization section as written.",
    )


class CacheSpec(Strict):
    """Where a team shares what its builds made. Not part of any key: where a result came from never changes it."""

    remote: str | None = Field(
        default=None,
        description="A remote cache that fsspec opens: s3://bucket/prefix first; gs://, a shared "
        "folder or http(s):// by the same code. Credentials come from the environment "
        "only. MODELBUILD_REMOTE_CACHE overrides it.",
    )
    mode: Literal["read", "readwrite", "off"] = Field(
        default="readwrite",
        description="read: take results from the remote, never write to it (pull requests); "
        "readwrite: take and give (trusted CI); off. MODELBUILD_CACHE_MODE or "
        "--cache-mode override it.",
    )


class ExecutorSpec(Strict):
    """Where stages run. Not part of any key: a library built on a cluster is the one built here."""

    kind: Literal["local", "ray", "auto"] = Field(
        default="local",
        description="local: a pool of processes on this machine; ray: every stage that does not time on this "
        "machine runs on the Ray cluster at `address` (one that does not answer fails the build); auto: the "
        "cluster where it answers, else this machine, with a note. --executor or MODELBUILD_EXECUTOR "
        "override it.",
    )
    address: str | None = Field(
        default=None,
        pattern=r"^ray://[^/:]+:[0-9]+$",
        description="The cluster's Ray Client address, ray://HOST:PORT (its head's client server, port 10001 "
        "by default). Its workers take inputs from and give outputs to the remote cache ([cache] remote).",
    )

    @model_validator(mode="after")
    def _address_for_ray(self) -> ExecutorSpec:
        if self.kind == "ray" and self.address is None:
            raise ValueError('kind = "ray" needs address = "ray://HOST:PORT", the cluster\'s head')
        return self


class Recipe(Strict):
    """A whole deploy.toml after its includes are merged."""

    include: list[str] = Field(default_factory=list, description="Recipe pieces merged under this file.")
    models: dict[Name, ModelSpec] = Field(min_length=1, description="The ONNX models, by the name builds use.")
    targets: dict[Name, dict[str, Any]] = Field(
        min_length=1, description='TVM target JSON per name, e.g. kind = "llvm", mcpu = "host".'
    )
    builds: list[BuildSpec] = Field(min_length=1, description="Which model goes to which targets, and how.")
    validation: ValidationSpec = Field(
        default_factory=ValidationSpec, description="Accuracy, timing and gates for every build."
    )
    tuning: dict[Name, TuningSpec] = Field(default_factory=dict, description="Tuning settings a build names.")
    quantization: dict[Name, QuantizationSpec] = Field(default_factory=dict, description="int8 settings a build names.")
    search: dict[Name, SearchSpec] = Field(
        default_factory=dict, description="Searches for the fastest build that passes the gates."
    )
    cache: CacheSpec = Field(default_factory=CacheSpec, description="The local store's limits and a remote cache.")
    executor: ExecutorSpec = Field(
        default_factory=ExecutorSpec, description="Where stages run: this machine, or a Ray cluster."
    )


def json_schema() -> dict:
    """The JSON Schema of deploy.toml, for editors (taplo, Even Better TOML)."""
    schema = Recipe.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "modelbuild deploy.toml"
    return schema
