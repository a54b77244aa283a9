"""Versions of the tools whose behaviour shapes a stage's output; read from metadata, never imported."""

from __future__ import annotations

import os
import re
import sys
from functools import cache

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
        return package_version()
    return dist_info_version(DISTRIBUTIONS[name]) or _metadata_version(DISTRIBUTIONS[name])


def dist_info_version(distribution: str, search_path: list[str] | None = None) -> str | None:
    """The version in the name of the first `<name>-<version>.dist-info` folder on sys.path (or search_path),
    as Python's own lookup finds it. Listing a folder is cheap; importing importlib.metadata costs a no-op
    build 30 ms."""
    wanted = re.sub(r"[-_.]+", "_", distribution).lower()
    for entry in sys.path if search_path is None else search_path:
        for folder in _dist_infos(entry):
            stem, _, version = folder.removesuffix(".dist-info").partition("-")
            if re.sub(r"[-_.]+", "_", stem).lower() == wanted:
                return version
    return None


@cache
def _dist_infos(entry: str) -> tuple[str, ...]:
    try:
        return tuple(name for name in os.listdir(entry or ".") if name.endswith(".dist-info"))
    except OSError:
        return ()


def _metadata_version(distribution: str) -> str:
    from importlib import metadata  # other layouts (eggs, zips): the standard lookup

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "missing"


def tool_versions(names: tuple[str, ...]) -> dict[str, str]:
    """The versions a key holds: modelbuild's release (its code enters keys by its digest, so a commit between
    tags must not change every key) and each tool's."""
    return {"modelbuild": release(package_version()), **{name: tool_version(name) for name in names}}


@cache
def package_version() -> str:
    """modelbuild's version as installed: the git tag it was built at, or a post-release of it."""
    return dist_info_version("modelbuild") or _metadata_version("modelbuild")


def release(version: str) -> str:
    """'0.1.0' of '0.1.0.post3.dev0+g1a2b3c4' (and of '0.1.0')."""
    return re.split(r"\.post|\.dev|\+", version, maxsplit=1)[0]
