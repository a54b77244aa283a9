"""The import stage: ONNX model -> bound and frozen inputs -> onnxslim -> Relax IRModule saved as JSON.

On the way into TVM, what its ONNX frontend lacks is rewritten (frontend/): recurrent layers unrolled,
QOperator nodes in QDQ form, BatchNorms that simplification could not fold as one multiply-add, SAME
padding as each conv's own, and a Resize's empty scales as none. A model that arrives quantized (QDQ or
QOperator) gets the integer kernels the quantize stage gives its own QDQ models (compiler/integer_ops.py), with
no recalibration.

TVM and onnxslim are imported where they are used: `modelbuild init` reads a model's signature here and
should not wait seconds for them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from modelbuild import signature
from modelbuild.compiler import integer_ops, layer_names
from modelbuild.errors import InputError, StageError, last_line
from modelbuild.frontend import (
    auto_pad,
    batchnorm,
    constant_operators,
    decompositions,
    float16,
    functions,
    inferred,
    loops,
    node_order,
    opset,
    predication,
    qoperator,
    recurrent,
    resize_inputs,
    roi_align,
    topk_order,
)
from modelbuild.recipe.params import ImportParams
from modelbuild.recipe.schema import InputSpec, toml_key
from modelbuild.stages import contracts
from modelbuild.stages.contracts import Role


def run(*, inputs: dict[str, Path], params: dict, out: Path) -> None:
    """Write ir.json (the Relax module, constants included), signature.json (inputs and outputs in graph
    order) and model.onnx (the frozen, simplified model)."""
    p: ImportParams = contracts.read_params(contracts.IMPORT, params)
    model = _load(inputs[Role.MODEL])
    bound = {name: spec for name, spec in p.inputs.items() if spec.value is not None}
    bind_inputs(model, bound)
    frozen = freeze_inputs(model, {name: spec for name, spec in p.inputs.items() if name not in bound})
    # before the domains are checked (a model's functions have their own) and before onnxslim, which folds
    # what an expanded body computes from shapes (CenterCropPad's pads)
    model = functions.expanded(functions.inlined(model), converted_operators())
    _check_domains(model)
    if p.simplify:
        model = _simplify(model)
    module = to_relax(model, frozen)
    if is_quantized(model):
        module = integer_ops.rewrite(module)
    import tvm

    (out / contracts.IR).write_text(tvm.ir.save_json(module))
    onnx.save(model, str(out / contracts.FROZEN_ONNX))
    (out / signature.FILE).write_text(_signature(model, p.inputs).to_json())


def _load(path: Path):
    try:
        model = onnx.load(str(path))
    except Exception as err:
        raise InputError(f"{path.name} is not a readable ONNX model: {last_line(err)}") from err
    _only_tensors(model)
    return model


# what a graph input or output holds where it is no tensor, in the words of the ONNX type it is
NOT_TENSORS = {
    "sequence_type": "a sequence",
    "map_type": "a map",
    "optional_type": "an optional value",
    "sparse_tensor_type": "a sparse tensor",
    None: "of no type",
}


def _only_tensors(model) -> None:
    """A library takes and returns dense tensors: a classifier exported by skl2onnx returns its probabilities
    as a sequence of maps (ZipMap), which has no dtype and stopped `init` with a traceback."""
    for role, values in (("input", _real_inputs(model).values()), ("output", model.graph.output)):
        for value in values:
            kind = value.type.WhichOneof("value")
            if kind == "tensor_type" and value.type.tensor_type.elem_type != onnx.TensorProto.UNDEFINED:
                continue
            what = NOT_TENSORS.get(kind, f"a {kind}") if kind != "tensor_type" else "a tensor of no element type"
            if kind == "sequence_type" and value.type.sequence_type.elem_type.WhichOneof("value") == "map_type":
                what = "a sequence of maps"
            raise InputError(
                f"{role} {value.name!r} is {what}, not a tensor, and a library takes and returns "
                f"tensors only (fix: export the model with tensor {role}s, e.g. skl2onnx's "
                "options={'zipmap': False} for a classifier's probabilities)"
            )


def bind_inputs(model, bound: dict[str, InputSpec]) -> None:
    """Replace each bound graph input by a constant of its value, so that simplification folds what depends
    on it (an `If` on a sample rate, shape arithmetic) and the library no longer takes it."""
    graph_inputs = _real_inputs(model)
    actual = "; the model's inputs: " + ", ".join(_describe(i) for i in graph_inputs.values())
    for name, spec in bound.items():
        if name not in graph_inputs:
            raise InputError(f"the model has no input {name!r} to bind{actual}")
        dims, dtype = graph_inputs[name].type.tensor_type.shape.dim, _dtype(graph_inputs[name])
        if spec.dtype != dtype:
            raise InputError(
                f"input {name!r} is {dtype} in the model, the recipe binds a {spec.dtype} value"
                f' (fix: dtype = "{dtype}"){actual}'
            )
        value = np.array(spec.value, dtype=dtype)
        fixed = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims]
        if len(fixed) != value.ndim or any(f is not None and f != n for f, n in zip(fixed, value.shape)):
            raise InputError(
                f"input {name!r} is {_dims(dims)} in the model, the recipe binds a value of shape "
                f"{list(value.shape)}{actual}"
            )
        model.graph.input.remove(graph_inputs[name])
        model.graph.initializer.append(numpy_helper.from_array(value, name))


def freeze_inputs(model, declared: dict[str, InputSpec]) -> dict[str, dict]:
    """Fix every graph input to its declared shape, or to the model's own where it is fully static; the
    shapes and dtypes used, in graph order. A declaration the model contradicts is bad input, reported with
    the model's actual inputs, so it is fixed once here and not rediscovered by every later stage."""
    graph_inputs = _real_inputs(model)
    actual = "; the model's inputs: " + ", ".join(_describe(i) for i in graph_inputs.values())
    for name in declared:
        if name not in graph_inputs:
            raise InputError(f"the model has no input {name!r}{actual}")
    frozen = {}
    for name, value in graph_inputs.items():
        dims, dtype = value.type.tensor_type.shape.dim, _dtype(value)
        spec = declared.get(name) or _static_spec(name, dims, dtype, actual)
        if spec.dtype != dtype:
            raise InputError(
                f"input {name!r} is {dtype} in the model, the recipe declares {spec.dtype}"
                f' (fix: dtype = "{dtype}"){actual}'
            )
        if len(dims) != len(spec.shape):
            raise InputError(
                f"input {name!r} has rank {len(dims)} in the model, the recipe declares shape {spec.shape}{actual}"
            )
        for dim, size in zip(dims, spec.shape):
            if dim.HasField("dim_value") and dim.dim_value > 0 and dim.dim_value != size:
                raise InputError(
                    f"input {name!r} is fixed to {_dims(dims)} in the model, the recipe declares {spec.shape}{actual}"
                )
            dim.ClearField("dim_param")
            dim.dim_value = size
        frozen[name] = {"shape": list(spec.shape), "dtype": spec.dtype}
    return frozen


def _real_inputs(model) -> dict:
    initializers = {i.name for i in model.graph.initializer}
    return {i.name: i for i in model.graph.input if i.name not in initializers}


def _static_spec(name: str, dims, dtype: str, actual: str) -> InputSpec:
    """An undeclared input's own shape, when the model fixes every dimension of it."""
    shape = _dims(dims)  # [] is a scalar: static
    if not all(isinstance(d, int) and d > 0 for d in shape):
        raise InputError(
            f"input {name!r} has dynamic dimensions {shape}: declare the shape to build for (fix: "
            f'inputs.{toml_key(name)} = {{ shape = [...], dtype = "{dtype}" }} under the model){actual}'
        )
    return InputSpec(shape=shape, dtype=dtype)


def _dtype(value) -> str:
    return onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).name


def _describe(value) -> str:
    return f"{value.name} {_dtype(value)} {_dims(value.type.tensor_type.shape.dim)}"


def _dims(dims) -> list:
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?") for d in dims]


def _simplify(model):
    """onnxslim's simplification, of the graph alone: a graph output's declared shape is metadata that can
    contradict what the graph computes (ddddocr's recogniser declares [1, seqlen] and computes [32, 1, 8210]),
    and onnxslim takes it as a fact, folding the last Reshape to match and so changing the output. The
    shapes it then writes are the ones it infers from the graph, and the declared ones where it infers none."""
    import onnxslim

    try:
        return _with_missing_output_shapes(onnxslim.slim(_without_output_shapes(model)), model)
    except Exception as err:
        raise StageError(f"onnxslim could not simplify the model: {err}; set simplify = false") from err


def _without_output_shapes(model):
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for value in out.graph.output:
        value.type.tensor_type.ClearField("shape")
    return out


def _with_missing_output_shapes(simplified, original):
    declared = {value.name: value for value in original.graph.output}
    for value in simplified.graph.output:
        if not value.type.tensor_type.HasField("shape") and value.name in declared:
            value.type.tensor_type.shape.CopyFrom(declared[value.name].type.tensor_type.shape)
    return simplified


def to_relax(model, declared: dict):
    """The ONNX model as a Relax module with the declared input shapes and dtypes."""
    from tvm.relax.frontend.onnx import onnx_frontend

    model = node_order.topologically_sorted(model)  # as onnxruntime runs an unsorted graph; TVM reads it in order
    model = opset.importable(model)  # first of the rewrites: they write the operators of opset 13
    model = topk_order.sorted_everywhere(model)  # TVM sorts every TopK; the reference stage does the same
    model = loops.unrolled(model)  # TVM has no Loop: one of a constant count, its body written out that often
    model = predication.predicate(model)  # TVM has no If; before the LSTM rewrite, which unrolls a branch's too
    model = qoperator.to_qdq(recurrent.decompose(model))  # TVM has no LSTM, GRU or QLinearConv converter
    model = batchnorm.fold(model)  # what onnxslim could not fold into a (quantized) conv
    model = auto_pad.resolve(model)  # SAME padding as the conv's own, not a pad kernel before it
    model = resize_inputs.absent_when_empty(model)  # an empty scales is no scales, as onnxruntime reads it
    model = constant_operators.folded(model)  # tables TVM lacks, built from constants (HannWindow, ...)
    model = decompositions.decomposed(model)  # operators TVM has no converter for (LpNormalization, STFT, ...)
    model = roi_align.offsets_where_tvm_scales_them(model)  # its converter offsets boxes before scaling them
    _check_supported(model, onnx_frontend._get_convert_map())
    shapes = {name: spec["shape"] for name, spec in declared.items()}
    dtypes = {name: spec["dtype"] for name, spec in declared.items()}
    try:
        return layer_names.from_onnx(model, shapes, dtypes)
    except Exception as err:
        raise StageError(_invalid(model) or f"TVM could not import the model: {last_line(err)}") from err


def converted_operators() -> set[str]:
    """The standard operators the import converts: TVM's, and those the rewrites above write out."""
    from tvm.relax.frontend.onnx import onnx_frontend

    return set(onnx_frontend._get_convert_map()) | set(decompositions.OPERATORS) | set(constant_operators.TABLES)


def _invalid(model) -> str | None:
    """What makes the model invalid ONNX, as onnx's checker says, or None: asked only once TVM has failed on it
    (a graph output that no node computes failed as "TVM could not import the model: 'y'")."""
    import onnx

    try:
        onnx.checker.check_model(model)
    except Exception as err:  # onnx's ValidationError, or a checker that cannot read the model at all
        if SHAPELESS_OUTPUT in str(err):
            return None  # an output declared without a shape: onnxruntime and TVM take it, so it is not the cause
        words = " ".join(str(err).split())  # its messages span lines ("input 'h' of node:\nname: relu ...")
        return f"the model is not valid ONNX: {words} (fix the exporter's graph, or re-export it)"
    return None


# what onnx's checker says of a graph output declared with no shape at all (as onnx.helper writes shape=None)
SHAPELESS_OUTPUT = "Field 'shape' of 'type' is required but missing"


QUANTIZED_OPS = {"DequantizeLinear", *qoperator.QOPERATORS}


def is_quantized(model) -> bool:
    """Whether the model arrived quantized: onnxruntime's QDQ or QOperator format."""
    return any(node.op_type in QUANTIZED_OPS for node in model.graph.node)


def _check_domains(model, known: tuple[str, ...] = ("", "ai.onnx", qoperator.CONTRIB)) -> None:
    """Name the first operator of a domain TVM has no converter for at all, before onnxslim (which failed on
    scikit-learn's ai.onnx.ml operators with "'NoneType' object has no attribute 'opset_import'"). Before the
    rewrites, onnxruntime's own domain is let through: they turn its QOperator operators into ONNX ones."""
    for node in model.graph.node:
        if node.domain not in known:
            raise StageError(
                f"operator {node.domain}.{node.op_type} (node {node.name!r}) is not supported by TVM"
                + DOMAIN_HINTS.get(node.domain, "")
            )


def _check_supported(model, table: dict) -> None:
    """Name the first operator TVM lacks, with its node, before TVM fails somewhere deep."""
    _check_domains(model, ("", "ai.onnx"))
    for node in model.graph.node:
        if node.op_type not in table:
            raise StageError(
                f"operator {node.op_type} (node {node.name!r}) is not supported by TVM's ONNX frontend"
                + _foldable_hint(model, node)
            )
    refused = resize_inputs.unsupported(model)
    if refused:
        raise StageError(refused)


CONTRIB_HINT = (
    "; it is onnxruntime's own operator, written by its graph optimizer or QOperator quantizer: export "
    "the model before onnxruntime optimizes it, or quantize in the QDQ format"
)
DOMAIN_HINTS = {
    qoperator.CONTRIB: CONTRIB_HINT,
    "ai.onnx.ml": "; it is a classical machine-learning operator (scikit-learn's, through skl2onnx), and "
    "TVM compiles neural networks: run this model with onnxruntime",
}
CONTROL_FLOW = {"If": "its condition", "Loop": "its trip count and condition"}


def _foldable_hint(model, node) -> str:
    """For control flow TVM cannot import: the graph inputs it depends on, which binding would fold away."""
    if node.op_type == "Scan":  # its steps are its inputs' length, which the recipe's shapes fix
        why = loops.scan_steps_or_refusal(node, inferred.tensors(model))[1]
        return (
            f"; modelbuild writes a Scan out step by step, and {why}: export the model with the loop unrolled, "
            f"or run it with onnxruntime"
        )
    if node.op_type not in CONTROL_FLOW:
        return ""
    inputs = _upstream_inputs(model, node.input[:2] if node.op_type == "Loop" else node.input[:1])
    carried = _upstream_inputs(model, node.input) if node.op_type != "If" else {}
    if not inputs and carried:  # a loop of a constant count over the model's values that loops.py left
        why = loops.steps_or_refusal(node, inferred.constants(model))[1]
        return (
            f"; {CONTROL_FLOW[node.op_type]} is computed from constants alone, but it runs over values computed "
            f"from input {', '.join(map(repr, carried))}, and {why}: export the model with the loop unrolled "
            f"(torch.onnx.export traces a Python loop unrolled; a scripted one stays a {node.op_type}), or run "
            f"it with onnxruntime"
        )
    if not inputs:  # onnxslim folds control flow on constants: only simplify = false leaves it
        return (
            f"; {CONTROL_FLOW[node.op_type]} is computed from constants alone: simplify = true (the default) "
            f"folds it away"
        )
    fixes = " and ".join(
        f'inputs.{toml_key(name)} = {{ value = ..., dtype = "{_dtype(value)}" }}' for name, value in inputs.items()
    )
    return (
        f"; {CONTROL_FLOW[node.op_type]} depends on input {', '.join(map(repr, inputs))}: bind it to a constant "
        f"and the {node.op_type} folds away (fix: {fixes} under the model)"
    )


def _upstream_inputs(model, tensors) -> dict:
    """The graph inputs the tensors are computed from, in graph order."""
    producers = {out: n for n in model.graph.node for out in n.output}
    graph_inputs = _real_inputs(model)
    seen, todo, found = set(), list(tensors), set()
    while todo:
        tensor = todo.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        if tensor in graph_inputs:
            found.add(tensor)
        elif tensor in producers:
            todo += list(producers[tensor].input)
    return {name: value for name, value in graph_inputs.items() if name in found}


@dataclass(frozen=True)
class ModelFacts:
    """What `modelbuild init` reads of a model to write its recipe, from one load of it."""

    signature: signature.Signature  # the inputs and outputs it declares, dynamic dimensions named (or '?')
    float16: bool  # it keeps float16 values: weights, inputs or outputs
    quantized: bool  # it arrives quantized (QDQ or QOperator)


def model_facts(path: Path) -> ModelFacts:
    model = _load(path)
    return ModelFacts(
        signature=_signature(model, {}), float16=float16.holds_float16(model), quantized=is_quantized(model)
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


def _signature(model, declared: dict[str, InputSpec]) -> signature.Signature:
    """What the library takes and returns; an input's declared value range travels with it, and the bound
    inputs are listed with their values (the reference runs the original model, which still takes them)."""

    def tensors(values) -> dict[str, dict]:
        return {v.name: {"shape": _dims(v.type.tensor_type.shape.dim), "dtype": _dtype(v)} for v in values}

    inputs, outputs = tensors(_real_inputs(model).values()), tensors(model.graph.output)
    for name in feature_outputs(model):
        outputs[name]["features"] = True
    for name, spec in inputs.items():
        if name in declared and declared[name].range is not None:
            spec["range"] = list(declared[name].range)
        if name in declared and declared[name].feedback is not None:
            spec["feedback"] = _fed_back(name, spec, declared[name].feedback, outputs)
    bound = {
        name: {"dtype": spec.dtype, "value": spec.value} for name, spec in declared.items() if spec.value is not None
    }
    return signature.Signature(inputs=inputs, outputs=outputs, bound=bound)


def _fed_back(name: str, spec: dict, output: str, outputs: dict[str, dict]) -> str:
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
