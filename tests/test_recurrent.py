"""LSTM, GRU and RNN unrolled into operators TVM imports, against onnxruntime's own kernels: no TVM needed."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelbuild.errors import StageError
from modelbuild.frontend import recurrent

STEPS, BATCH, FEATURES, HIDDEN = 5, 3, 4, 6
LENGTHS = np.array([5, 2, 4], np.int32)  # the second and third samples stop early


def recurrent_model(op: str, direction: str, variant: str) -> tuple[onnx.ModelProto, dict]:
    """One LSTM / GRU node with random weights; `variant` picks the attributes and optional inputs."""
    # layout1 is clip's model batch-first: the same weights, so one checks the other (onnxruntime has no layout 1)
    rng = np.random.default_rng(
        ["plain", "initial", "lengths", "full_lengths", "clip", "peephole", "relu"].index(
            "clip" if variant == "layout1" else variant
        )
    )
    dirs, gates = (2 if direction == "bidirectional" else 1), {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    layout = 1 if variant == "layout1" else 0
    x_shape = [STEPS, BATCH, FEATURES] if layout == 0 else [BATCH, STEPS, FEATURES]
    state_shape = [dirs, BATCH, HIDDEN] if layout == 0 else [BATCH, dirs, HIDDEN]
    weights = {
        "W": (dirs, gates * HIDDEN, FEATURES),
        "R": (dirs, gates * HIDDEN, HIDDEN),
        "B": (dirs, 2 * gates * HIDDEN),
    }
    if op == "LSTM" and variant == "peephole":
        weights["P"] = (dirs, 3 * HIDDEN)
    initializers = [
        numpy_helper.from_array((rng.standard_normal(s) * 0.5).astype(np.float32), n) for n, s in weights.items()
    ]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    feed = {"X": rng.standard_normal(x_shape).astype(np.float32)}
    inputs = ["X", "W", "R", "B", "", "", "", ""]
    if variant in ("initial", "lengths", "clip", "layout1"):  # initial states as graph inputs
        for position, name in ((5, "h0"), (6, "c0"))[: 2 if op == "LSTM" else 1]:
            graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, state_shape))
            feed[name] = rng.standard_normal(state_shape).astype(np.float32)
            inputs[position] = name
    if variant == "lengths":
        graph_inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [BATCH]))
        feed["lens"], inputs[4] = LENGTHS, "lens"
    if variant == "full_lengths":  # constants equal to the sequence length: nothing to mask
        initializers.append(numpy_helper.from_array(np.full(BATCH, STEPS, np.int32), "lens"))
        inputs[4] = "lens"
    if "P" in weights:
        inputs[7] = "P"
    attributes = {"hidden_size": HIDDEN, "direction": direction}
    if variant in ("clip", "layout1"):
        attributes |= {"layout": 1 if variant == "layout1" else 0, "clip": 0.7}
    if variant == "peephole" and op == "LSTM":
        attributes["input_forget"] = 1
    if variant == "peephole" and op == "GRU":
        attributes["linear_before_reset"] = 1
    if variant == "relu":
        attributes["activations"] = {"LSTM": ["Sigmoid", "Relu", "Tanh"], "GRU": ["Sigmoid", "Relu"], "RNN": ["Relu"]}[
            op
        ] * dirs
    used = inputs[: max(i for i, name in enumerate(inputs) if name) + 1]
    outputs = ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
    node = helper.make_node(op, used, outputs, name="rnn", **attributes)
    graph = helper.make_graph(
        [node],
        "rnn",
        graph_inputs,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model, feed


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
