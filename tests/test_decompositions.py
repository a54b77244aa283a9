"""Operators TVM lacks, written as ones it has: the same outputs as onnxruntime's on the original operator."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from modelbuild.errors import StageError
from modelbuild.frontend import decompositions

X = np.array([[0, 0, 0, 0], [1, -2, 3, 4], [-0.5, 0.25, 7, -3]], np.float32)  # a zero row: onnxruntime's zeros


def one_node(op: str, dtype=TensorProto.FLOAT, opset: int = 13, **attributes) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], name="node", **attributes)],
        "g",
        [helper.make_tensor_value_info("x", dtype, [3, 4])],
        [helper.make_tensor_value_info("y", dtype, [3, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(model: onnx.ModelProto, x: np.ndarray = X) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize(
    "op, attributes",
    [
        ("LpNormalization", {"axis": 1, "p": 2}),
        ("LpNormalization", {"axis": 0, "p": 1}),
        ("LpNormalization", {}),
        ("LpNormalization", {"axis": 0, "opset": 18}),  # axes an input from opset 18
        ("Celu", {"alpha": 0.7}),
        ("Celu", {}),
        ("Swish", {"alpha": 1.5, "opset": 24}),
        ("Swish", {"opset": 24}),
    ],
)
def test_a_written_out_operator_computes_what_onnxruntime_computes_of_the_original(op, attributes):
    model = one_node(op, **attributes)
    written = decompositions.decomposed(model)
    assert op not in {n.op_type for n in written.graph.node} and written.graph.node[-1].output[0] == "y"
    np.testing.assert_allclose(run(written), run(model), rtol=1e-6, atol=1e-7)


def test_nodes_without_inputs_beside_one_written_out_are_kept():
    """A Constant node has no input to look up the dtype of."""
    graph = helper.make_graph(
        [
            helper.make_node("Constant", [], ["k"], value=onnx.numpy_helper.from_array(X)),
            helper.make_node("Add", ["x", "k"], ["s"]),
            helper.make_node("Celu", ["s"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    written = decompositions.decomposed(model)
    assert written.graph.node[0].op_type == "Constant" and "Celu" not in {n.op_type for n in written.graph.node}
    np.testing.assert_allclose(run(written), run(model), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "model",
    [one_node("LpNormalization", p=3), one_node("Celu", TensorProto.DOUBLE), one_node("Relu")],
    ids=["p3", "float64", "none"],
)
def test_a_form_it_does_not_write_leaves_the_model_as_it_is(model):
    assert decompositions.decomposed(model) is model


@pytest.mark.parametrize("op, opset", [("LpNormalization", 13), ("LpNormalization", 18), ("Celu", 13), ("Swish", 24)])
def test_tvm_imports_the_operator_and_computes_what_onnxruntime_does(tvm, op, opset):
    import tvm
    from tvm import relax

    from modelbuild.stages import onnx_import

    model = one_node(op, opset=opset)
    module = onnx_import.to_relax(model, {"x": {"shape": [3, 4], "dtype": "float32"}})
    vm = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(X)).numpy(), run(model), rtol=1e-5, atol=1e-6)


def attention(mask=None, opset: int = 23, **attributes) -> tuple[onnx.ModelProto, dict]:
    """Opset 23's Attention on q [1, 2, 5, 8], k and v [1, 2, 5, 8] (and a mask), with its feed."""
    rng = np.random.default_rng(0)
    feed = {n: rng.standard_normal((1, 2, 5, 8)).astype(np.float32) for n in "qkv"}
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, 5, 8]) for n in "qkv"]
    if mask is not None:
        feed["mask"] = mask
        kind = TensorProto.BOOL if mask.dtype == bool else TensorProto.FLOAT
        inputs.append(helper.make_tensor_value_info("mask", kind, list(mask.shape)))
    node = helper.make_node(
        "Attention", [*"qkv", *(["mask"] if mask is not None else [])], ["y"], name="attn", **attributes
    )
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), feed


def run_feed(model: onnx.ModelProto, feed: dict) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]


@pytest.mark.parametrize(
    "mask, attributes",
    [
        (None, {}),
        (None, {"is_causal": 1}),
        (None, {"scale": 0.3}),
        (np.random.default_rng(1).standard_normal((5, 5)).astype(np.float32), {}),
        (np.tril(np.ones((1, 1, 5, 5), bool)) | np.eye(5, dtype=bool), {}),
    ],
    ids=["plain", "causal", "scale", "float-mask", "bool-mask"],
)
def test_opset_23_attention_written_out_computes_what_onnxruntime_computes(mask, attributes):
    model, feed = attention(mask, **attributes)
    written = decompositions.decomposed(model)
    assert "Attention" not in {n.op_type for n in written.graph.node}
    np.testing.assert_allclose(run_feed(written, feed), run_feed(model, feed), rtol=1e-5, atol=1e-6)


def test_an_attention_mask_that_is_a_constant_is_read_as_one():
    """An initializer is in no list of the graph's inputs: its dtype is read from the initializer."""
    model, feed = attention(np.zeros((5, 5), np.float32))
    mask = feed.pop("mask")
    model.graph.input.pop()
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.triu(mask - 1e9, 1), "mask"))
    written = decompositions.decomposed(model)
    np.testing.assert_allclose(run_feed(written, feed), run_feed(model, feed), rtol=1e-5, atol=1e-6)


def test_an_attention_it_cannot_write_out_is_refused_with_the_fix():
    model, _ = attention(softcap=30.0)
    with pytest.raises(StageError, match="Attention node 'attn': a softcap is not written out .fix: export"):
        decompositions.decomposed(model)


def test_tvm_imports_opset_23_attention_as_scaled_dot_product_attention(tvm):
    """TVM's converter of that name is onnxruntime's contrib Attention's: it failed with 'num_heads'."""
    import tvm
    from tvm import relax

    from modelbuild.stages import onnx_import

    model, feed = attention(is_causal=1)
    module = onnx_import.to_relax(model, {n: {"shape": [1, 2, 5, 8], "dtype": "float32"} for n in "qkv"})
    vm = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
    ours = vm["main"](*[tvm.runtime.tensor(feed[n]) for n in "qkv"]).numpy()
    np.testing.assert_allclose(ours, run_feed(model, feed), rtol=1e-5, atol=1e-6)


SIGNAL = np.random.default_rng(7).standard_normal((2, 1000, 1)).astype(np.float32)


HANN_64 = np.hanning(64)


def stft(
    window: np.ndarray | None = HANN_64,
    length: int | None = 64,
    step: int = 16,
    signal=(2, 1000, 1),
    **attributes,
) -> onnx.ModelProto:
    """signal [2, 1000, 1] -> STFT (opset 17), its step, window and length constants (initializers)."""
    from onnx import numpy_helper

    constants = {"step": np.array(step, np.int64)}
    if window is not None:
        constants["window"] = window.astype(np.float32)
    if length is not None:
        constants["length"] = np.array(length, np.int64)
    inputs = ["x", "step", "window" if window is not None else "", "length" if length is not None else ""]
    graph = helper.make_graph(
        [helper.make_node("STFT", inputs, ["y"], name="spectrum", **attributes)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(signal))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "model",
    [stft(), stft(onesided=0), stft(window=None), stft(length=None, step=25)],
    ids=["hann-onesided", "two-sided", "no-window", "no-length"],
)
def test_an_stft_is_a_strided_conv_by_windowed_cosines_and_sines(model):
    """torch.stft exports as ONNX's STFT, which TVM's frontend lacks; written out, the same spectrum as
    onnxruntime's FFT to float rounding."""
    written = decompositions.decomposed(model)
    assert "STFT" not in {n.op_type for n in written.graph.node} and written.graph.node[-1].output[0] == "y"
    ours, theirs = run(written, SIGNAL), run(model, SIGNAL)
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "model, reason",
    [
        (stft(signal=(2, 1000, 2)), "only a real signal"),
        (stft(window=np.hanning(48)), "its window has 48 taps but its frame length is 64"),
    ],
)
def test_an_stft_it_cannot_write_out_is_refused_with_the_fix(model, reason):
    with pytest.raises(StageError, match=f"STFT node 'spectrum': {reason}.* .fix: compute the spectrogram"):
        decompositions.decomposed(model)


def test_tvm_imports_an_stft_and_computes_what_onnxruntime_does(tvm):
    import tvm
    from tvm import relax

    from modelbuild.stages import onnx_import

    model = stft()
    module = onnx_import.to_relax(model, {"x": {"shape": list(SIGNAL.shape), "dtype": "float32"}})
    vm = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(SIGNAL)).numpy(), run(model, SIGNAL), rtol=1e-4, atol=1e-4)


def dft(
    shape: list[int], opset: int = 17, axis: int | None = None, length: int | None = None, **attributes
) -> onnx.ModelProto:
    """x of `shape` -> DFT, its axis an attribute (opset 17) or a constant input (opset 20)."""
    from onnx import numpy_helper

    constants, inputs = {}, ["x", "length" if length is not None else ""]
    if length is not None:
        constants["length"] = np.array(length, np.int64)
    if opset >= 20 and axis is not None:
        constants["axis"] = np.array(axis, np.int64)
        inputs.append("axis")
    elif axis is not None:
        attributes["axis"] = axis
    graph = helper.make_graph(
        [helper.make_node("DFT", inputs, ["y"], name="fft", **attributes)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(
    "model",
    [
        dft([2, 64, 1]),
        dft([2, 64, 1], onesided=1),
        dft([3, 5, 24, 2], opset=20),
        dft([3, 24, 5, 2], axis=1),
        dft([2, 3, 40, 2], opset=20, axis=-2, length=40, inverse=1),
        dft([2, 40, 1], opset=20, axis=1, inverse=1),
    ],
    ids=["real", "rfft", "complex-default-axis", "complex-axis-1", "inverse-complex", "inverse-real"],
)
def test_a_dft_is_two_matmuls_by_cosines_and_sines_along_its_axis(model):
    """torch.fft.rfft, fft and ifft export as ONNX's DFT, which TVM's frontend lacks."""
    x = (
        np.random.default_rng(8)
        .standard_normal([d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim])
        .astype(np.float32)
    )
    written = decompositions.decomposed(model)
    assert "DFT" not in {n.op_type for n in written.graph.node} and written.graph.node[-1].output[0] == "y"
    ours, theirs = run(written, x), run(model, x)
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


def test_a_dft_it_cannot_write_out_is_refused_with_the_fix():
    with pytest.raises(StageError, match="DFT node 'fft': only a dft_length equal to the axis's size .* .fix: give"):
        decompositions.decomposed(dft([2, 64, 1], length=128))


def test_tvm_imports_a_complex_dft_and_computes_what_onnxruntime_does(tvm):
    import tvm
    from tvm import relax

    from modelbuild.stages import onnx_import

    model = dft([3, 24, 5, 2], axis=1)
    x = np.random.default_rng(9).standard_normal((3, 24, 5, 2)).astype(np.float32)
    module = onnx_import.to_relax(model, {"x": {"shape": list(x.shape), "dtype": "float32"}})
    vm = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), run(model, x), rtol=1e-4, atol=1e-4)


def reverse_sequence(shape: list[int], **attributes) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("ReverseSequence", ["x", "lengths"], ["y"], name="reverse", **attributes)],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
            helper.make_tensor_value_info("lengths", TensorProto.INT64, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize(
    "model",
    [
        reverse_sequence([6, 4, 3]),
        reverse_sequence([4, 6], batch_axis=0, time_axis=1),
        reverse_sequence([4, 6, 2, 3], batch_axis=0, time_axis=1),
    ],
    ids=["time-major", "batch-major-2d", "batch-major-4d"],
)
def test_reverse_sequence_is_a_gather_of_each_entrys_steps_reversed_up_to_its_length(model):
    """tf2onnx writes a bidirectional RNN over sequences of several lengths with ReverseSequence."""
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feed = {
        "x": np.random.default_rng(10).standard_normal(shape).astype(np.float32),
        "lengths": np.array([6, 1, 3, 0], np.int64),
    }
    written = decompositions.decomposed(model)
    assert "ReverseSequence" not in {n.op_type for n in written.graph.node}
    np.testing.assert_array_equal(run_feed(written, feed), run_feed(model, feed))


def test_tvm_imports_reverse_sequence_and_computes_what_onnxruntime_does(tvm):
    import tvm
    from tvm import relax

    from modelbuild.stages import onnx_import

    model = reverse_sequence([6, 4, 3])
    feed = {
        "x": np.random.default_rng(11).standard_normal((6, 4, 3)).astype(np.float32),
        "lengths": np.array([2, 6, 1, 4], np.int64),
    }
    module = onnx_import.to_relax(
        model, {"x": {"shape": [6, 4, 3], "dtype": "float32"}, "lengths": {"shape": [4], "dtype": "int64"}}
    )
    vm = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
    ours = vm["main"](tvm.runtime.tensor(feed["x"]), tvm.runtime.tensor(feed["lengths"])).numpy()
    np.testing.assert_array_equal(ours, run_feed(model, feed))


def rotary(shape: list[int], positions: bool = True, **attributes) -> tuple[onnx.ModelProto, np.ndarray]:
    """x of `shape` -> opset 23's RotaryEmbedding, its caches (and position ids) constants."""
    from onnx import numpy_helper

    rng = np.random.default_rng(12)
    batch, seq = shape[0], shape[2] if len(shape) == 4 else shape[1]
    half = (
        attributes.get("rotary_embedding_dim") or (shape[3] if len(shape) == 4 else shape[2] // attributes["num_heads"])
    ) // 2
    rows = [16] if positions else [batch, seq]
    constants = {
        "cos": rng.standard_normal([*rows, half]).astype(np.float32),
        "sin": rng.standard_normal([*rows, half]).astype(np.float32),
    }
    if positions:
        constants["positions"] = rng.integers(0, 16, (batch, seq)).astype(np.int64)
    node = helper.make_node(
        "RotaryEmbedding", ["x", "cos", "sin", *(["positions"] if positions else [])], ["y"], name="rope", **attributes
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    return model, rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "shape, positions, attributes",
    [
        ([2, 3, 5, 8], True, {}),
        ([2, 3, 5, 8], True, {"interleaved": 1}),
        ([1, 5, 24], True, {"num_heads": 3}),
        ([2, 2, 5, 8], False, {"rotary_embedding_dim": 4}),
        ([1, 5, 24], True, {"num_heads": 2, "interleaved": 1, "rotary_embedding_dim": 6}),
    ],
    ids=["halves", "interleaved", "3d", "partial-no-positions", "3d-interleaved-partial"],
)
def test_opset_23_rotary_embedding_written_out_computes_what_onnxruntime_computes(shape, positions, attributes):
    """The torch.onnx exporter's opset-23 LLM graphs rotate queries and keys with it; TVM lacks it."""
    model, x = rotary(shape, positions, **attributes)
    written = decompositions.decomposed(model)
    assert "RotaryEmbedding" not in {n.op_type for n in written.graph.node}
    names = [t.name for t in written.graph.initializer]
    assert len(names) == len(set(names))  # an axis both halves read is one constant
    np.testing.assert_allclose(run(written, x), run(model, x), rtol=1e-5, atol=1e-6)


def test_a_rotary_embedding_it_cannot_write_out_is_refused_with_the_fix():
    model, _ = rotary([1, 5, 24], num_heads=3)
    del model.graph.node[0].attribute[:]  # a 3-D input with no num_heads has no head size
    with pytest.raises(
        StageError,
        match="RotaryEmbedding node 'rope': only an input of known shape, 4-D or 3-D "
        "with num_heads, is written out .fix: give",
    ):
        decompositions.decomposed(model)


def test_tvm_imports_opset_23_rotary_embedding_and_computes_what_onnxruntime_does(tvm):
    import tvm
    from tvm import relax

    from modelbuild.stages import onnx_import

    model, x = rotary([2, 3, 5, 8], interleaved=1)
    module = onnx_import.to_relax(model, {"x": {"shape": [2, 3, 5, 8], "dtype": "float32"}})
    vm = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), run(model, x), rtol=1e-5, atol=1e-6)


def tensor_scatter(past: list[int], update: list[int], write: list[int] | None, **attributes):
    """past, update (inputs) and write indices (a constant, or none) -> opset 24's TensorScatter."""
    from onnx import numpy_helper

    inits = [numpy_helper.from_array(np.array(write, np.int64), "write")] if write is not None else []
    node = helper.make_node(
        "TensorScatter",
        ["past", "update", *(["write"] if write is not None else [])],
        ["y"],
        name="cache",
        **attributes,
    )
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("past", TensorProto.FLOAT, past),
            helper.make_tensor_value_info("update", TensorProto.FLOAT, update),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    rng = np.random.default_rng(13)
    return model, {
        "past": rng.standard_normal(past).astype(np.float32),
        "update": rng.standard_normal(update).astype(np.float32),
    }


@pytest.mark.parametrize(
    "past, update, write, attributes",
    [
        ([2, 3, 8, 4], [2, 3, 3, 4], [1, 5], {}),
        ([2, 3, 8, 4], [2, 3, 3, 4], [1, 6], {"mode": "circular"}),
        ([2, 8, 4], [2, 1, 4], [7, 0], {"axis": 1}),
        ([1, 2, 6, 4], [1, 2, 6, 4], None, {}),
    ],
    ids=["linear", "circular-wraps", "axis-1-one-step", "prefill-no-indices"],
)
def test_opset_24_tensor_scatter_written_out_computes_what_onnxruntime_computes(past, update, write, attributes):
    """An LLM decoder's KV-cache update at opset 24; TVM lacks it."""
    model, feed = tensor_scatter(past, update, write, **attributes)
    written = decompositions.decomposed(model)
    assert "TensorScatter" not in {n.op_type for n in written.graph.node}
    np.testing.assert_array_equal(run_feed(written, feed), run_feed(model, feed))


def test_a_tensor_scatter_over_caches_of_unknown_shape_is_refused_with_the_fix():
    model, _ = tensor_scatter([2, 3, 8, 4], [2, 3, 3, 4], [1, 5])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    with pytest.raises(StageError, match="TensorScatter node 'cache': only caches of known shapes .* .fix: give"):
        decompositions.decomposed(model)


def test_tvm_imports_opset_24_tensor_scatter_and_computes_what_onnxruntime_does(tvm):
    import tvm
    from tvm import relax

    from modelbuild.stages import onnx_import

    model, feed = tensor_scatter([2, 3, 8, 4], [2, 3, 3, 4], [1, 6], mode="circular")
    module = onnx_import.to_relax(
        model,
        {"past": {"shape": [2, 3, 8, 4], "dtype": "float32"}, "update": {"shape": [2, 3, 3, 4], "dtype": "float32"}},
    )
    vm = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
    ours = vm["main"](tvm.runtime.tensor(feed["past"]), tvm.runtime.tensor(feed["update"])).numpy()
    np.testing.assert_array_equal(ours, run_feed(model, feed))


def col2im(image: list[int], block: list[int], **attributes) -> tuple[onnx.ModelProto, list[int]]:
    """torch.nn.Fold as it exports: Col2Im of columns [2, 3 * kh * kw, L] into 3 channels; the columns' shape."""
    from onnx import numpy_helper

    dilations, strides = attributes.get("dilations", [1, 1]), attributes.get("strides", [1, 1])
    pads = attributes.get("pads", [0, 0, 0, 0])
    grid = [(image[d] + pads[d] + pads[d + 2] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in (0, 1)]
    columns = [2, 3 * block[0] * block[1], grid[0] * grid[1]]
    graph = helper.make_graph(
        [helper.make_node("Col2Im", ["x", "image", "block"], ["y"], name="fold", **attributes)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, columns)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[
            numpy_helper.from_array(np.array(image, np.int64), "image"),
            numpy_helper.from_array(np.array(block, np.int64), "block"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), columns


@pytest.mark.parametrize(
    "image, block, attributes",
    [
        ([5, 5], [2, 2], {}),
        ([6, 7], [3, 2], {"strides": [2, 1], "pads": [1, 0, 1, 1], "dilations": [1, 2]}),
        ([9, 8], [3, 3], {"strides": [2, 3]}),
    ],
    ids=["overlapping", "strided-padded-dilated", "strides-leave-a-remainder"],
)
def test_col2im_is_a_transposed_conv_by_one_hot_kernels(image, block, attributes):
    model, columns = col2im(image, block, **attributes)
    feed = {"x": np.random.default_rng(12).standard_normal(columns).astype(np.float32)}
    written = decompositions.decomposed(model)
    assert "Col2Im" not in {n.op_type for n in written.graph.node}
    np.testing.assert_array_equal(run_feed(written, feed), run_feed(model, feed))


def test_col2im_of_columns_that_are_not_the_images_blocks_is_refused_with_the_fix():
    model, _ = col2im([5, 5], [2, 2])
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 15  # 16 blocks of 2x2 tile a 5x5 image
    with pytest.raises(
        StageError,
        match=r"Col2Im node 'fold': its columns \[2, 12, 15\] are not the 2x2 blocks of a "
        r"5x5 image \(fix: the exporter's Fold parameters\)",
    ):
        decompositions.decomposed(model)


def test_tvm_imports_col2im_and_computes_what_onnxruntime_does(tvm, tmp_path):
    import tvm

    from tests.helpers.onnx_builds import built

    model, columns = col2im([12, 10], [3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    main, _ = built(model, tmp_path, {"x": columns})
    feed = {"x": np.random.default_rng(13).standard_normal(columns).astype(np.float32)}
    np.testing.assert_allclose(main(tvm.runtime.tensor(feed["x"])).numpy(), run_feed(model, feed), rtol=1e-6, atol=1e-6)


def det(shape: list[int]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Det", ["x"], ["y"], name="det")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize(
    "shape",
    [[1, 1], [2, 2], [3, 3], [4, 2, 3, 3], [5, 2, 2]],
    ids=["1x1", "2x2", "3x3", "batches-of-3x3", "batch-of-2x2"],
)
def test_det_of_small_matrices_is_their_cofactor_expansion(shape):
    model = det(shape)
    feed = {"x": np.random.default_rng(14).standard_normal(shape).astype(np.float32)}
    written = decompositions.decomposed(model)
    assert "Det" not in {n.op_type for n in written.graph.node}
    np.testing.assert_allclose(run_feed(written, feed), run_feed(model, feed), rtol=1e-5, atol=1e-6)


def test_det_of_a_larger_matrix_is_refused_with_the_fix():
    with pytest.raises(
        StageError,
        match=r"Det node 'det': only matrices of 1x1 to 3x3 of known shape are written out, "
        r"and its input is \[4, 4\]",
    ):
        decompositions.decomposed(det([4, 4]))


def test_tvm_imports_det_and_computes_what_onnxruntime_does(tvm, tmp_path):
    import tvm

    from tests.helpers.onnx_builds import built

    model = det([6, 3, 3])
    main, _ = built(model, tmp_path, {"x": [6, 3, 3]})
    feed = {"x": np.random.default_rng(15).standard_normal((6, 3, 3)).astype(np.float32)}
    np.testing.assert_allclose(main(tvm.runtime.tensor(feed["x"])).numpy(), run_feed(model, feed), rtol=1e-5, atol=1e-6)


def cumulative_product(shape: list[int], axis: int, **attributes) -> onnx.ModelProto:
    from onnx import numpy_helper

    graph = helper.make_graph(
        [helper.make_node("CumProd", ["x", "axis"], ["y"], name="products", **attributes)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array(axis, np.int64), "axis")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize(
    "shape, axis, attributes",
    [
        ([3, 7], 1, {}),
        ([3, 7], 0, {"exclusive": 1}),
        ([2, 6, 3], 1, {"reverse": 1}),
        ([2, 6, 3], -2, {"reverse": 1, "exclusive": 1}),
        ([5], 0, {}),
    ],
    ids=["last-axis", "exclusive", "reverse-middle-axis", "reverse-exclusive-negative-axis", "vector"],
)
def test_cumprod_is_a_product_over_a_triangular_mask(shape, axis, attributes):
    model = cumulative_product(shape, axis, **attributes)
    x = np.random.default_rng(16).uniform(-2, 2, shape).astype(np.float32)
    x.flat[3] = 0.0  # a zero in a prefix: no logarithm could carry it
    written = decompositions.decomposed(model)
    assert "CumProd" not in {n.op_type for n in written.graph.node}
    np.testing.assert_allclose(run_feed(written, {"x": x}), run_feed(model, {"x": x}), rtol=1e-6, atol=0)


def test_tvm_imports_cumprod_and_computes_what_onnxruntime_does(tvm, tmp_path):
    import tvm

    from tests.helpers.onnx_builds import built

    model = cumulative_product([4, 9], 1, reverse=1)
    main, _ = built(model, tmp_path, {"x": [4, 9]})
    x = np.random.default_rng(17).uniform(-2, 2, (4, 9)).astype(np.float32)
    np.testing.assert_allclose(main(tvm.runtime.tensor(x)).numpy(), run_feed(model, {"x": x}), rtol=1e-6, atol=0)


def deform_conv(
    x: list[int], out_channels: int, kernel: list[int], masked: bool, opset: int = 19, **attributes
) -> tuple[onnx.ModelProto, dict]:
    """A deformable conv (torchvision's deform_conv2d, DCNv2 with a mask) and a feed with offsets of a few
    pixels, some reaching outside the map."""
    from onnx import numpy_helper

    rng = np.random.default_rng(18)
    groups, offset_groups = attributes.get("group", 1), attributes.get("offset_group", 1)
    strides, dilations = attributes.get("strides", [1, 1]), attributes.get("dilations", [1, 1])
    pads = attributes.get("pads", [0, 0, 0, 0])
    out = [(x[2 + d] + pads[d] + pads[d + 2] - dilations[d] * (kernel[d] - 1) - 1) // strides[d] + 1 for d in (0, 1)]
    taps = kernel[0] * kernel[1]
    feed = {
        "x": rng.standard_normal(x).astype(np.float32),
        "offset": (rng.standard_normal([x[0], offset_groups * taps * 2, *out]) * 2).astype(np.float32),
    }
    inputs = ["x", "w", "offset", "b"]
    if masked:
        feed["mask"] = rng.uniform(0, 1, [x[0], offset_groups * taps, *out]).astype(np.float32)
        inputs.append("mask")
    weights = rng.standard_normal([out_channels, x[1] // groups, *kernel]).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("DeformConv", inputs, ["y"], name="dcn", kernel_shape=kernel, **attributes)],
        "g",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in feed.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[
            numpy_helper.from_array(weights, "w"),
            numpy_helper.from_array(rng.standard_normal(out_channels).astype(np.float32), "b"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), feed


@pytest.mark.parametrize(
    "x, kernel, masked, attributes",
    [
        ([1, 4, 7, 6], [3, 3], False, {"pads": [1, 1, 1, 1]}),
        ([2, 4, 8, 8], [3, 3], True, {"pads": [1, 1, 1, 1], "offset_group": 2, "group": 2}),
        ([1, 3, 9, 10], [3, 2], True, {"strides": [2, 1], "dilations": [1, 2], "pads": [0, 1, 2, 1]}),
    ],
    ids=["dcn-v1", "dcn-v2-groups", "strided-dilated-uneven-pads"],
)
@pytest.mark.parametrize("opset", [19, 22])
def test_deform_conv_is_its_taps_sampled_then_a_one_by_one_conv(x, kernel, masked, attributes, opset):
    model, feed = deform_conv(x, 6, kernel, masked, opset, **attributes)
    written = decompositions.decomposed(model)
    assert "DeformConv" not in {n.op_type for n in written.graph.node}
    np.testing.assert_allclose(run_feed(written, feed), run_feed(model, feed), rtol=1e-5, atol=2e-5)


def test_tvm_imports_deform_conv_and_computes_what_onnxruntime_does(tvm, tmp_path):
    import tvm

    from tests.helpers.onnx_builds import built

    model, feed = deform_conv([1, 8, 12, 12], 16, [3, 3], True, pads=[1, 1, 1, 1], offset_group=2)
    main, _ = built(model, tmp_path, {name: list(value.shape) for name, value in feed.items()})
    got = main(*[tvm.runtime.tensor(feed[name]) for name in ("x", "offset", "mask")]).numpy()
    np.testing.assert_allclose(got, run_feed(model, feed), rtol=1e-5, atol=2e-5)
