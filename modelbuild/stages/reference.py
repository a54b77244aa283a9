"""The reference stage: golden inputs, and the original ONNX model's outputs on them from onnxruntime's CPU
provider. Cached under its own key, so editing a gate or a target never reruns it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from modelbuild import signature
from modelbuild.errors import StageError, last_line
from modelbuild.frontend import topk_order
from modelbuild.recipe.params import ReferenceParams
from modelbuild.recipe.schema import toml_key
from modelbuild.stages import contracts
from modelbuild.stages.contracts import Role
from modelbuild.validation import golden
from modelbuild.validation.unsigned_weights import unsigned_weights


def run(*, inputs: dict[str, Path], params: dict, out: Path) -> None:
    """Write golden.npz: 'in.NAME' and 'out.NAME' arrays, each [count, *shape], for the model's inputs as the
    import stage froze them (signature.json)."""
    p: ReferenceParams = contracts.read_params(contracts.REFERENCE, params)
    spec, read = p.golden, signature.read(inputs[Role.SIGNATURE])
    tensors, bound = read.inputs, read.bound
    if spec.source == "generate":
        samples = golden.generate(tensors, fill=spec.fill, seed=spec.seed, count=spec.count, stream=golden.GOLDEN)
    elif spec.source == "images":
        images = [path for role, path in sorted(inputs.items()) if role.startswith("golden-image:")]
        samples = golden.load_images(images, tensors, spec.preprocess.model_dump())
    else:
        samples = golden.load({k: v for k, v in inputs.items() if k.startswith("golden")}, tensors, spec.count)
    outputs = _run_onnxruntime(inputs[Role.MODEL], samples, bound, golden.feedback(tensors), _range_hint(spec, tensors))
    arrays = {f"in.{k}": v for k, v in samples.items()} | {f"out.{k}": v for k, v in outputs.items()}
    with open(out / contracts.GOLDEN, "wb") as f:
        np.savez(f, **arrays)


def _range_hint(spec, tensors: dict) -> str:
    """What to add when onnxruntime fails on generated data: integer inputs drawn 0 to 9 where the recipe
    declares no range are the likely cause (an index beyond a table)."""
    unranged = [name for name, t in tensors.items() if t["dtype"].startswith(("int", "uint")) and "range" not in t]
    if spec.source != "generate" or spec.fill != "random" or not unranged:
        return ""
    return (
        f"; integer inputs were generated as 0 to 9: declare the values the model takes "
        f"(fix: inputs.{toml_key(unranged[0])} = {{ ..., range = [low, high] }})"
    )


QDQ_OPS = {"QuantizeLinear", "DequantizeLinear"}


def session_options(model: Path, graph=None):
    """onnxruntime's options for a reference run: one thread (right and reproducible, not fast), and for a QDQ
    model no graph optimisation, so that it computes what the QDQ graph says (dequantize, the float
    operator, quantize). Optimised, onnxruntime fuses it into its own 8-bit kernels, which on x86 CPUs
    without VNNI (vpmaddubsw) saturate 16-bit pair sums of full-range weights: on a Zen 3 machine its QDQ
    result was up to 6 quantization steps from the exact one, and an exact int8 library failed against it.
    `graph`: the model's graph where the caller has read it already."""
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    graph = graph if graph is not None else onnx.load(str(model), load_external_data=False).graph
    if any(node.op_type in QDQ_OPS for node in graph.node):
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return options


def _exact_form(model: Path, loaded) -> str | bytes:
    """What onnxruntime is given: the model, or where it has int8 weights on uint8 activations the same model
    with them as uint8, whose sums onnxruntime computes exactly on every CPU (validation.unsigned_weights), and
    where it has a TopK of open order the same model sorted, as the import reads it (frontend.topk_order).
    `loaded`: the model as read without its external data."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    if any(uses_external_data(t) for t in loaded.graph.initializer):  # weights beside it: read them too,
        int8 = any(t.data_type == onnx.TensorProto.INT8 for t in loaded.graph.initializer)
        if not int8 and topk_order.sorted_everywhere(loaded) is loaded:  # if there is anything to rewrite
            return str(model)
        loaded = onnx.load(str(model))
    ordered = topk_order.sorted_everywhere(loaded)
    rewritten = unsigned_weights(ordered)
    if rewritten is None:
        rewritten = None if ordered is loaded else ordered
    return str(model) if rewritten is None else rewritten.SerializeToString()


def _run_onnxruntime(
    model: Path, samples: dict[str, np.ndarray], bound: dict[str, dict], fed_back: dict[str, str], hint: str = ""
) -> dict[str, np.ndarray]:
    """The model's outputs on each sample; the bound inputs fed their values where the model still takes
    them (the original model does; the quantize stage's QDQ model has them as constants). An input with
    feedback gets the previous sample's output, written into `samples`: the golden inputs are the stream."""
    import onnx
    import onnxruntime as ort

    try:  # reading the model's nodes for the options is reading the model too: a bad one is the same error
        loaded = onnx.load(str(model), load_external_data=False)  # once, for the options and the exact form
        session = ort.InferenceSession(
            _exact_form(model, loaded), session_options(model, loaded.graph), providers=["CPUExecutionProvider"]
        )
    except Exception as err:
        raise StageError(f"onnxruntime cannot load the model: {err}") from err
    names = [o.name for o in session.get_outputs()]
    taken = {i.name for i in session.get_inputs()}
    constants = {name: np.array(spec["value"], spec["dtype"]) for name, spec in bound.items() if name in taken}
    count = len(next(iter(samples.values())))
    results: dict[str, list] = {name: [] for name in names}
    for i in range(count):
        feed = golden.sample(samples, i) | constants
        try:
            values = session.run(names, feed)
        except Exception as err:
            raise StageError(f"onnxruntime failed on golden sample {i}: {last_line(err)}{hint}") from err
        for name, value in zip(names, values):
            results[name].append(value)
        for name, output in fed_back.items():
            if i + 1 < count:
                samples[name][i + 1] = results[output][-1]
    return {name: np.stack(values) for name, values in results.items()}
