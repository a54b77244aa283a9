"""A Resize's empty `roi` or `scales` as the absent input it stands for.

Exporters leave a Resize's scales out by naming an empty tensor rather than no tensor at all (older PyTorch
exporters wrote F.interpolate(size=...) as Resize(x, roi=[], scales=[], sizes)). onnxruntime reads an empty
tensor there as absent, as the standard says; TVM's converter takes it as given alongside the sizes and failed
the import with "Only one of scales and sizes can be provided in Resize." A DeepLab-style head, whose image
pooling branch is resized back to the feature map's size, failed this way.
"""

from __future__ import annotations

import onnx

OPTIONAL = (1, 2)  # roi and scales; sizes, the last input, is left out by leaving it off the list


def absent_when_empty(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each Resize's empty constant roi or scales named as absent (""); the model itself when
    there is none."""
    empty = _empty_constants(model)
    if not any(_empty_inputs(node, empty) for node in model.graph.node):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        for position in _empty_inputs(node, empty):
            node.input[position] = ""
    return out


def _empty_constants(model: onnx.ModelProto) -> set[str]:
    """Names of the main graph's initializers and Constant nodes that hold no element."""
    empty = {t.name for t in model.graph.initializer if _elements(t.dims) == 0}
    for node in model.graph.node:
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None and _elements(value.dims) == 0:
                empty.add(node.output[0])
    return empty


def _empty_inputs(node: onnx.NodeProto, empty: set[str]) -> list[int]:
    if node.op_type != "Resize":
        return []
    return [i for i in OPTIONAL if i < len(node.input) and node.input[i] in empty]


def _elements(dims) -> int:
    count = 1
    for d in dims:
        count *= d
    return count if dims else 1  # a scalar holds one element
