"""RoiAlign's half-pixel offset moved to where TVM's converter takes it: before the boxes are scaled.

From opset 16 RoiAlign's coordinate_transformation_mode is half_pixel by default: a box starts at
x1 * spatial_scale - 0.5 in the feature map, as onnxruntime computes it. TVM's converter subtracts 0.5 from
the box in the image's coordinates, before its roi_align scales it, so the offset it applies is 0.5 *
spatial_scale: with a detector's scales of 1/4 to 1/32 every pooled value was sampled most of half a feature
pixel away, silently (outputs 1.6 apart from onnxruntime's on unit-variance features, at 1/4). Each such
node's boxes are shifted by 0.5 - 0.5 / spatial_scale first, so that TVM's -0.5, scaled, is -0.5 of the feature
map: within 1e-5 of onnxruntime then (the two additions round, at a box's coordinates).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from modelbuild.frontend import inferred
from modelbuild.frontend.opset import default_opset

HALF_PIXEL_DEFAULT_FROM = 16  # before this opset the only mode is output_half_pixel, which TVM computes right


def offsets_where_tvm_scales_them(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each half-pixel RoiAlign of a spatial_scale other than 1 reading its boxes shifted as
    above; the model itself when it has none."""
    if default_opset(model) < HALF_PIXEL_DEFAULT_FROM or not any(_shifted(n) for n in model.graph.node):
        return model
    tensors = inferred.tensors(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    for index, node in enumerate(model.graph.node):
        scale = _shifted(node)
        if scale is not None:
            boxes = node.input[1]
            kind = tensors.get(boxes, (0, None))[0] or onnx.TensorProto.FLOAT  # 0: onnx could not tell
            dtype = helper.tensor_dtype_to_np_dtype(kind)
            name = f"{node.name or 'RoiAlign'}~{index}/half_pixel"
            out.graph.initializer.append(numpy_helper.from_array(np.array(0.5 - 0.5 / scale, dtype), f"{name}_shift"))
            out.graph.node.append(helper.make_node("Add", [boxes, f"{name}_shift"], [f"{name}_boxes"], name=name))
            node = _with_boxes(node, f"{name}_boxes")
        out.graph.node.append(node)
    return out


def _shifted(node) -> float | None:
    """The spatial_scale of a RoiAlign whose boxes need the shift; None for any other node."""
    if node.op_type != "RoiAlign" or node.domain not in ("", "ai.onnx"):
        return None
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    mode = attributes.get("coordinate_transformation_mode", b"half_pixel")
    scale = float(attributes.get("spatial_scale", 1.0))
    return scale if mode in (b"half_pixel", "half_pixel") and scale != 1.0 else None


def _with_boxes(node, boxes: str):
    moved = onnx.NodeProto()
    moved.CopyFrom(node)
    moved.input[1] = boxes
    return moved
