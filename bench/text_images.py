"""Rendered text images, the real-looking inputs of the bundled OCR models: text lines for the direction
classifier (half of them upside down, its two classes) and pages of lines for the detector.

Deterministic for a seed (Pillow's bundled font, a fixed word list, numpy's generator), so a benchmark
calibrates and evaluates on the same pictures on every machine.

Usage: python bench/text_images.py lines|pages FOLDER [--count N] [--seed S] [--suffix .jpg]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

WORDS = [
    "invoice",
    "total",
    "amount",
    "due",
    "date",
    "customer",
    "account",
    "number",
    "order",
    "shipped",
    "receipt",
    "payment",
    "balance",
    "address",
    "street",
    "city",
    "postal",
    "code",
    "phone",
    "email",
    "reference",
    "quantity",
    "price",
    "unit",
    "tax",
    "discount",
    "subtotal",
    "model",
    "build",
    "deploy",
    "target",
    "latency",
    "throughput",
    "accuracy",
    "kernel",
    "tensor",
    "library",
    "report",
    "cache",
    "version",
    "January",
    "February",
    "March",
    "April",
    "2026",
    "17:45",
    "No.",
    "00451",
    "EUR",
    "USD",
    "12.50",
    "3,140.00",
    "#A-778",
    "Q3",
    "page",
    "of",
]
LINE_SIZE = (192, 48)  # width, height: the classifier's input
PAGE_SIZE = (640, 640)


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)  # Pillow >= 10.1 with FreeType: a scalable bundled font
    except (TypeError, OSError):
        return ImageFont.load_default()


def _phrase(rng: np.random.Generator, words: int) -> str:
    return " ".join(rng.choice(WORDS, size=words))


def text_line(rng: np.random.Generator, *, upside_down: bool):
    """One line of dark text on a light, slightly noisy background, as a cropped text box looks."""
    from PIL import Image, ImageDraw

    width, height = LINE_SIZE
    paper = int(rng.integers(190, 256))
    image = Image.new("RGB", (width, height), (paper, paper, int(max(paper - rng.integers(0, 25), 0))))
    draw = ImageDraw.Draw(image)
    ink = tuple(int(v) for v in rng.integers(0, 70, 3))
    # a detector's crop: the text fills most of the height (PP-OCR resizes crops to 48 pixels high)
    size = int(rng.integers(30, 40))
    draw.text(
        (int(rng.integers(1, 8)), int((height - size) / 2 - 4 + rng.integers(0, 4))),
        _phrase(rng, int(rng.integers(1, 4))),
        fill=ink,
        font=_font(size),
    )
    pixels = np.asarray(image, np.float32) + rng.normal(0, 6, (height, width, 3))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    return image.rotate(180) if upside_down else image


def page(rng: np.random.Generator):
    """A page of left-aligned lines of several sizes, some short, as a scanned document looks."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", PAGE_SIZE, (int(rng.integers(225, 256)),) * 3)
    draw = ImageDraw.Draw(image)
    y = int(rng.integers(10, 40))
    while y < PAGE_SIZE[1] - 40:
        size = int(rng.integers(16, 36))
        draw.text(
            (int(rng.integers(10, 80)), y),
            _phrase(rng, int(rng.integers(1, 7))),
            fill=tuple(int(v) for v in rng.integers(0, 60, 3)),
            font=_font(size),
        )
        y += int(size * rng.uniform(1.4, 2.6))
    return image


def write_lines(folder: Path, count: int, seed: int, suffix: str = ".png") -> list[tuple[Path, int]]:
    """PNG text lines and their class: 0 upright, 1 upside down (the classifier's '0' and '180')."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        label = i % 2
        path = folder / f"line_{i:04d}{suffix}"
        text_line(rng, upside_down=bool(label)).save(path)
        out.append((path, label))
    return out


def write_pages(folder: Path, count: int, seed: int, suffix: str = ".png") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        path = folder / f"page_{i:04d}{suffix}"
        page(rng).save(path)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["lines", "pages"])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--suffix", default=".png", choices=[".png", ".jpg"], help=".jpg is ~10x smaller")
    args = parser.parse_args()
    if args.kind == "lines":
        write_lines(args.folder, args.count, args.seed, args.suffix)
    else:
        write_pages(args.folder, args.count, args.seed, args.suffix)


if __name__ == "__main__":
    main()
