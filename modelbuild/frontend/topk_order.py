"""A TopK whose order is left open (sorted = 0) read as sorted, on both sides of validation.

ONNX lets a TopK of sorted = 0 return its k elements in any order: onnxruntime returns its heap's, and TVM's
converter refuses the node ("TopK sorted must be 1 for Relax frontend"), so a model exported with
torch.topk(..., sorted=False) did not import. Sorted is one of the orders the operator allows: the import
reads the node so, and the reference stage gives onnxruntime the same model, so that the library and the
reference agree element by element.
"""

from __future__ import annotations

import onnx
from onnx import helper


def sorted_everywhere(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every TopK of its main graph sorted; the model itself when each already is."""
    if not any(_unsorted(node) for node in model.graph.node):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if _unsorted(node):
            kept = [a for a in node.attribute if a.name != "sorted"]
            del node.attribute[:]
            node.attribute.extend(kept + [helper.make_attribute("sorted", 1)])
    return out


def _unsorted(node) -> bool:
    return (
        node.op_type == "TopK"
        and node.domain in ("", "ai.onnx")
        and any(a.name == "sorted" and a.i == 0 for a in node.attribute)
    )
