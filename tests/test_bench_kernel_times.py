"""bench/kernel_times.py's lookup of a stage's IR in a store: no TVM."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def kernel_times():
    spec = importlib.util.spec_from_file_location("kernel_times", REPO / "bench" / "kernel_times.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_latest_run_of_a_node_gives_the_ir_whatever_order_the_store_lists_them(tmp_path):
    """A store keeps every version of a node; an older IR names other kernels than the library just built."""
    for created, digest in ((200.0, "b" * 64), (100.0, "a" * 64), (300.0, "c" * 64), (50.0, "d" * 64)):
        (tmp_path / "objects" / digest[:2]).mkdir(parents=True)
        (tmp_path / "objects" / digest[:2] / digest).write_text(digest)
        (tmp_path / "actions" / digest[:2]).mkdir(parents=True)
        action = {"node": "quantize:m+int8@cpu", "created": created, "outputs": {"ir.json": digest}}
        (tmp_path / "actions" / digest[:2] / f"{digest}.json").write_text(json.dumps(action))
    assert kernel_times().stage_ir(tmp_path, "quantize:m+int8@cpu").read_text() == "c" * 64
