"""What a model is, read from its graph: its signature (what a library built from it takes and returns), whether
it arrives quantized or holds float16, and which outputs are normalised pooled features. `modelbuild init`
reads these without TVM; the import stage writes the signature beside the library."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from modelbuild import signature
from modelbuild.errors import InputError
from modelbuild.frontend import float16, qoperator
from modelbuild.frontend.inputs import dims_of, dtype_of, load, real_inputs
from modelbuild.recipe.schema import InputSpec

QUANTIZED_OPS = {"DequantizeLinear", *qoperator.QOPERATORS}


def is_quantized(model) -> bool:
    """Whether the model arrived quantized: onnxruntime's QDQ or QOperator format."""
    return any(node.op_type in QUANTIZED_OPS for node in model.graph.node)


@dataclass(frozen=True)
class ModelFacts:
    """What `modelbuild init` reads of a model to write its recipe, from one load of it."""

    signature: signature.Signature  # the inputs and outputs it declares, dynamic dimensions named (or '?')
    float16: bool  # it keeps float16 values: weights, inputs or outputs
    quantized: bool  # it arrives quantized (QDQ or QOperator)


def model_facts(path: Path) -> ModelFacts:
    model = load(path)
    return ModelFacts(
        signature=signature_of(model, {}), float16=float16.holds_float16(model), quantized=is_quantized(model)
    )


POOLING = {"GlobalAveragePool", "GlobalMaxPool", "AveragePool", "MaxPool", "ReduceMean", "ReduceMax"}
NORMALISING = {"Div", "LpNormalization", "BatchNormalization"}  # x / |x|, and a BatchNorm1d on the features
# what else a feature vector passes through after its pooling: shape ops, a normalisation's folded scale and
# shift, an exporter's (de)quantizing
AFTER_POOLING = NORMALISING | {
    "Flatten",
    "Reshape",
    "Squeeze",
    "Unsqueeze",
    "Identity",
    "Transpose",
    "Cast",
    "Mul",
    "Add",
    "Sub",
    "QuantizeLinear",
    "DequantizeLinear",
}


def feature_outputs(model) -> tuple[str, ...]:
    """The outputs that are normalised pooled features (an embedding model's [1, 2048], L2-normalised), whose
    top-1 means nothing. A pooling with no normalisation after it can be a classifier's logits (SqueezeNet
    pools its last conv's 1000 channels), and a classifier's scores come from a Gemm, MatMul or Softmax."""
    producers = {out: node for node in model.graph.node for out in node.output}

    def normalised_pooling(tensor: str) -> bool:
        node, normalised = producers.get(tensor), False
        while node is not None and node.op_type in AFTER_POOLING:
            normalised |= node.op_type in NORMALISING
            node = producers.get(node.input[0])
        return normalised and node is not None and node.op_type in POOLING

    return tuple(value.name for value in model.graph.output if normalised_pooling(value.name))


def signature_of(model, declared: dict[str, InputSpec]) -> signature.Signature:
    """What the library takes and returns; an input's declared value range travels with it, and the bound
    inputs are listed with their values (the reference runs the original model, which still takes them)."""

    def tensors(values) -> dict[str, dict]:
        return {v.name: {"shape": dims_of(v.type.tensor_type.shape.dim), "dtype": dtype_of(v)} for v in values}

    inputs, outputs = tensors(real_inputs(model).values()), tensors(model.graph.output)
    for name in feature_outputs(model):
        outputs[name]["features"] = True
    for name, spec in inputs.items():
        if name in declared and declared[name].range is not None:
            spec["range"] = list(declared[name].range)
        if name in declared and declared[name].feedback is not None:
            spec["feedback"] = fed_back(name, spec, declared[name].feedback, outputs)
    bound = {
        name: {"dtype": spec.dtype, "value": spec.value} for name, spec in declared.items() if spec.value is not None
    }
    return signature.Signature(inputs=inputs, outputs=outputs, bound=bound)


def fed_back(name: str, spec: dict, output: str, outputs: dict[str, dict]) -> str:
    """The output a streaming input is fed from, checked to exist and to fit the input."""
    if output not in outputs:
        raise InputError(
            f"inputs.{name}.feedback: the model has no output {output!r}; its outputs: "
            + ", ".join(f"{o} {t['dtype']} {t['shape']}" for o, t in outputs.items())
        )
    if (outputs[output]["shape"], outputs[output]["dtype"]) != (spec["shape"], spec["dtype"]):
        raise InputError(
            f"inputs.{name}.feedback: output {output!r} is {outputs[output]['dtype']} "
            f"{outputs[output]['shape']}, the input is {spec['dtype']} {spec['shape']}"
        )
    return output
