"""A Resize's empty `roi` or `scales` as the absent input it stands for, and the Resizes TVM cannot import.

Exporters leave a Resize's scales out by naming an empty tensor rather than no tensor at all (older PyTorch
exporters wrote F.interpolate(size=...) as Resize(x, roi=[], scales=[], sizes)). onnxruntime reads an empty
tensor there as absent, as the standard says; TVM's converter takes it as given alongside the sizes and failed
the import with "Only one of scales and sizes can be provided in Resize." A DeepLab-style head, whose image
pooling branch is resized back to the feature map's size, failed this way.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from modelbuild.frontend import inferred

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


def unsupported(model: onnx.ModelProto) -> str | None:
    """Why TVM's converter would import one of the model's Resizes wrongly or not at all, in words with the
    fix; None where it imports them all. It reads neither opset 18's `axes` (it failed with "Resize2D expects
    the given output image size to be a 2-dim shape") nor `antialias` and `keep_aspect_ratio_policy` (it
    resized as if they were not set: a downscale with antialias differed from onnxruntime's by 0.46), and it
    spaces samples by the output's size where onnxruntime spaces them by the scale (see _uneven_scale)."""
    known: dict | None = None  # what shape inference finds, inferred at most once, where a scale needs it
    for node in model.graph.node:
        if node.op_type != "Resize":
            continue
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        where = f"Resize node {node.name!r}"
        if "axes" in attributes:
            return (
                f"{where} gives scales or sizes for axes {list(attributes['axes'])} alone, which TVM's converter "
                f"does not read (fix: give them for every axis, as exporters before opset 18 write them)"
            )
        if attributes.get("keep_aspect_ratio_policy", b"stretch") != b"stretch":
            policy = attributes["keep_aspect_ratio_policy"].decode()
            return (
                f"{where} keeps its aspect ratio ({policy}), which TVM's converter ignores, so it would resize "
                f"to other sizes than onnxruntime (fix: give the sizes it resizes to, with the default stretch)"
            )
        given = constant_value(model, node.input[2]) if len(node.input) > 2 else None
        if attributes.get("antialias") and not (given is not None and given.size and np.all(given >= 1)):
            return (
                f"{where} downscales with antialias = 1 (or by sizes, which may), and TVM's converter ignores "
                f"antialias, so its output would differ from onnxruntime's (fix: resize without antialias, "
                f"or before the model)"
            )
        by_size = attributes.get("coordinate_transformation_mode", b"half_pixel") in BY_SIZE
        fractional = given is not None and given.size and not np.all(given == np.round(given))
        if by_size or not fractional:
            continue
        known = inferred.tensors(model) if known is None else known
        uneven = _uneven_scale(known.get(node.input[0], (None, []))[1], given)
        if uneven:
            return f"{where} {uneven}"
    return None


# coordinate modes that map by the input's and output's sides alone, whatever the scale: TVM's agree
BY_SIZE = (b"align_corners", b"tf_crop_and_resize")


def _uneven_scale(sides: list, scales) -> str | None:
    """Where the Resize's scales times its input's sides are not whole numbers, in words: its output's side is
    that product rounded down, and TVM's converter maps coordinates by that side's ratio to the input's, where
    onnxruntime maps them by the scale (an odd side halved: 7 x 0.5 -> 3, sampled 7 / 3 apart, not 2)."""
    for axis, (side, scale) in enumerate(zip(sides, scales)):
        if isinstance(side, int) and abs(side * scale - round(side * scale)) > 1e-4:
            return (
                f"scales axis {axis} of {side} by {scale:g} to {side * scale:g}, rounded down, and TVM's "
                f"converter spaces its samples by the rounded size, not the scale, so its output would "
                f"differ from onnxruntime's (fix: give the Resize sizes instead of scales)"
            )
    return None


def constant_value(model: onnx.ModelProto, name: str):
    """The value of an initializer or Constant node's tensor of that name; None if there is none, or if its
    bytes do not make the array it declares (a damaged model: TVM's import then says so)."""
    tensor = next((t for t in model.graph.initializer if t.name == name), None)
    if tensor is None:
        tensor = next(
            (
                a.t
                for n in model.graph.node
                if n.op_type == "Constant" and n.output[0] == name
                for a in n.attribute
                if a.name == "value"
            ),
            None,
        )
    if tensor is None or not name:
        return None
    try:
        return numpy_helper.to_array(tensor)
    except Exception:
        return None
