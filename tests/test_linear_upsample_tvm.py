"""Linear upsampling by whole factors in two passes of taps: the values of TVM's resize2d and onnxruntime's
Resize, in both layouts, and TVM's own kernel for what it does not cover."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.relax_graphs import build_module, scheduled_kernel


def resize(bb, x, size, mode="half_pixel", layout="NCHW"):
    from tvm import relax

    return bb.emit(
        relax.op.image.resize2d(x, size, layout=layout, method="linear", coordinate_transformation_mode=mode)
    )


def onnxruntime_resize(x, scales, mode) -> np.ndarray:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear", coordinate_transformation_mode=mode)
    graph = helper.make_graph(
        [node],
        "resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array(scales, np.float32), "scales")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize(
    "shape, size, mode",
    [
        ((1, 3, 5, 6), (40, 48), "half_pixel"),  # a segmentation head's 8x
        ((1, 4, 7, 9), (14, 18), "pytorch_half_pixel"),
        ((1, 2, 7, 9), (21, 18), "asymmetric"),  # 3x and 2x: no power of two
        ((1, 2, 5, 6), (5, 24), "half_pixel"),  # columns only
        ((1, 2, 5, 6), (10, 6), "half_pixel"),  # rows only
    ],
)
def test_an_upsampling_in_taps_computes_what_onnxruntime_and_tvm_do(shape, size, mode):
    import tvm

    script, run = scheduled_kernel(
        build_module(lambda bb, x: resize(bb, x, size, mode), shape), "resize", schedule=True
    )
    _, stock = scheduled_kernel(build_module(lambda bb, x: resize(bb, x, size, mode), shape), "resize", schedule=False)
    assert "linear_upsample" in script and "T.floor(" not in script  # TVM's floors each source coordinate
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    ours = run(tvm.runtime.tensor(x)).numpy()
    scales = [1, 1, size[0] / shape[2], size[1] / shape[3]]
    np.testing.assert_allclose(ours, onnxruntime_resize(x, scales, mode), rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(ours, stock(tvm.runtime.tensor(x)).numpy(), rtol=1e-5, atol=2e-6)


def test_a_channels_last_upsampling_interpolates_whole_channel_vectors_the_same_way():
    import tvm

    shape, size = (1, 5, 6, 21), (40, 48)  # 21 classes, channels last as a float build keeps them
    module = build_module(lambda bb, x: resize(bb, x, size, layout="NHWC"), shape)
    script, run = scheduled_kernel(module, "resize", schedule=True)
    assert "linear_upsample_columns" in script
    x = np.random.default_rng(1).standard_normal(shape).astype("float32")
    want = onnxruntime_resize(x.transpose(0, 3, 1, 2), [1, 1, 8, 8], "half_pixel").transpose(0, 2, 3, 1)
    np.testing.assert_allclose(run(tvm.runtime.tensor(x)).numpy(), want, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize(
    "size, mode", [((10, 9), "half_pixel"), ((10, 12), "align_corners")], ids=["not-whole-factors", "align-corners"]
)
def test_other_linear_resizes_keep_tvms_kernel(size, mode):
    import tvm

    shape = (1, 2, 5, 6)
    script, run = scheduled_kernel(
        build_module(lambda bb, x: resize(bb, x, size, mode), shape), "resize", schedule=True
    )
    _, stock = scheduled_kernel(build_module(lambda bb, x: resize(bb, x, size, mode), shape), "resize", schedule=False)
    assert "linear_upsample" not in script
    x = tvm.runtime.tensor(np.random.default_rng(2).standard_normal(shape).astype("float32"))
    np.testing.assert_array_equal(run(x).numpy(), stock(x).numpy())


def test_a_channels_last_upsampling_read_by_a_transpose_to_nchw_writes_its_columns_channels_first():
    """The float build's last resize, at the model's edge: the rows pass, inlined into the transpose, read
    the columns pass one element per channel apart (the 21-class head's 8x, 320 x 320: 2.1 -> 0.29 ms)."""
    import tvm
    from tvm import relax

    shape = (1, 5, 6, 21)

    def head(bb, x):
        return bb.emit(relax.op.permute_dims(resize(bb, x, (40, 48), layout="NHWC"), [0, 3, 1, 2]))

    script, run = scheduled_kernel(build_module(head, shape), "resize", schedule=True)
    channels_first = "T.sblock_alloc_buffer((T.int64(1), T.int64(21), T.int64(5), T.int64(48))"
    assert f"linear_upsample_columns = {channels_first}" in script
    x = np.random.default_rng(3).standard_normal(shape).astype("float32")
    want = onnxruntime_resize(x.transpose(0, 3, 1, 2), [1, 1, 8, 8], "half_pixel")
    np.testing.assert_allclose(run(tvm.runtime.tensor(x)).numpy(), want, rtol=1e-5, atol=2e-6)
