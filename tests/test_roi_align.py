"""RoiAlign's half-pixel offset, which TVM's converter applies before scaling the boxes: shifted to match."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelbuild.frontend import roi_align

SHAPE = [1, 8, 32, 32]
BOXES = np.sort(np.random.default_rng(0).uniform(0, 120, (10, 4)).astype(np.float32), axis=1)  # x1 <= x2


def pooled(opset: int = 16, **attributes) -> onnx.ModelProto:
    """x [1, 8, 32, 32] -> RoiAlign over ten boxes (a constant) of image 0 -> [10, 8, 4, 4]."""
    node = helper.make_node(
        "RoiAlign",
        ["x", "boxes", "batch"],
        ["y"],
        name="pool",
        output_height=4,
        output_width=4,
        sampling_ratio=2,
        **attributes,
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(BOXES, "boxes"), numpy_helper.from_array(np.zeros(10, np.int64), "batch")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(["y"], {"x": x})[0]


def test_a_half_pixel_roi_align_reads_its_boxes_shifted_by_half_a_pixel_less_half_a_feature_pixel():
    model = pooled(spatial_scale=0.25)
    shifted = roi_align.offsets_where_tvm_scales_them(model)
    add = next(n for n in shifted.graph.node if n.op_type == "Add")
    shift = next(numpy_helper.to_array(t) for t in shifted.graph.initializer if t.name == add.input[1])
    assert add.input[0] == "boxes" and shifted.graph.node[-1].input[1] == add.output[0]
    assert shift == np.float32(0.5 - 0.5 / 0.25)


LEGACY = {"spatial_scale": 0.25, "coordinate_transformation_mode": "output_half_pixel"}


@pytest.mark.parametrize(
    "opset, attributes",
    [(16, {}), (16, LEGACY), (10, {"spatial_scale": 0.25})],
    ids=["scale-1", "output-half-pixel", "opset-10"],
)
def test_roi_aligns_tvm_computes_right_are_left_as_they_are(opset, attributes):
    model = pooled(opset, **attributes)
    assert roi_align.offsets_where_tvm_scales_them(model) is model


@pytest.mark.parametrize("scale", [0.25, 0.125, 1.0])
def test_tvm_pools_what_onnxruntime_pools(tvm, scale):
    """Before the shift the pooled values were up to 1.6 apart from onnxruntime's at a scale of 1/4."""
    import tvm
    from tvm import relax

    from modelbuild.stages import onnx_import

    model = pooled(spatial_scale=scale)
    module = onnx_import.to_relax(model, {"x": {"shape": SHAPE, "dtype": "float32"}})
    vm = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), run(model, x), rtol=1e-4, atol=1e-4)
