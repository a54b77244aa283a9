"""Random bytes, and real models with random bytes flipped, given to the import stage as the model: it
imports them or raises the project's own error (bad input or a failed stage), never anything else."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelbuild.errors import ModelbuildError
from modelbuild.stages import onnx_import
from tests.helpers.onnx_models import conv_relu

PARAMS = {"inputs": {"x": {"shape": [1, 3, 8, 8], "dtype": "float32"}}, "simplify": True}


def import_bytes(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model, out = Path(tmp) / "model.onnx", Path(tmp) / "out"
        model.write_bytes(data)
        out.mkdir()
        try:
            onnx_import.run(inputs={"model": model}, params=PARAMS, out=out)
        except ModelbuildError:
            pass  # the project's own error: rendered as one line by the worker and the CLI


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=512))
def test_random_bytes_as_a_model_import_or_raise_the_projects_error(data):
    import_bytes(data)


@pytest.fixture(scope="module")
def real_model() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        return conv_relu(Path(tmp) / "m.onnx").read_bytes()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=4))
def test_a_real_model_with_bytes_flipped_imports_or_raises_the_projects_error(real_model, flips):
    data = bytearray(real_model)
    for where, mask in flips:
        data[where % len(data)] ^= mask
    import_bytes(bytes(data))
