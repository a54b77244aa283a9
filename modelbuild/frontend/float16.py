"""A float16 ONNX model as one that computes in float32 between float16 inputs and outputs.

What quantization needs of a model converted to float16 for a GPU: its passes and onnxruntime's calibrator
insert float32 operators, which onnxruntime then refused beside float16 tensors ("Type parameter (T) of Optype
(Mul) bound to different types"), and an int8 build quantizes from the float values anyway. The model keeps
its float16 inputs and outputs (a Cast at each), so the library takes and returns what the model declares.
Subgraphs (an If's branches) are left as they are.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper, numpy_helper

HALF, FULL = TensorProto.FLOAT16, TensorProto.FLOAT


def computed_in_float32(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with every float16 weight, constant, cast and intermediate tensor float32; `model`
    itself when it holds no float16."""
    if not holds_float16(model):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    for index, tensor in enumerate(graph.initializer):
        if tensor.data_type == HALF:
            graph.initializer[index].CopyFrom(_widened(tensor))
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type == HALF:
                attribute.t.CopyFrom(_widened(attribute.t))
            elif node.op_type == "Cast" and attribute.name == "to" and attribute.i == HALF:
                attribute.i = FULL
    for value in graph.value_info:
        if value.type.tensor_type.elem_type == HALF:
            value.type.tensor_type.elem_type = FULL
    _cast_at_edges(graph)
    return out


def holds_float16(model: onnx.ModelProto) -> bool:
    """Whether the model keeps float16 values: weights (initializers or Constant nodes), inputs or outputs."""
    constants = [a.t for node in model.graph.node for a in node.attribute if a.type == onnx.AttributeProto.TENSOR]
    edges = [*model.graph.input, *model.graph.output]
    return any(tensor.data_type == HALF for tensor in [*model.graph.initializer, *constants]) or any(
        value.type.tensor_type.elem_type == HALF for value in edges
    )


def _widened(tensor: onnx.TensorProto) -> onnx.TensorProto:
    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype("float32"), tensor.name)


def _cast_at_edges(graph) -> None:
    """Each float16 input cast to float32 where the graph reads it, and each float16 output computed in float32
    under another name and cast back to its own."""
    initializers = {tensor.name for tensor in graph.initializer}
    inputs = [v.name for v in graph.input if v.type.tensor_type.elem_type == HALF and v.name not in initializers]
    outputs = [v.name for v in graph.output if v.type.tensor_type.elem_type == HALF]
    wide = {name: f"{name}/float32" for name in [*inputs, *outputs]}
    for node in graph.node:
        node.input[:] = [wide.get(name, name) for name in node.input]
        node.output[:] = [wide[name] if name in outputs else name for name in node.output]
    casts_in = [helper.make_node("Cast", [name], [wide[name]], to=FULL, name=f"{name}/to_float32") for name in inputs]
    casts_out = [helper.make_node("Cast", [wide[name]], [name], to=HALF, name=f"{name}/to_float16") for name in outputs]
    nodes = [*casts_in, *graph.node, *casts_out]
    del graph.node[:]
    graph.node.extend(nodes)
