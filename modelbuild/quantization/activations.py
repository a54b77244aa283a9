"""Intermediate tensors of an ONNX model, computed by onnxruntime: what calibration-time statistics read."""

from __future__ import annotations

from collections.abc import Iterable


def exposed(model, names: Iterable[str] | None = None):
    """A copy of `model` whose graph outputs also include `names` (every node output when None)."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    wanted = [name for node in copy.graph.node for name in node.output if name] if names is None else list(names)
    present = {o.name for o in copy.graph.output}
    for name in wanted:
        if name not in present:
            # type and shape left open: onnxruntime infers them, and an intermediate may be int8 or float
            copy.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
            present.add(name)
    return copy


def session(model, threads: int = 0):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3  # unused initializers after smoothing are expected, not worth a warning
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def feed(sess, sample: dict) -> dict:
    return {i.name: sample[i.name] for i in sess.get_inputs() if i.name in sample}


def compute(model, sample: dict, names: Iterable[str] | None = None) -> dict:
    """The tensors `names` (every node output when None) of `model` on one sample, by name."""
    sess = session(exposed(model, names))
    outputs = [o.name for o in sess.get_outputs()]
    return dict(zip(outputs, sess.run(outputs, feed(sess, sample))))
