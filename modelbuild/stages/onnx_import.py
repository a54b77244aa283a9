"""The import stage: ONNX model -> bound and frozen inputs -> onnxslim -> Relax IRModule saved as JSON.

On the way into TVM, what its ONNX frontend lacks is rewritten (frontend/): recurrent layers unrolled,
QOperator nodes in QDQ form, BatchNorms that simplification could not fold as one multiply-add, SAME
padding as each conv's own, and a Resize's empty scales as none. A model that arrives quantized (QDQ or
QOperator) gets the integer kernels the quantize stage gives its own QDQ models (compiler/integer_ops.py), with
no recalibration.
The inputs are bound and frozen, and the signature read, by frontend/inputs.py and frontend/facts.py, which
`modelbuild init` uses too; TVM and onnxslim are imported where they are used."""

from __future__ import annotations

from pathlib import Path

import onnx

from modelbuild import signature
from modelbuild.compiler import integer_ops, layer_names
from modelbuild.errors import StageError, last_line
from modelbuild.frontend import (
    auto_pad,
    batchnorm,
    constant_operators,
    decompositions,
    facts,
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
from modelbuild.frontend import inputs as model_inputs
from modelbuild.recipe.params import ImportParams
from modelbuild.recipe.schema import toml_key
from modelbuild.stages import contracts
from modelbuild.stages.contracts import Role


def run(*, inputs: dict[str, Path], params: dict, out: Path) -> None:
    """Write ir.json (the Relax module, constants included), signature.json (inputs and outputs in graph
    order) and model.onnx (the frozen, simplified model)."""
    p: ImportParams = contracts.read_params(contracts.IMPORT, params)
    model = model_inputs.load(inputs[Role.MODEL])
    bound = {name: spec for name, spec in p.inputs.items() if spec.value is not None}
    model_inputs.bind_inputs(model, bound)
    frozen = model_inputs.freeze_inputs(model, {name: spec for name, spec in p.inputs.items() if name not in bound})
    # before the domains are checked (a model's functions have their own) and before onnxslim, which folds
    # what an expanded body computes from shapes (CenterCropPad's pads)
    model = functions.expanded(functions.inlined(model), converted_operators())
    _check_domains(model)
    if p.simplify:
        model = _simplify(model)
    module = to_relax(model, frozen)
    if facts.is_quantized(model):
        module = integer_ops.rewrite(module)
    import tvm

    (out / contracts.IR).write_text(tvm.ir.save_json(module))
    onnx.save(model, str(out / contracts.FROZEN_ONNX))
    (out / signature.FILE).write_text(facts.signature_of(model, p.inputs).to_json())


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
        f'inputs.{toml_key(name)} = {{ value = ..., dtype = "{model_inputs.dtype_of(value)}" }}'
        for name, value in inputs.items()
    )
    return (
        f"; {CONTROL_FLOW[node.op_type]} depends on input {', '.join(map(repr, inputs))}: bind it to a constant "
        f"and the {node.op_type} folds away (fix: {fixes} under the model)"
    )


def _upstream_inputs(model, tensors) -> dict:
    """The graph inputs the tensors are computed from, in graph order."""
    producers = {out: n for n in model.graph.node for out in n.output}
    graph_inputs = model_inputs.real_inputs(model)
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
