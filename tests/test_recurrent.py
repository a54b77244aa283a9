"""LSTM, GRU and RNN unrolled into operators TVM imports, against onnxruntime's own kernels: no TVM needed."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from modelbuild.errors import StageError
from modelbuild.frontend import recurrent
from tests.helpers.onnx_models import STEPS, recurrent_model


def run(model: onnx.ModelProto, feed: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feed)


@pytest.mark.parametrize("variant", ["plain", "initial", "lengths", "full_lengths", "clip", "peephole", "relu"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_the_unrolled_layer_computes_what_onnxruntime_computes(op, direction, variant):
    model, feed = recurrent_model(op, direction, variant)
    unrolled = recurrent.decompose(model)
    assert not any(n.op_type in ("LSTM", "GRU") for n in unrolled.graph.node)
    for want, got in zip(run(model, feed), run(unrolled, feed), strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_batch_first_layout_computes_the_transposed_sequence_first_results(op, direction):
    """onnxruntime refuses layout = 1, so the unrolled batch-first layer is checked against its own
    sequence-first twin (same weights, initial states and clip) run by onnxruntime, transposed."""
    twin, twin_feed = recurrent_model(op, direction, "clip")
    model, _ = recurrent_model(op, direction, "layout1")
    feed = {name: value.transpose(1, 0, 2) for name, value in twin_feed.items()}  # X and states: batch first
    wanted = run(twin, twin_feed)
    wanted = [wanted[0].transpose(2, 0, 1, 3), *(state.transpose(1, 0, 2) for state in wanted[1:])]
    for want, got in zip(wanted, run(recurrent.decompose(model), feed), strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_each_step_takes_one_matmul_for_every_gate_and_the_inputs_one_for_all_steps():
    model, _ = recurrent_model("LSTM", "forward", "plain")
    matmuls = [n for n in recurrent.decompose(model).graph.node if n.op_type == "MatMul"]
    assert len(matmuls) == 1 + STEPS


def test_a_model_without_recurrent_layers_is_returned_as_it_is():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph)
    assert recurrent.decompose(model) is model


def test_an_activation_it_cannot_unroll_is_named():
    model, _ = recurrent_model("GRU", "forward", "plain")
    model.graph.node[0].attribute.append(helper.make_attribute("activations", ["HardSigmoid", "Tanh"]))
    with pytest.raises(
        StageError,
        match=r"operator GRU \(node 'rnn'\): activation HardSigmoid is not one modelbuild "
        r"unrolls \(Relu, Sigmoid, Tanh\)",
    ):
        recurrent.decompose(model)
