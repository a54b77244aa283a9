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


def test_an_int8_depthwise_conv_is_paired_with_a_float_one_of_its_kernel_size_not_only_its_sizes():
    """orientation's 5x5 stride-2 depthwise conv (256 channels, 14 -> 7) had been set against a 3x3 float one
    of the same sizes, which is faster; the packed int8 taps say the kernel's rows and its groups of 4 columns."""
    geometry = kernel_times().conv_geometry
    int8 = geometry(
        "fused_conv2d_vnni_depthwise7_cast",
        [[[1, 256, 14, 14], "uint8"], [[256, 5, 2, 4], "int8"], [[256], "int32"], [[1, 256, 7, 7], "int8"]],
    )
    float5 = geometry(
        "fused_conv2d3_add", [[[1, 14, 14, 256], "float32"], [[5, 5, 1, 256], "float32"], [[1, 7, 7, 256], "float32"]]
    )
    float3 = geometry(
        "fused_conv2d4_add", [[[1, 256, 14, 14], "float32"], [[256, 1, 3, 3], "float32"], [[1, 256, 7, 7], "float32"]]
    )
    assert int8 == float5 == ("depthwise", 256, 14, 14, 7, 7, 5, 2)
    assert float3 == ("depthwise", 256, 14, 14, 7, 7, 3, 1)
