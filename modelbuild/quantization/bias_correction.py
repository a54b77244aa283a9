"""Empirical bias correction: each quantized conv's int32 bias absorbs the mean error int8 left in its output.

Rounding a conv's weights to int8 shifts the mean of each output channel by (W_q - W) E[x]: an error that
does not average out, that a global-average-pool (squeeze-excite blocks, both bundled models have them)
turns straight into a wrong channel gain, and that the next layers pass on. On calibration samples, the
fp32 and the QDQ model run side by side; in execution order, each quantized conv's per-channel mean error
is measured with every earlier correction in place and subtracted from its bias (Nagel et al., "Data-Free
Quantization", 2019, section 4.2, measured rather than derived). The bias stays an int32 tensor with the
scale onnxruntime gave it, so the integer kernels are unchanged.
"""

from __future__ import annotations

import numpy as np

from modelbuild.quantization import activations

SAMPLES = 8  # each conv costs one run of the QDQ model per sample; 8 held the detector's gain


def correctable(qdq) -> list[tuple]:
    """(conv node, int32 bias initializer, bias scale) of each conv with quantized data and an int32 bias,
    in execution order."""
    from onnx import numpy_helper

    initializers = {t.name: t for t in qdq.graph.initializer}
    producer = {name: node for node in qdq.graph.node for name in node.output}

    def dequantized(name):
        node = producer.get(name)
        return node if node is not None and node.op_type == "DequantizeLinear" else None

    found = []
    for node in qdq.graph.node:
        if node.op_type != "Conv" or len(node.input) < 3 or dequantized(node.input[0]) is None:
            continue
        bias = dequantized(node.input[2])
        if bias is not None and bias.input[0] in initializers and bias.input[1] in initializers:
            found.append((node, initializers[bias.input[0]], numpy_helper.to_array(initializers[bias.input[1]])))
    return found


def correct(float_model, qdq, samples: list[dict]) -> int:
    """Correct the conv biases of `qdq` in place (see the module text); return how many convs were corrected."""
    import onnx
    from onnx import numpy_helper

    convs = correctable(qdq)
    if not convs:
        return 0
    samples = samples[:SAMPLES]
    outputs = [node.output[0] for node, _, _ in convs]
    reference = activations.session(activations.exposed(float_model, outputs))
    want = [dict(zip(outputs, reference.run(outputs, activations.feed(reference, s)))) for s in samples]
    # the biases become inputs that override their initializers, so one session serves every step
    probe = activations.exposed(qdq, outputs)
    probe.graph.input.extend(
        onnx.helper.make_tensor_value_info(bias.name, onnx.TensorProto.INT32, list(bias.dims)) for _, bias, _ in convs
    )
    sess = activations.session(probe)
    biases = {bias.name: numpy_helper.to_array(bias).astype(np.int32) for _, bias, _ in convs}
    for node, bias, scale in convs:
        name = node.output[0]
        errors = [sess.run([name], {**activations.feed(sess, s), **biases})[0] - w[name] for s, w in zip(samples, want)]
        biases[bias.name] = _corrected(biases[bias.name], channel_mean(np.stack(errors)), scale)
    for _, bias, _ in convs:
        bias.CopyFrom(numpy_helper.from_array(biases[bias.name], bias.name))
    return len(convs)


def channel_mean(errors: np.ndarray) -> np.ndarray:
    """Mean over samples, batch and positions, per output channel: errors are [samples, N, C, ...]."""
    return errors.astype(np.float64).mean(axis=tuple(i for i in range(errors.ndim) if i != 2))


def _corrected(bias: np.ndarray, mean_error: np.ndarray, scale: np.ndarray) -> np.ndarray:
    step = np.asarray(scale, np.float64).reshape(-1)
    shifted = bias.astype(np.int64) - np.rint(mean_error / step).astype(np.int64)
    info = np.iinfo(np.int32)
    return np.clip(shifted, info.min, info.max).astype(np.int32)
