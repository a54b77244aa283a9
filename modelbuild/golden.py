"""Golden inputs: generated with a seed and fill mode, or loaded from .npz / a folder of .npy files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from modelbuild.errors import StageError


def generate(inputs: dict, *, fill: str, seed: int, count: int) -> dict[str, np.ndarray]:
    """`count` samples of every input, stacked on a new first axis: name -> [count, *shape]."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, spec in sorted(inputs.items()):
        shape = (count, *spec["shape"])
        dtype = np.dtype(spec["dtype"])
        if fill == "zeros":
            out[name] = np.zeros(shape, dtype)
        elif fill == "ones":
            out[name] = np.ones(shape, dtype)
        elif np.issubdtype(dtype, np.floating):
            out[name] = rng.standard_normal(shape).astype(dtype)
        else:
            out[name] = rng.integers(0, 10, shape).astype(dtype)
    return out


def load(files: dict[str, Path], inputs: dict, count: int) -> dict[str, np.ndarray]:
    """Samples from a declared .npz (role 'golden') or .npy files (roles 'golden:NAME'), checked and cut to `count`."""
    if "golden" in files:
        with np.load(files["golden"]) as data:
            arrays = {name: data[name] for name in data.files}
    else:
        arrays = {role.split(":", 1)[1]: np.load(path) for role, path in files.items() if role.startswith("golden:")}
    out = {}
    for name, spec in inputs.items():
        if name not in arrays:
            raise StageError(f"golden inputs have no array {name!r} (they have {', '.join(sorted(arrays))})")
        array = arrays[name]
        if tuple(array.shape) == tuple(spec["shape"]):
            array = array[None]
        if tuple(array.shape[1:]) != tuple(spec["shape"]):
            raise StageError(f"golden input {name!r} has shape {list(array.shape)}; expected [N, *{spec['shape']}]")
        out[name] = array[:count].astype(spec["dtype"])
    return out
