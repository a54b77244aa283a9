"""A Loop of a constant count through the import stage: unrolled, it builds and matches onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_functions_tvm import built
from tests.test_loops import body, feed, model, run

pytestmark = pytest.mark.tvm


def test_a_scripted_recurrent_loop_imports_and_matches_onnxruntime(tmp_path):
    """TVM has no Loop converter: the import failed naming it."""
    import tvm

    looped = model(body(), trip=4, condition="go")
    main, _ = built(looped, tmp_path, {"x": [2, 3], "h0": [2, 3]})
    inputs = feed()
    got = main(*[tvm.runtime.tensor(inputs[name]) for name in ("x", "h0")])
    for actual, expected in zip(got, run(looped, inputs)):
        np.testing.assert_allclose(actual.numpy(), expected, rtol=1e-6, atol=1e-6)
