"""`modelbuild init`: a first deploy.toml for a model, written from what the model itself declares.

Pure text from a signature, so it is tested without onnx; the CLI reads the model (through the import
stage's reader) and writes the file.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from modelbuild.recipe.schema import toml_key
from modelbuild.signature import Signature

# Written where the model leaves a dimension dynamic; the recipe loader names it as a placeholder to set.
PLACEHOLDER = 0

SCHEMA_FILE = "modelbuild.schema.json"  # written beside the recipe: the JSON Schema its #:schema line names
TARGET_PRESETS: dict[str, tuple[str, dict]] = {
    "host": ("this machine's CPU, all its cores", {"kind": "llvm", "mcpu": "host", "num-cores": os.cpu_count() or 1}),
    "x86-server": (
        "an x86-64 server: this CPU, two cores (a CI runner)",
        {"kind": "llvm", "mcpu": "host", "num-cores": 2},
    ),
    "rpi4": (
        "Raspberry Pi 4 (Cortex-A72, 64-bit OS); cross-compiled, objects unless a cross linker is set",
        {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72", "mattr": ["+neon"], "num-cores": 4},
    ),
    "cuda": (
        "an NVIDIA GPU of compute capability 8.0 or newer (A100, L4, H100); validated where the CUDA driver "
        "sees one, with pip install 'modelbuild[cuda]'",
        {"kind": "cuda", "arch": "sm_80"},
    ),
}

VALIDATION_PRESETS = {
    "classifier": (
        "scores per class: tight accuracy and top-1 agreement against onnxruntime",
        {"max_abs_error": 1e-4, "min_cosine": 0.9999, "min_top1_agreement": 1.0},
    ),
    "detector": (
        "maps, boxes or other regressed values: relative gates, since absolute error scales with the "
        "outputs' units (pixels)",
        {"min_cosine": 0.9999, "min_sqnr_db": 60},
    ),
}


# a float16 model, compiled for a CPU in float32 (compiler/passes/float16_compute.py), differs from onnxruntime, which
# rounds every intermediate tensor to float16, by float16's precision: one unit in the last place of a
# probability near 1 is 1e-3, so no absolute bound, and an SQNR float16 can reach
HALF_PRECISION_GATES = {
    "classifier": {"min_cosine": 0.9999, "min_top1_agreement": 1.0},
    "detector": {"min_cosine": 0.9999, "min_sqnr_db": 40},
}

# a model that arrives quantized is compared with onnxruntime running it, and two int8 implementations of one
# model round differently: onnxruntime's own int8 kernels against its float emulation of the same QDQ model
# agree at cosine 0.9975-0.998 on EfficientWord-Net's ResNet-50 (SQNR 23 dB). The gates of int8-ci.
QUANTIZED_GATES = {"classifier": {"min_cosine": 0.99, "min_top1_agreement": 0.99}, "detector": {"min_cosine": 0.99}}


@dataclass(frozen=True)
class Preset:
    """The validation a written recipe starts with: the model's kind and the precision it computes in."""

    kind: str  # "classifier" or "detector"
    precision: str  # "float32", "float16" or "int8" (it arrives quantized)

    @classmethod
    def of(cls, signature: Signature, *, float16: bool = False, quantized: bool = False) -> Preset:
        return cls(model_kind(signature), "int8" if quantized else "float16" if float16 else "float32")

    @property
    def title(self) -> str:
        return self.kind if self.precision == "float32" else f"{self.kind} {self.precision}"

    @property
    def description(self) -> str:
        described = VALIDATION_PRESETS[self.kind][0]
        return (
            described
            + {
                "float32": "",
                "float16": "; float16 values: tolerances of float16's precision",
                "int8": "; it arrives quantized: tolerances of two int8 implementations",
            }[self.precision]
        )

    @property
    def gates(self) -> dict:
        return {
            "float32": VALIDATION_PRESETS[self.kind][1],
            "float16": HALF_PRECISION_GATES[self.kind],
            "int8": QUANTIZED_GATES[self.kind],
        }[self.precision]


# a byte input is most often an image's pixels: golden and calibration data drawn from every value a byte
# holds, not the loader's default of 0 to 9 for integers
BYTE_RANGES = {"uint8": [0, 256], "int8": [-128, 128]}


def model_kind(signature: Signature) -> str:
    """'classifier' when every output is [batch, classes] scores; otherwise 'detector' (maps, boxes, and
    embeddings, whose top-1 means nothing)."""

    def scores(spec: dict) -> bool:
        shape = spec["shape"]
        return len(shape) == 2 and isinstance(shape[1], int) and shape[1] >= 2 and not spec.get("features")

    return "classifier" if signature.outputs and all(scores(o) for o in signature.outputs.values()) else "detector"


def recipe_name(model_file: str) -> str:
    """A recipe name from the file name: letters, digits, '_', '.', '-' (no '+' or '@', which builds use)."""
    stem = os.path.splitext(os.path.basename(model_file))[0]
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", stem)
    return name if re.match(r"[A-Za-z0-9_]", name) else f"m_{name}"


def write_recipe(
    *,
    model_path: str,
    signature: Signature,
    preset: Preset | None = None,
    target: str = "host",
    name: str | None = None,
    int8: bool = False,
    schema: str | None = None,
) -> str:
    """The text of a deploy.toml that builds this model for one target preset, validated as `preset` says
    (by default, as a float32 model of the kind its outputs suggest). With `int8`, an int8 build beside the
    float one, each with its own gates: a build's gates override the recipe's one by one, so an int8 build
    under float's recipe-wide gates would keep float's SQNR or absolute bound, which int8 never meets. With
    `schema`, a first line `#:schema PATH` that editors (taplo, Even Better TOML) complete and check it by."""
    name = name or recipe_name(model_path)
    preset = preset or Preset.of(signature)
    lines = [f"#:schema {schema}"] if schema else []
    lines += [
        f"# Written by `modelbuild init {model_path}{' --int8' if int8 else ''}`. `modelbuild` builds it; "
        "`modelbuild schema`",
        "# lists every field, and docs/guide/recipe.md explains them.",
        "",
        f"[models.{toml_key(name)}]",
        f"path = {_toml(model_path)}",
    ]
    lines += [line for input_name, spec in signature.inputs.items() for line in _input_lines(input_name, spec)]
    description, table = TARGET_PRESETS[target]
    lines += ["", f"# target preset {target!r}: {description}", f"[targets.{target}]"]
    lines += [f"{key} = {_toml(value)}" for key, value in table.items()]
    lines += [
        "",
        f"# validation preset {preset.kind!r}: {preset.description}",
        "[validation]",
        'golden = { count = 8 }  # random inputs; real ones: source = "images" or "npz", path = ...',
        "timing = { warmup = 10, min_runs = 50, min_seconds = 1.0 }",
        "",
    ]
    build = ["[[builds]]", f"model = {_toml(name)}", f'targets = ["{target}"]']
    if not int8:
        lines += ["[validation.gates]", *_gate_lines(preset.gates), "", *build, ""]
        return "\n".join(lines)
    lines += [
        "# int8: calibrated on samples the golden inputs never repeat; random ones calibrate a real model",
        "# poorly (the report warns): give it inputs like those it will serve",
        "[quantization.int8]",
        'calibration = { source = "random", samples = 32 }  # real ones: source = "images" or "npz", path = ...',
        "",
        *build,
        f"validation.gates = {{ {', '.join(_gate_lines(preset.gates))} }}",
        "",
        "# int8 keeps the model's accuracy, not float's last bits: the int8 preset's gates. For the fastest",
        '# configuration that passes them, add search = "fastest" and a [search.fastest] section, and run',
        f"# `modelbuild search {name}+int8@{target}` (docs/guide/int8.md, search). Its latency against the float build",
        "# (vs_float) is timed with the float library in turns, in the same process (timing.beside_float).",
        *build,
        'quantization = "int8"',
        f"validation.gates = {{ {', '.join(_gate_lines(QUANTIZED_GATES[preset.kind]))} }}",
        "validation.timing = { beside_float = true }",
        "",
    ]
    return "\n".join(lines)


def _gate_lines(gates: dict) -> list[str]:
    return [f"{gate} = {_toml(limit)}" for gate, limit in gates.items()]


def with_sizes(signature: Signature, sizes: dict[str, list[int]]) -> Signature:
    """The signature with the sizes given on the command line (`--input x=1,3,224,224`) in place of its
    inputs' shapes; ValueError names an input the model lacks, a rank that differs, or a size that
    contradicts a dimension the model fixes."""
    inputs = dict(signature.inputs)
    for name, shape in sizes.items():
        if name not in inputs:
            raise ValueError(f"--input {name}: the model has no input {name!r} (its inputs: {', '.join(inputs)})")
        model_shape = inputs[name]["shape"]
        if len(shape) != len(model_shape):
            raise ValueError(
                f"--input {name}: {len(shape)} sizes for an input of rank {len(model_shape)} {model_shape}"
            )
        fixed = [i for i, d in enumerate(model_shape) if i not in dynamic_dims(model_shape) and d != shape[i]]
        if fixed:
            i = fixed[0]
            raise ValueError(f"--input {name}: dimension {i} is {model_shape[i]} in the model, not {shape[i]}")
        inputs[name] = {**inputs[name], "shape": list(shape)}
    return Signature(inputs=inputs, outputs=signature.outputs, bound=signature.bound)


def dynamic_dims(shape: list) -> list[int]:
    return [i for i, d in enumerate(shape) if not (isinstance(d, int) and d > 0)]


def _input_lines(name: str, spec: dict) -> list[str]:
    shape = spec["shape"]
    dynamic = dynamic_dims(shape)
    fixed = [PLACEHOLDER if i in dynamic else d for i, d in enumerate(shape)]
    whole_range = BYTE_RANGES.get(spec["dtype"])
    extra = f", range = {_toml(whole_range)}" if whole_range else ""
    line = f'inputs.{toml_key(name)} = {{ shape = {_toml(fixed)}, dtype = "{spec["dtype"]}"{extra} }}'
    if not dynamic:
        return [line]
    which = ", ".join(f"{i} ({shape[i]!r})" for i in dynamic)
    return [
        f"# TODO: dimension{'s' if len(dynamic) > 1 else ''} {which} of {name!r} "
        f"{'are' if len(dynamic) > 1 else 'is'} dynamic in the model: replace each {PLACEHOLDER} with the size "
        "to build for",
        line,
    ]


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: the same escapes'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)
