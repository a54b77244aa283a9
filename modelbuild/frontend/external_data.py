"""The files an ONNX model keeps its tensors in beside it (external data), and the model's digest over them.

A model over 2 GB must keep its weights outside the .onnx file, and exporters do so for smaller ones too
(`save_as_external_data`, Hugging Face's `model.onnx_data`). The .onnx then holds each tensor's file and
offset, not its values, so a digest of the .onnx alone missed an edit to the weights: the build said every
stage was cached and its library kept computing with the old weights, every gate passing against a
reference that was cached too.
"""

from __future__ import annotations

from pathlib import Path

from modelbuild.errors import InputError
from modelbuild.hashing import FileDigests, digest_of


def model_digest(digests: FileDigests, path: Path) -> str:
    """The model file's digest; where it names external data, a digest over it and each of those files.
    Which files it names is remembered per digest of the .onnx, so an unchanged model is not parsed again."""
    own = digests.digest(path)
    names = companions(digests, path)
    if not names:
        return own
    missing = [name for name in names if not (path.parent / name).is_file()]
    if missing:
        raise InputError(
            f"{path}: its tensors are kept in {missing[0]!r} beside it, and there is no such file in "
            f"{path.parent} (fix: copy the model's external data file there, or re-save the model "
            f"with its tensors inside)"
        )
    return digest_of({"model": own, "external data": {name: digests.digest(path.parent / name) for name in names}})


def companions(digests: FileDigests, path: Path) -> list[str]:
    """The files beside the model that it keeps tensors in, remembered per digest of the .onnx: what travels
    with it where a stage runs on another machine."""
    return digests.remembered(f"external data of {digests.digest(path)}", lambda: locations(path))


def locations(path: Path) -> list[str]:
    """The files, relative to the model's folder, that its tensors' external data names (initializers,
    Constant nodes' tensors and those of subgraphs); read without loading any of them."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:
        return []  # not a model onnx can read: the import stage says so, in its own words
    return sorted(
        {
            entry.value
            for tensor in _tensors(model.graph)
            if tensor.data_location == onnx.TensorProto.EXTERNAL
            for entry in tensor.external_data
            if entry.key == "location"
        }
    )


def _tensors(graph):
    yield from graph.initializer
    yield from (sparse.values for sparse in graph.sparse_initializer)
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _tensors(attribute.g)
            for subgraph in attribute.graphs:
                yield from _tensors(subgraph)
