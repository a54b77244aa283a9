"""A Loop of a constant count through the import stage: unrolled, it builds and matches onnxruntime."""

from __future__ import annotations

import numpy as np

from tests.helpers.onnx_builds import built
from tests.helpers.onnx_loops import body, feed, model, run, scan_feed, scan_model


def test_a_scripted_recurrent_loop_imports_and_matches_onnxruntime(tmp_path):
    """TVM has no Loop converter: the import failed naming it."""
    import tvm

    looped = model(body(), trip=4, condition="go")
    main, _ = built(looped, tmp_path, {"x": [2, 3], "h0": [2, 3]})
    inputs = feed()
    got = main(*[tvm.runtime.tensor(inputs[name]) for name in ("x", "h0")])
    for actual, expected in zip(got, run(looped, inputs)):
        np.testing.assert_allclose(actual.numpy(), expected, rtol=1e-6, atol=1e-6)


def test_a_scan_running_backwards_imports_and_matches_onnxruntime(tmp_path):
    """TVM has no Scan converter: tf2onnx's tf.scan failed the import naming it."""
    import tvm

    scanned = scan_model(input_directions=(1,), output_axes=(1,))
    main, _ = built(scanned, tmp_path, {"x": [5, 2, 3], "h0": [2, 3]})
    inputs = scan_feed()
    got = main(*[tvm.runtime.tensor(inputs[name]) for name in ("x", "h0")])
    for actual, expected in zip(got, run(scanned, inputs)):
        np.testing.assert_allclose(actual.numpy(), expected, rtol=1e-6, atol=1e-6)
