"""bench/ab_builds.py's lookup of a zoo model's compiled libraries in a store: no TVM."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def ab_builds():
    sys.path.insert(0, str(REPO / "bench"))  # it imports zoo.py beside it
    spec = importlib.util.spec_from_file_location("ab_builds", REPO / "bench" / "ab_builds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_models_libraries_come_oldest_first_whatever_order_the_store_lists_them(tmp_path):
    """The latest two are the builds before and after a change; another model's or stage's are not among them."""
    records = [
        ("compile:m@cpu", 200.0, "b"),
        ("compile:m@cpu", 100.0, "a"),
        ("compile:m@cpu", 300.0, "c"),
        ("compile:other@cpu", 400.0, "d"),
        ("import:m", 500.0, "e"),
    ]
    for node, created, letter in records:
        digest = letter * 64
        (tmp_path / "actions" / digest[:2]).mkdir(parents=True)
        outputs = {"model.so" if node.startswith("compile") else "ir.json": digest}
        (tmp_path / "actions" / digest[:2] / f"{digest}.json").write_text(
            json.dumps({"node": node, "created": created, "outputs": outputs})
        )
    libraries = ab_builds().compiled_libraries(tmp_path, "m")
    assert [path.name[0] for path in libraries] == ["a", "b", "c"]
    assert libraries[-1] == tmp_path / "objects" / "cc" / ("c" * 64)
