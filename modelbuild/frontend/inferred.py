"""What onnx's shape inference finds of a model's tensors, and which of them are constants, for the rewrites
that need a dtype, a side or a value."""

from __future__ import annotations

import onnx


def tensors(model: onnx.ModelProto) -> dict[str, tuple[int, list]]:
    """Each tensor's element type and dimensions (None where unknown), initializers included (no list of the
    graph's inputs holds them); empty where onnx cannot infer the model (TVM's import then says what is
    wrong)."""
    from onnx import shape_inference

    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:
        return {}
    values = [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
    found = {
        v.name: (
            v.type.tensor_type.elem_type,
            [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim],
        )
        for v in values
    }
    return found | {t.name: (t.data_type, list(t.dims)) for t in model.graph.initializer}


def constants(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """Each initializer and Constant node's output of the main graph, by name, as a tensor of that name (a
    Constant node's own tensor may have none)."""
    found = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            found[node.output[0]] = tensor
    return found
