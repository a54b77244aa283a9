"""Golden inputs and calibration samples: generated with a seed and fill mode, or loaded from .npz, a folder
of .npy files, or a folder of images with a declared preprocessing."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from modelbuild.errors import InputError

# Random streams: golden inputs and calibration samples drawn with the same seed must still differ, or int8
# accuracy would be measured on the very samples it was calibrated on.
GOLDEN, CALIBRATION = 0, 1


def generate(inputs: dict, *, fill: str, seed: int, count: int, stream: int) -> dict[str, np.ndarray]:
    """`count` samples of every input, stacked on a new first axis: name -> [count, *shape]. Random values
    come from the input's "range" [low, high) where it has one (uniform; integers low <= v < high), else
    standard normal floats and integers 0 to 9."""
    rng = np.random.default_rng([seed, stream])
    out = {}
    for name, spec in sorted(inputs.items()):
        shape = (count, *spec["shape"])
        dtype = np.dtype(spec["dtype"])
        if fill == "zeros" or spec.get("feedback"):  # a stream's state starts from zeros; later ones are fed back
            out[name] = np.zeros(shape, dtype)
        elif fill == "ones":
            out[name] = np.ones(shape, dtype)
        elif spec.get("range") and np.issubdtype(dtype, np.floating):
            out[name] = rng.uniform(*spec["range"], shape).astype(dtype)
        elif spec.get("range"):
            low, high = spec["range"]
            out[name] = rng.integers(math.ceil(low), math.ceil(high), shape).astype(dtype)
        elif np.issubdtype(dtype, np.floating):
            out[name] = rng.standard_normal(shape).astype(dtype)
        else:
            out[name] = rng.integers(0, 10, shape).astype(dtype)
    return out


def feedback(inputs: dict) -> dict[str, str]:
    """Input -> the output fed back into it from one sample to the next (a streaming model's state)."""
    return {name: spec["feedback"] for name, spec in inputs.items() if spec.get("feedback")}


def sample(arrays: dict[str, np.ndarray], index: int) -> dict[str, np.ndarray]:
    """Sample `index` of stacked inputs. Indexing with `...` keeps a scalar input's sample a 0-d array: numpy
    scalars are not arrays to onnxruntime or TVM."""
    return {name: array[index, ...] for name, array in arrays.items()}


def load(files: dict[str, Path], inputs: dict, count: int) -> dict[str, np.ndarray]:
    """Samples from a declared .npz (role 'golden') or .npy files (roles 'golden:NAME'), checked and cut to `count`."""
    if "golden" in files:
        with np.load(files["golden"]) as data:
            arrays = {name: data[name] for name in data.files}
    else:  # every .npy of the folder is declared; the inputs pick theirs by name
        arrays = {role.split(":", 1)[1]: np.load(path) for role, path in files.items() if role.startswith("golden:")}
    out = {}
    for name, spec in inputs.items():
        if name not in arrays:
            raise InputError(f"golden inputs have no array {name!r} (they have {', '.join(sorted(arrays))})")
        array = arrays[name]
        if tuple(array.shape) == tuple(spec["shape"]):
            array = array[None]
        if tuple(array.shape[1:]) != tuple(spec["shape"]):
            raise InputError(f"golden input {name!r} has shape {list(array.shape)}; expected [N, *{spec['shape']}]")
        out[name] = array[:count].astype(spec["dtype"])
    return out


def load_images(paths: list[Path], inputs: dict, preprocess: dict) -> dict[str, np.ndarray]:
    """Images as the model's single input, [N, *shape]: converted, resized, scaled, normalised, laid out."""
    from PIL import Image

    if len(inputs) != 1:
        raise InputError(f"images feed a model with one input; this one has {', '.join(inputs)}")
    if not paths:
        raise InputError("the image folder has no .png, .jpg, .bmp or .webp files")
    ((name, spec),) = inputs.items()
    shape = spec["shape"]
    if shape[0] != 1:
        raise InputError(f"images are fed one at a time; input {name!r} has batch {shape[0]}, declare batch 1")
    nchw = preprocess["layout"] == "NCHW"
    height, width = preprocess["resize"] or (shape[-2:] if nchw else shape[1:3])
    samples = []
    for path in paths:
        image = (
            Image.open(path)
            .convert("L" if preprocess["color"] == "L" else "RGB")
            .resize((width, height), Image.BILINEAR)
        )
        pixels = np.asarray(image, dtype=np.float32).reshape(height, width, -1)
        if preprocess["color"] == "BGR":
            pixels = pixels[..., ::-1]
        channels = pixels.shape[-1]
        mean = np.asarray(preprocess["mean"][:channels], np.float32)
        std = np.asarray(preprocess["std"][:channels], np.float32)
        pixels = (pixels * preprocess["scale"] - mean) / std
        samples.append(np.transpose(pixels, (2, 0, 1)) if nchw else pixels)
    batch = np.stack(samples).astype(spec["dtype"])
    if tuple(batch.shape[1:]) != tuple(shape[1:]):
        raise InputError(
            f"preprocessed images have shape {list(batch.shape[1:])}, the input {name!r} needs "
            f"{shape[1:]}; set resize or layout"
        )
    return {name: batch[:, None]}
