"""Versions of the tools whose behaviour shapes a stage's output; read from metadata, never imported."""

from __future__ import annotations

from functools import cache
from importlib import metadata

from modelbuild import __version__

# Distribution names on PyPI for the short names used in keys and messages.
DISTRIBUTIONS = {
    "tvm": "apache-tvm",
    "tvm-ffi": "apache-tvm-ffi",
    "onnx": "onnx",
    "onnxruntime": "onnxruntime",
    "onnxslim": "onnxslim",
    "numpy": "numpy",
}


@cache
def tool_version(name: str) -> str:
    """The installed version of a tool by its short name ('modelbuild', 'tvm', ...), or 'missing'."""
    if name == "modelbuild":
        return __version__
    try:
        return metadata.version(DISTRIBUTIONS[name])
    except metadata.PackageNotFoundError:
        return "missing"


def tool_versions(names: tuple[str, ...]) -> dict[str, str]:
    return {name: tool_version(name) for name in ("modelbuild", *names)}
