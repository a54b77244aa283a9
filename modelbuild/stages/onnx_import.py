"""The import stage: ONNX model -> frozen shapes -> onnxslim -> Relax IRModule saved as JSON."""

from __future__ import annotations

import json
from pathlib import Path

from modelbuild.errors import StageError, last_line

IR_FILE = "ir.json"
SIGNATURE_FILE = "signature.json"
ONNX_FILE = "model.onnx"  # the frozen, simplified model: what the quantize stage calibrates


def run(*, inputs: dict[str, Path], params: dict, out: Path) -> None:
    """Write ir.json (the Relax module, constants included), signature.json (inputs and outputs) and
    model.onnx (the frozen, simplified model)."""
    import onnx

    model = _load(inputs["model"])
    _freeze_inputs(model, params["inputs"])
    if params["simplify"]:
        model = _simplify(model)
    module = to_relax(model, params["inputs"])
    import tvm

    (out / IR_FILE).write_text(tvm.ir.save_json(module))
    onnx.save(model, str(out / ONNX_FILE))
    (out / SIGNATURE_FILE).write_text(json.dumps(_signature(model, onnx), indent=1, sort_keys=True))


def _load(path: Path):
    import onnx

    try:
        return onnx.load(str(path))
    except Exception as err:
        raise StageError(f"{path.name} is not a readable ONNX model: {err}") from err


def _freeze_inputs(model, declared: dict) -> None:
    graph_inputs = {i.name: i for i in model.graph.input}
    initializers = {i.name for i in model.graph.initializer}
    real = [name for name in graph_inputs if name not in initializers]
    for name in declared:
        if name not in graph_inputs:
            raise StageError(f"the model has no input {name!r}; its inputs are {', '.join(real)}")
    missing = [name for name in real if name not in declared]
    if missing:
        raise StageError(f"input {missing[0]!r} has no declared shape; declare it under inputs")
    for name, spec in declared.items():
        dims = graph_inputs[name].type.tensor_type.shape.dim
        if len(dims) != len(spec["shape"]):
            raise StageError(f"input {name!r} has rank {len(dims)} in the model, the recipe gives {spec['shape']}")
        for dim, value in zip(dims, spec["shape"]):
            if dim.HasField("dim_value") and dim.dim_value > 0 and dim.dim_value != value:
                raise StageError(f"input {name!r} is fixed to {_dims(dims)} in the model, recipe says {spec['shape']}")
            dim.ClearField("dim_param")
            dim.dim_value = value


def _dims(dims) -> list:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]


def _simplify(model):
    import onnxslim

    try:
        return onnxslim.slim(model)
    except Exception as err:
        raise StageError(f"onnxslim could not simplify the model: {err}; set simplify = false") from err


def to_relax(model, declared: dict):
    """The ONNX model as a Relax module with the declared input shapes and dtypes."""
    from tvm.relax.frontend import onnx as relax_onnx
    from tvm.relax.frontend.onnx import onnx_frontend

    _check_supported(model, onnx_frontend._get_convert_map())
    shapes = {name: spec["shape"] for name, spec in declared.items()}
    dtypes = {name: spec["dtype"] for name, spec in declared.items()}
    try:
        return relax_onnx.from_onnx(model, shape_dict=shapes, dtype_dict=dtypes, keep_params_in_input=False)
    except Exception as err:
        raise StageError(f"TVM could not import the model: {last_line(err)}") from err


def _check_supported(model, table: dict) -> None:
    """Name the first operator TVM lacks, with its node, before TVM fails somewhere deep."""
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            raise StageError(f"operator {node.domain}.{node.op_type} (node {node.name!r}) is not supported by TVM")
        if node.op_type not in table:
            raise StageError(f"operator {node.op_type} (node {node.name!r}) is not supported by TVM's ONNX frontend")


def _signature(model, onnx) -> dict:
    def tensors(values):
        out = {}
        for value in values:
            t = value.type.tensor_type
            out[value.name] = {"shape": _dims(t.shape.dim), "dtype": onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name}
        return out

    initializers = {i.name for i in model.graph.initializer}
    return {
        "inputs": tensors(i for i in model.graph.input if i.name not in initializers),
        "outputs": tensors(model.graph.output),
    }
