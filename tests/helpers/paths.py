"""The repository's own folders, wherever the tests run from."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
