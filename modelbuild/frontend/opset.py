"""A model's ONNX opset, and the model converted to a newer one where a reader needs it.

TVM's ONNX frontend picks, for each operator, its newest converter at or below the model's opset, and its
oldest where the model is older than all of them. Several operators have only an opset-13 converter, which
reads as inputs what opsets before 10 keep in attributes: AECMOS (speechmos==0.0.1.1, opset 9) failed
import at a Slice of its GRUs' initial state with "Cannot cast <class 'NoneType'> to list of Expr". onnx's
version converter rewrites those forms; a model it cannot convert is reported with the fix.
"""

from __future__ import annotations

import onnx

from modelbuild.errors import StageError, last_line

OLDEST_IMPORTED = 10  # Slice's starts and ends, TopK's k: inputs from here on, as TVM's converters read them
IMPORTED_AS = 13  # what an older model becomes: the opset every one of TVM's converters reads


def default_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def raised_to(model: onnx.ModelProto, version: int, *, needed_for: str, fix: str = "") -> onnx.ModelProto:
    """The model at `version` where it is older (the model itself otherwise); a StageError with the fix where
    onnx cannot convert it. `needed_for`: what needs the newer opset, in the error's words; `fix`: another
    way out than re-exporting the model."""
    opset = default_opset(model)
    if opset >= version:
        return model
    from onnx import version_converter

    try:
        converted = version_converter.convert_version(model, version)
    except Exception as err:
        raise StageError(
            f"the model is opset {opset}; {needed_for} needs opset {version}, and onnx could not "
            f"convert it ({last_line(err)}) (fix: re-export the model at opset {version} or later"
            f"{' or ' + fix if fix else ''})"
        ) from err
    return _resizes_as_before(model, converted) if opset < RESIZE_COORDINATES else converted


def importable(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model in a form TVM's converters read: opset 13 where it is older than 10, or than 11 with a
    Resize (TVM's converter reads opset 11's inputs, and an opset-10 Resize failed the import with "Type
    <class 'NoneType'> for size is currently unsupported")."""
    version = default_opset(model)
    old_resize = version < RESIZE_COORDINATES and any(n.op_type == "Resize" for n in model.graph.node)
    if version >= OLDEST_IMPORTED and not old_resize:
        return model
    return raised_to(model, IMPORTED_AS, needed_for="TVM's ONNX import")


RESIZE_COORDINATES = 11  # the opset whose Resize took a coordinate_transformation_mode (default half_pixel)


def _resizes_as_before(original: onnx.ModelProto, converted: onnx.ModelProto) -> onnx.ModelProto:
    """The converted model with each Resize that was an Upsample or an opset-10 Resize given the coordinates
    it had: output x at input x / scale (asymmetric), nearest rounded down where it upsamples and up where it
    downsamples, as onnxruntime runs the original. onnx's converter writes no coordinate mode, so the Resize
    took opset 11's half_pixel: an opset-9 bilinear Upsample 2x was off by up to 1.4 on unit inputs."""
    from onnx import helper

    from modelbuild.frontend.resize_inputs import constant_value

    resized = {n.output[0] for n in original.graph.node if n.op_type in ("Upsample", "Resize")}
    for node in converted.graph.node:
        if node.op_type != "Resize" or node.output[0] not in resized:
            continue
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        kept = [a for a in node.attribute if a.name not in ("coordinate_transformation_mode", "nearest_mode")]
        del node.attribute[:]
        node.attribute.extend(kept)
        node.attribute.append(helper.make_attribute("coordinate_transformation_mode", "asymmetric"))
        if attributes.get("mode", b"nearest") == b"nearest":
            scales = constant_value(converted, node.input[2]) if len(node.input) > 2 else None
            resampled = scales[scales != 1] if scales is not None else []
            if len(resampled) and (resampled < 1).any() and (resampled > 1).any():
                raise StageError(
                    f"Resize node {node.name!r} of opset {default_opset(original)} upsamples one axis "
                    f"and downsamples another by nearest neighbour, rounding each its own way, which no "
                    f"later Resize can say (fix: re-export the model at opset 11 or later)"
                )
            downsamples = len(resampled) and (resampled < 1).all()
            node.attribute.append(helper.make_attribute("nearest_mode", "ceil" if downsamples else "floor"))
    return converted
