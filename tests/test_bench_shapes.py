"""bench/shapes.py, the speed fuzzer: its draws are valid models of the shapes it says, the same for a seed,
and its measured peak and summary line are what the goals read."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def shapes():
    sys.path.insert(0, str(REPO / "bench"))  # it imports zoo beside it
    spec = importlib.util.spec_from_file_location("shapes", REPO / "bench" / "shapes.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["shapes"] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_a_seed_draws_the_same_ops_and_another_seed_others(shapes):
    first, again, other = shapes.draw(5, 40), shapes.draw(5, 40), shapes.draw(6, 40)
    assert [op.geometry for op in first] == [op.geometry for op in again]
    assert [op.geometry for op in first] != [op.geometry for op in other]


def test_every_drawn_op_is_a_model_onnxruntime_runs_to_the_shape_it_declares(shapes, tmp_path):
    ops = shapes.draw(20261206, 40)
    assert {"conv", "matmul"} <= {op.family for op in ops}
    for op in ops:
        assert op.flops <= shapes.MAX_FLOPS, op.geometry
        path = tmp_path / f"{op.name}.onnx"
        shapes.save(op, path)
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
        feed = {name: np.ones(shape, np.float32) for name, shape in op.inputs.items()}
        (out,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)
        assert list(out.shape) == op.output_shape, op.geometry


def test_conv_draws_cover_grouped_depthwise_strided_dilated_and_odd_channels(shapes):
    convs = [op for op in shapes.draw(1, 400) if "conv" in op.family and op.family != "conv-transpose"]
    geometry = " ".join(op.geometry for op in convs)
    assert {"conv", "grouped-conv", "depthwise-conv"} <= {op.family for op in convs}
    assert " s2 " in geometry and " d2 " in geometry and re.search(r"\b7x7\b", geometry)
    assert any(int(c) % 2 for c in re.findall(r"(\d+)->", geometry))


def test_the_summary_ends_with_the_line_the_goals_are_read_from(shapes, tmp_path, capsys):
    rows = [shapes.Row(f"op{i}", "conv", "g", 0.1, ratio=r, peak_fraction=0.5) for i, r in enumerate([0.5, 1, 2])]
    shapes.summarise(rows, 42, 100.0, 80.0, type("Args", (), {"threads": 2}), tmp_path / "shapes-42.json")
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == "summary: median 1.00x, p90 2.00x, max 2.00x onnxruntime over 3 ops (seed 42)"


def test_a_higher_second_reading_of_the_peak_is_kept_and_every_share_recomputed_against_it(shapes, capsys):
    """A core busy when the run began lowers the first reading; the second, after the timings, replaces it."""
    timed, failed = (
        shapes.Row("a", "conv", "g", 1.0, gflops=100.0, peak_fraction=1.0),
        shapes.Row("b", "conv", "g", 1.0),
    )
    assert shapes.with_higher_peak([timed, failed], 100.0, 200.0) == 200.0
    assert timed.peak_fraction == 0.5 and failed.peak_fraction is None
    assert "measured again" in capsys.readouterr().out
    assert shapes.with_higher_peak([timed], 200.0, 150.0) == 200.0 and timed.peak_fraction == 0.5
