"""GPTQ weight rounding: exact conv patches, and rounding errors that compensate on the calibration inputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from modelbuild.quantization import activations, weight_rounding
from modelbuild.recipe.schema import QuantizationSpec
from modelbuild.stages.quantize import quantized
from tests.helpers.onnx_models import uneven_channels, uneven_input


@pytest.mark.parametrize(
    "attributes",
    [{}, {"strides": [2, 1], "pads": [1, 0, 2, 1]}, {"dilations": [2, 2], "group": 2, "pads": [2, 2, 2, 2]}],
)
def test_patches_times_the_weights_are_onnxruntimes_conv(attributes):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 9, 11)).astype(np.float32)
    groups = attributes.get("group", 1)
    w = rng.standard_normal((6, 4 // groups, 3, 3)).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w"], ["y"], **attributes)
    graph = helper.make_graph(
        [conv],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")],
    )
    want = activations.session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])).run(
        None, {"x": x}
    )[0]
    patches = weight_rounding.patch_matrix(x.astype(np.float64), w.shape, attributes)  # groups, N*H*W, C/g*k*k
    per_group = w.reshape(groups, 6 // groups, -1).astype(np.float64)
    got = np.matmul(patches, np.swapaxes(per_group, 1, 2))  # groups, N*H*W, out/g
    n, _, h, wd = want.shape
    got = got.reshape(groups, n, h, wd, -1).transpose(1, 0, 4, 2, 3).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_with_uncorrelated_equal_inputs_gptq_is_rounding_to_nearest():
    w = np.random.default_rng(1).standard_normal((1, 5, 12))
    scales = np.full((1, 5), 0.02)
    q = weight_rounding.rounded(w, scales, np.eye(12)[None] * 3.0)
    np.testing.assert_array_equal(q, np.clip(np.rint(w / scales[..., None]), -127, 127))


def test_with_correlated_inputs_the_output_error_is_smaller_than_nearests():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((500, 3)) @ rng.standard_normal((3, 16)) + 0.05 * rng.standard_normal((500, 16))
    w = rng.standard_normal((1, 8, 16))
    scales = np.abs(w).max(axis=2) / 127 * 8  # coarse steps, so that rounding errors are large
    h = (x.T @ x)[None]

    def output_error(q):
        return float(np.sum((x @ (w[0] - q[0] * scales[0][:, None]).T) ** 2))

    gptq = weight_rounding.rounded(w, scales, h)
    nearest = np.clip(np.rint(w / scales[..., None]), -127, 127)
    assert np.abs(gptq).max() <= 127
    assert output_error(gptq) < 0.5 * output_error(nearest)


def test_the_stage_rounds_every_quantized_conv_and_lowers_its_error(tmp_path):
    model = onnx.load(str(uneven_channels(tmp_path / "m.onnx")))
    samples = [uneven_input(seed) for seed in range(4)]

    def pointwise_error(rounding: str) -> tuple[float, int]:
        spec = QuantizationSpec(weight_rounding=rounding, int16_nodes=["*"], smoothing=True, bias_correction=False)
        result = quantized(model, samples, spec)
        got = [activations.compute(result.qdq, s, ["y"])["y"] for s in samples]
        want = [activations.compute(result.prepared, s, ["y"])["y"] for s in samples]
        return float(np.mean([(g - r) ** 2 for g, r in zip(got, want)])), result.gptq_convs

    nearest, _ = pointwise_error("nearest")
    gptq, convs = pointwise_error("gptq")
    assert convs == 2 and gptq < nearest
