"""A model's graph inputs as a recipe declares them: bound to constants, or frozen to static shapes, checked
against what the model itself fixes, each refusal one line that names the input, the model's inputs and the
fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from modelbuild.errors import InputError, last_line
from modelbuild.recipe.schema import InputSpec, toml_key


def load(path: Path):
    """The ONNX model at `path`, refused where it is unreadable or takes or returns something not a tensor."""
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
    for role, values in (("input", real_inputs(model).values()), ("output", model.graph.output)):
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
    graph_inputs = real_inputs(model)
    actual = "; the model's inputs: " + ", ".join(describe(i) for i in graph_inputs.values())
    for name, spec in bound.items():
        if name not in graph_inputs:
            raise InputError(f"the model has no input {name!r} to bind{actual}")
        dims, dtype = graph_inputs[name].type.tensor_type.shape.dim, dtype_of(graph_inputs[name])
        if spec.dtype != dtype:
            raise InputError(
                f"input {name!r} is {dtype} in the model, the recipe binds a {spec.dtype} value"
                f' (fix: dtype = "{dtype}"){actual}'
            )
        value = np.array(spec.value, dtype=dtype)
        fixed = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims]
        if len(fixed) != value.ndim or any(f is not None and f != n for f, n in zip(fixed, value.shape)):
            raise InputError(
                f"input {name!r} is {dims_of(dims)} in the model, the recipe binds a value of shape "
                f"{list(value.shape)}{actual}"
            )
        model.graph.input.remove(graph_inputs[name])
        model.graph.initializer.append(numpy_helper.from_array(value, name))


def freeze_inputs(model, declared: dict[str, InputSpec]) -> dict[str, dict]:
    """Fix every graph input to its declared shape, or to the model's own where it is fully static; the
    shapes and dtypes used, in graph order. A declaration the model contradicts is bad input, reported with
    the model's actual inputs, so it is fixed once here and not rediscovered by every later stage."""
    graph_inputs = real_inputs(model)
    actual = "; the model's inputs: " + ", ".join(describe(i) for i in graph_inputs.values())
    for name in declared:
        if name not in graph_inputs:
            raise InputError(f"the model has no input {name!r}{actual}")
    frozen = {}
    for name, value in graph_inputs.items():
        dims, dtype = value.type.tensor_type.shape.dim, dtype_of(value)
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
                    f"input {name!r} is fixed to {dims_of(dims)} in the model, the recipe declares {spec.shape}{actual}"
                )
            dim.ClearField("dim_param")
            dim.dim_value = size
        frozen[name] = {"shape": list(spec.shape), "dtype": spec.dtype}
    return frozen


def real_inputs(model) -> dict:
    initializers = {i.name for i in model.graph.initializer}
    return {i.name: i for i in model.graph.input if i.name not in initializers}


def _static_spec(name: str, dims, dtype: str, actual: str) -> InputSpec:
    """An undeclared input's own shape, when the model fixes every dimension of it."""
    shape = dims_of(dims)  # [] is a scalar: static
    if not all(isinstance(d, int) and d > 0 for d in shape):
        raise InputError(
            f"input {name!r} has dynamic dimensions {shape}: declare the shape to build for (fix: "
            f'inputs.{toml_key(name)} = {{ shape = [...], dtype = "{dtype}" }} under the model){actual}'
        )
    return InputSpec(shape=shape, dtype=dtype)


def dtype_of(value) -> str:
    return onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).name


def describe(value) -> str:
    return f"{value.name} {dtype_of(value)} {dims_of(value.type.tensor_type.shape.dim)}"


def dims_of(dims) -> list:
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?") for d in dims]
