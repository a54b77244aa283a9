"""The reference stage's onnxruntime session: what the QDQ graph says, not onnxruntime's fused 8-bit kernels."""

from __future__ import annotations

import onnx
import onnxruntime as ort

from modelbuild.stages.reference import session_options
from tests.helpers.onnx_models import quantized_qdq, two_convs


def test_a_qdq_model_runs_unoptimised_and_a_float_model_as_onnxruntime_optimises_it(tmp_path):
    """Fused, onnxruntime's QDQ convs on an AVX2 CPU without VNNI saturated and ran up to 6 steps from the
    exact result; unoptimised, each DequantizeLinear, float Conv and QuantizeLinear runs as written."""
    float_model = two_convs(tmp_path / "net.onnx", channels=8)
    qdq = quantized_qdq(float_model, tmp_path / "net.qdq.onnx", [1, 3, 16, 16])
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in onnx.load(str(qdq)).graph.node}
    unoptimised = session_options(qdq)
    assert unoptimised.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert session_options(float_model).graph_optimization_level == ort.SessionOptions().graph_optimization_level
    assert unoptimised.intra_op_num_threads == session_options(float_model).intra_op_num_threads == 1


def test_a_model_that_cannot_be_read_is_a_stage_error_not_a_traceback(tmp_path):
    """Reading the nodes for the options reads the model: a broken file is the one-line stage error it was."""
    import numpy as np
    import pytest

    from modelbuild.errors import StageError
    from modelbuild.stages.reference import _run_onnxruntime

    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"not a model")
    with pytest.raises(StageError, match="onnxruntime cannot load the model"):
        _run_onnxruntime(broken, {"x": np.zeros((1, 1), np.float32)}, {}, {})


def test_a_pre_quantized_models_reference_is_its_exact_integer_result(tmp_path):
    """onnxruntime's uint8 x int8 kernel on an AVX2 CPU without VNNI saturated this MatMulInteger's 16-bit
    pair sums (28559 from the exact sum on a Zen 4 VM); the reference runs it with uint8 weights instead."""
    import numpy as np

    from modelbuild.stages.reference import _run_onnxruntime
    from tests.helpers.onnx_models import INTEGER_OPS, integer_op

    model = onnx.load(str(integer_op(tmp_path / "m.onnx", "MatMulInteger")))
    constants = {t.name: onnx.numpy_helper.to_array(t).astype(np.int64) for t in model.graph.initializer}
    x = np.full((1, *INTEGER_OPS["MatMulInteger"][0]), 255, np.uint8)
    got = _run_onnxruntime(tmp_path / "m.onnx", {"x": x}, {}, {})["y"]
    assert np.array_equal(
        got[0], (x[0].astype(np.int64) - constants["x_zero"]) @ (constants["w"] - constants["w_zero"])
    )


def test_weights_stored_beside_the_model_are_read_where_they_are_int8_only(tmp_path):
    import numpy as np

    from modelbuild.stages.reference import _exact_form, _run_onnxruntime
    from tests.helpers.onnx_models import INTEGER_OPS, integer_op, two_convs

    quantized = onnx.load(str(integer_op(tmp_path / "q.onnx", "MatMulInteger")))
    constants = {t.name: onnx.numpy_helper.to_array(t).astype(np.int64) for t in quantized.graph.initializer}
    onnx.save(quantized, str(tmp_path / "q.onnx"), save_as_external_data=True, location="q.data", size_threshold=0)
    x = np.full((1, *INTEGER_OPS["MatMulInteger"][0]), 255, np.uint8)
    got = _run_onnxruntime(tmp_path / "q.onnx", {"x": x}, {}, {})["y"]
    assert np.array_equal(
        got[0], (x[0].astype(np.int64) - constants["x_zero"]) @ (constants["w"] - constants["w_zero"])
    )
    float_model = onnx.load(str(two_convs(tmp_path / "f.onnx", channels=8)))
    onnx.save(float_model, str(tmp_path / "f.onnx"), save_as_external_data=True, location="f.data", size_threshold=0)
    (tmp_path / "f.data").unlink()  # a float model's weights are not read: nothing there to rewrite
    unread = onnx.load(str(tmp_path / "f.onnx"), load_external_data=False)
    assert _exact_form(tmp_path / "f.onnx", unread) == str(tmp_path / "f.onnx")
