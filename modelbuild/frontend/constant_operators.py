"""Operators TVM's ONNX frontend lacks that compute a table from constants, computed at import.

An audio model's front end may build its window and its mel filter bank in the graph: torch.hann_window
(and hamming, blackman) export as opset 17's HannWindow, HammingWindow and BlackmanWindow when the exporter
does not fold them, and TensorFlow's linear_to_mel_weight_matrix as MelWeightMatrix. Their inputs are
sizes and frequencies, constants in every such model, and each failed the import with "operator ... is not
supported by TVM's ONNX frontend". A node of these whose every input is a constant is computed here by
onnx's reference evaluator (the operator's definition, in numpy) and becomes an initializer.
"""

from __future__ import annotations

import onnx
from onnx import helper, numpy_helper

from modelbuild.frontend import inferred
from modelbuild.frontend.opset import default_opset

TABLES = ("HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix")


def folded(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each such node of its main graph whose inputs are all constants replaced by its value;
    the model itself when it has none."""
    values = inferred.constants(model)
    foldable = [
        n
        for n in model.graph.node
        if n.op_type in TABLES and n.domain in ("", "ai.onnx") and all(name in values for name in n.input if name)
    ]
    if not foldable:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    computed = [_value(node, values, default_opset(model)) for node in foldable]
    outputs = {node.output[0] for node in foldable}
    kept = [n for n in out.graph.node if n.output[0] not in outputs]
    del out.graph.node[:]
    out.graph.node.extend(kept)
    out.graph.initializer.extend(computed)
    return out


def _value(node, values: dict, version: int):
    """The node's one output, computed from its constant inputs, as an initializer of the output's name."""
    from onnx.reference import ReferenceEvaluator

    graph = helper.make_graph(
        [node],
        "table",
        [],
        [helper.make_empty_tensor_value_info(node.output[0])],
        initializer=[values[name] for name in node.input if name],
    )
    single = helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)])
    (value,) = ReferenceEvaluator(single).run(None, {})
    return numpy_helper.from_array(value, node.output[0])
