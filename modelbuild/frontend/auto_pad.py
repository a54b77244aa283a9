"""A Conv's `auto_pad = SAME_UPPER / SAME_LOWER` as the explicit `pads` it stands for, where shapes are known.

TVM's ONNX frontend imports an auto-padded Conv as a separate pad of its input, then an unpadded conv. The
pad is a kernel of its own, which in a quantized model sits between the dequantize and the conv, so the
integer rewrite (compiler/integer_ops.py) no longer sees a conv of dequantized data and the conv stays float:
the v6 recogniser's two 2x2 stem convs (SAME_UPPER, so padded on one side) ran in float in its int8 build.
With explicit pads, which relax's conv2d takes on each side, the padding is the conv's own, as for any other.
"""

from __future__ import annotations

import math

import onnx

SAME = (b"SAME_UPPER", b"SAME_LOWER")


def resolve(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each auto-padded Conv of known input shape and kernel given explicit pads; the model
    itself when there is none."""
    if not any(node.op_type == "Conv" and _auto_pad(node) in SAME for node in model.graph.node):
        return model
    shapes = _spatial_shapes(model)
    kernels = {t.name: list(t.dims[2:]) for t in model.graph.initializer}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if node.op_type != "Conv" or _auto_pad(node) not in SAME:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        spatial = shapes.get(node.input[0])
        kernel = attrs.get("kernel_shape") or kernels.get(node.input[1]) or shapes.get(node.input[1])  # or dequantized
        if not spatial or not kernel or len(spatial) != len(kernel):
            continue
        strides = attrs.get("strides") or [1] * len(kernel)
        dilations = attrs.get("dilations") or [1] * len(kernel)
        pads = same_pads(spatial, kernel, strides, dilations, upper=_auto_pad(node) == b"SAME_UPPER")
        kept = [a for a in node.attribute if a.name not in ("auto_pad", "pads")]
        del node.attribute[:]
        node.attribute.extend(kept + [onnx.helper.make_attribute("pads", pads)])
    return out


def same_pads(
    spatial: list[int], kernel: list[int], strides: list[int], dilations: list[int], *, upper: bool
) -> list[int]:
    """ONNX's SAME padding as `pads` ([begins..., ends...]): the output is ceil(input / stride) along each axis,
    the odd pixel of padding at the end (SAME_UPPER) or the beginning (SAME_LOWER)."""
    begins, ends = [], []
    for size, k, stride, dilation in zip(spatial, kernel, strides, dilations):
        total = max((math.ceil(size / stride) - 1) * stride + (k - 1) * dilation + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begins.append(small if upper else large)
        ends.append(large if upper else small)
    return begins + ends


def _auto_pad(node) -> bytes:
    return next((a.s for a in node.attribute if a.name == "auto_pad"), b"NOTSET")


def _spatial_shapes(model) -> dict[str, list[int]]:
    """Each tensor's dims after batch and channels, where shape inference knows them all."""
    inferred = onnx.shape_inference.infer_shapes(model)
    values = [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
    shapes = {}
    for value in values:
        dims = value.type.tensor_type.shape.dim if value.type.tensor_type.HasField("shape") else []
        if len(dims) > 2 and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims[2:]):
            shapes[value.name] = [d.dim_value for d in dims[2:]]
    return shapes
