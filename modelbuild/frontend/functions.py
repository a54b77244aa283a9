"""Functions, expanded into the operators they are made of: a model's own, and ONNX's where TVM lacks the
operator.

An exporter may write a model's modules as functions of the model (torch.onnx's TorchScript exporter with
`export_modules_as_functions`), and TVM's ONNX frontend reads the main graph only: every call failed the
import as an unsupported operator of the model's own domain. And ONNX defines some operators as functions
of others (CenterCropPad as a Pad and a Slice, opset 18), which onnxruntime expands and TVM has no converter
for. Both are inlined here by onnx's own inliner, the standard operators' bodies taken from onnx's schemas
for the model's opset (context-dependent ones built for the node's attributes and input types).
"""

from __future__ import annotations

import onnx
from onnx import helper

from modelbuild.frontend import inferred
from modelbuild.frontend.opset import default_opset

EXPANDED = "modelbuild.expanded"  # the domain each standard operator's body is given while it is inlined


def inlined(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with the functions it defines inlined; the model itself when it defines none, or when onnx's
    inliner cannot inline them (a call with more inputs than its function takes): the import then names the
    function's call as an operator TVM lacks, in one line."""
    from onnx import inliner

    if not model.functions:
        return model
    try:
        return inliner.inline_local_functions(model)
    except Exception:  # onnx's inliner raises its C++ assertions as plain exceptions
        return model


def expanded(model: onnx.ModelProto, supported: set[str]) -> onnx.ModelProto:
    """The model with each standard operator of its main graph outside `supported` (the operators TVM
    converts) that onnx defines as a function replaced by that function's body at the model's opset; the model
    itself when there is none, or when onnx cannot expand them (TVM's import then names the operator)."""
    from onnx import inliner

    version = default_opset(model)
    expandable = [
        i
        for i, node in enumerate(model.graph.node)
        if node.domain in ("", "ai.onnx")
        and node.op_type not in supported
        and _defined_as_function(node.op_type, version)
    ]
    if not expandable:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    types, added = _input_types(out), 0
    for index in expandable:
        node = out.graph.node[index]
        _with_defaults(node, version)  # before the body is built: a context-dependent one reads them too
        body = _at_opset(_body(node, version, types), version, node, types)
        if body is None:
            continue
        body.domain, body.name = EXPANDED, f"{node.op_type}_{index}"
        out.functions.append(body)
        node.domain, node.op_type = EXPANDED, body.name
        added += 1
    if not added:
        return model
    out.opset_import.append(helper.make_opsetid(EXPANDED, 1))
    try:
        done = inliner.inline_local_functions(out)
    except Exception:  # an opset the body and the model disagree on, say
        return model
    kept = [o for o in done.opset_import if o.domain != EXPANDED]
    del done.opset_import[:]
    done.opset_import.extend(kept)
    for node in done.graph.node:
        _as_tensor_constant(node)
    return done


def _with_defaults(node, version: int) -> None:
    """The node given each attribute it omits that has a default: the body reads it by reference."""
    given = {a.name for a in node.attribute}
    for name, attribute in onnx.defs.get_schema(node.op_type, version).attributes.items():
        default = attribute.default_value
        if name not in given and default.name:
            node.attribute.append(default)


def _defined_as_function(op_type: str, version: int) -> bool:
    try:
        schema = onnx.defs.get_schema(op_type, version)
    except onnx.defs.SchemaError:
        return False
    return schema.has_function or schema.has_context_dependent_function


def _body(node, version: int, types: dict) -> onnx.FunctionProto | None:
    """The function onnx defines the node's operator as, in its latest definition at or before the model's
    opset, for this node; None where onnx cannot build it (an input whose type is unknown)."""
    schema = onnx.defs.get_schema(node.op_type, version)
    body = onnx.FunctionProto()
    if schema.has_function:
        body.ParseFromString(
            schema.get_function_with_opset_version(_defined_at(schema.function_opset_versions, version))
        )
        return body if body.node else None
    if any(name and name not in types for name in node.input):
        return None
    try:
        built = schema.get_context_dependent_function_with_opset_version(
            _defined_at(schema.context_dependent_function_opset_versions, version),
            node.SerializeToString(),
            [types[name].SerializeToString() for name in node.input if name],
        )
    except Exception:  # onnx's builder refused the node: TVM's import then names the operator it lacks
        return None
    body.ParseFromString(built)
    return body if body.node else None  # an empty body is onnx's refusal


def _at_opset(body: onnx.FunctionProto | None, version: int, node, types: dict) -> onnx.FunctionProto | None:
    """The body at the model's opset (onnx's inliner leaves a call to a body of another opset as it is):
    converted by onnx's version converter where it was written for an earlier one; None where that fails."""
    if body is None:
        return None
    written = {o.domain: o.version for o in body.opset_import}.get("", version)
    if written != version:
        from onnx import version_converter

        if any(actual not in types for actual in node.input if actual):
            return None
        inputs = [helper.make_value_info(formal, types[actual]) for formal, actual in zip(body.input, node.input)]
        graph = helper.make_graph(
            list(body.node), "body", inputs, [helper.make_empty_tensor_value_info(name) for name in body.output]
        )
        try:
            converted = version_converter.convert_version(
                helper.make_model(graph, opset_imports=[helper.make_opsetid("", written)]), version
            )
        except Exception:
            return None
        del body.node[:]
        body.node.extend(converted.graph.node)
    del body.opset_import[:]
    body.opset_import.append(helper.make_opsetid("", version))
    return body


def _as_tensor_constant(node) -> None:
    """A Constant of value_int(s) or value_float(s), as bodies write them (their attribute references resolved
    by the inliner), given as the tensor it is: TVM's converter reads `value` alone ("no value in Constant")."""
    import numpy as np
    from onnx import numpy_helper

    kinds = {"value_int": np.int64, "value_ints": np.int64, "value_float": np.float32, "value_floats": np.float32}
    if node.op_type != "Constant" or not node.attribute or node.attribute[0].name not in kinds:
        return
    attribute = node.attribute[0]
    value = np.array(helper.get_attribute_value(attribute), dtype=kinds[attribute.name])
    del node.attribute[:]
    node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(value)))


def _defined_at(versions, version: int) -> int:
    """The opset of the function's definition that holds at `version`."""
    return max((v for v in versions if v <= version), default=version)


def _input_types(model: onnx.ModelProto) -> dict:
    """Each tensor's type as a TypeProto, where onnx's shape inference knows its element type."""
    return {
        name: helper.make_tensor_type_proto(dtype, dims)
        for name, (dtype, dims) in inferred.tensors(model).items()
        if dtype
    }
