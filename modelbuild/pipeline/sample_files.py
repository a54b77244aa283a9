"""Which files golden inputs and calibration samples are read from, declared one by one at plan time.

Kept apart from golden.py, which reads them with numpy: planning a build that is all cached must not
import numpy.
"""

from __future__ import annotations

from pathlib import Path

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


def image_files(folder: Path, count: int) -> list[Path]:
    """The first `count` images of a folder, in name order: the files a stage declares it reads."""
    return sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)[:count]


def sample_files(role: str, spec, root: Path, count: int) -> dict[str, Path]:
    """The files of a golden or calibration spec, each under its own role so that editing any of them reruns
    the stage: an .npz, every .npy of a folder (one per input, picked by name), or the first `count` images."""
    if spec.source == "npz":
        return {role: root / spec.path}
    if spec.source == "npy_dir":
        return {f"{role}:{path.stem}": path for path in sorted((root / spec.path).glob("*.npy"))}
    if spec.source == "images":
        return {f"{role}-image:{i:05d}": path for i, path in enumerate(image_files(root / spec.path, count))}
    return {}
