"""BatchNormalization that simplification left in the graph, as one multiply and one add per channel.

onnxslim folds a BatchNormalization into the float Conv before it. It cannot where that conv is quantized
(a pre-quantized model's QLinearConv, then dequantize, then the BatchNorm), and TVM's legalisation of
batch_norm computes (x - mean) / sqrt(var + eps) * gamma + beta per element, square root included: those
kernels ran at 2 ns an element (8-16 GFLOP/s) in a pre-quantized MobileNet. With constant statistics the
whole normalisation is x * a + b, a = gamma / sqrt(var + eps) and b = beta - mean * a, folded here once.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def fold(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every inference BatchNormalization of constant statistics as Mul and Add; the model
    itself when there is none."""
    constants = {t.name: t for t in model.graph.initializer}
    if not any(_foldable(node, constants) for node in model.graph.node):
        return model
    ranks = _ranks(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    for index, node in enumerate(model.graph.node):
        rank = ranks.get(node.input[0])
        if not _foldable(node, constants) or rank is None or rank < 2:
            out.graph.node.append(node)
            continue
        scale, bias, mean, var = (numpy_helper.to_array(constants[name]).astype(np.float64) for name in node.input[1:5])
        epsilon = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
        a = scale / np.sqrt(var + epsilon)
        b = bias - mean * a
        shape = [-1] + [1] * (rank - 2)  # per channel, axis 1
        prefix = f"{node.name or 'BatchNormalization'}~{index}"
        out.graph.initializer.extend(
            [
                numpy_helper.from_array(a.astype(np.float32).reshape(shape), f"{prefix}/a"),
                numpy_helper.from_array(b.astype(np.float32).reshape(shape), f"{prefix}/b"),
            ]
        )
        out.graph.node.extend(
            [
                helper.make_node("Mul", [node.input[0], f"{prefix}/a"], [f"{prefix}/scaled"], name=f"{prefix}/mul"),
                helper.make_node("Add", [f"{prefix}/scaled", f"{prefix}/b"], [node.output[0]], name=f"{prefix}/add"),
            ]
        )
    return out


def _foldable(node, constants: dict) -> bool:
    training = next((a.i for a in node.attribute if a.name == "training_mode"), 0)
    return (
        node.op_type == "BatchNormalization"
        and node.domain in ("", "ai.onnx")
        and not training
        and len(node.output) == 1
        and len(node.input) == 5
        and all(name in constants for name in node.input[1:])
    )


def _ranks(model) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    values = [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
    return {v.name: len(v.type.tensor_type.shape.dim) for v in values if v.type.tensor_type.HasField("shape")}
