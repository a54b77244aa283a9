"""A float16 model as one computing in float32 between float16 edges, against onnxruntime (no TVM)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.transformers.float16 import convert_float_to_float16

from modelbuild.frontend import float16
from modelbuild.recipe.schema import QuantizationSpec
from modelbuild.stages.quantize import quantized
from tests.helpers.onnx_models import uneven_channels, uneven_input


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def half_model(tmp_path, keep_io_types: bool = False) -> onnx.ModelProto:
    """A conv model converted to float16 by onnxruntime's own converter, as a user would bring one."""
    model = onnx.load(str(uneven_channels(tmp_path / "m.onnx")))
    return convert_float_to_float16(model, keep_io_types=keep_io_types)


def test_a_float16_model_computes_in_float32_and_keeps_its_float16_edges(tmp_path):
    half = half_model(tmp_path)
    wide = float16.computed_in_float32(half)
    types = lambda values: [v.type.tensor_type.elem_type for v in values]  # noqa: E731
    assert types(wide.graph.input) == types(half.graph.input) == [onnx.TensorProto.FLOAT16]
    assert types(wide.graph.output) == types(half.graph.output) == [onnx.TensorProto.FLOAT16]
    assert not any(t.data_type == onnx.TensorProto.FLOAT16 for t in wide.graph.initializer)
    x = uneven_input(0)["x"].astype(np.float16)
    full = onnx.load(str(tmp_path / "m.onnx"))  # the float32 model it came from
    expected = run(full, x.astype(np.float32))
    out = run(wide, x)
    assert out.dtype == np.float16
    # no intermediate rounding to float16 (as the float16 model has): closer to the float32 model
    assert np.abs(out - expected).max() <= np.abs(run(half, x) - expected).max()
    np.testing.assert_allclose(out.astype(np.float32), expected, rtol=2e-3, atol=2e-3 * np.abs(expected).max())


def test_a_float32_model_is_returned_as_it_is(tmp_path):
    model = onnx.load(str(uneven_channels(tmp_path / "m.onnx")))
    assert float16.computed_in_float32(model) is model and not float16.holds_float16(model)


def test_a_float16_model_quantizes_once_computed_in_float32(tmp_path):
    """onnxruntime refused the smoothed float16 model: "Type parameter (T) of Optype (Mul) bound to
    different types (tensor(float16) and tensor(float)"."""
    half = half_model(tmp_path, keep_io_types=True)
    samples = [{"x": s["x"]} for s in (uneven_input(seed) for seed in range(4))]
    qdq = quantized(float16.computed_in_float32(half), samples, QuantizationSpec()).qdq
    assert any(node.op_type == "QuantizeLinear" for node in qdq.graph.node)
    x = uneven_input(9)["x"]
    expected = run(onnx.load(str(tmp_path / "m.onnx")), x)
    out = run(qdq, x)
    cosine = float(np.dot(out.ravel(), expected.ravel()) / np.linalg.norm(out) / np.linalg.norm(expected))
    assert cosine > 0.99
