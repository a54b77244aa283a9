"""int8 builds end to end: calibration with onnxruntime, integer kernels in TVM, both references."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from modelbuild.cli import main
from tests.helpers.onnx_models import two_convs

RECIPE = """
[models.net]
path = "net.onnx"
inputs.x = {{ shape = [1, 3, 16, 16] }}

[targets.cpu]
kind = "llvm"
mcpu = "host"
num-cores = 1

[quantization.int8]
calibration = {{ samples = {samples} }}

[validation]
golden = {{ count = 3 }}
timing = {{ warmup = 1, min_runs = 3, min_seconds = 0.0, roofline = false }}

[[builds]]
model = "net"
targets = ["cpu"]
quantization = "int8"

[[builds]]
model = "net"
targets = ["cpu"]
"""


def write(root, samples=4):
    (root / "deploy.toml").write_text(textwrap.dedent(RECIPE.format(samples=samples)))


def build(root, capsys) -> dict:
    code = main(["build", "-f", str(root / "deploy.toml"), "--json"])
    statuses = {n["node"]: n["status"] for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert code == 0, statuses
    return statuses


def test_beside_float_times_the_float_library_in_turns_and_the_report_compares_with_that(tmp_path, capsys):
    two_convs(tmp_path / "net.onnx")
    (tmp_path / "deploy.toml").write_text(
        textwrap.dedent(RECIPE.format(samples=4)).replace(
            "roofline = false }", "roofline = false, beside_float = true }"
        )
    )
    build(tmp_path, capsys)
    metrics = json.loads((tmp_path / "build/net+int8/cpu/validation.json").read_text())
    assert metrics["float_latency_ms"]["runs"] >= 3 and "baseline_latency_ms" not in metrics
    report = {b["name"]: b for b in json.loads((tmp_path / "build/report.json").read_text())["builds"]}
    vs_float = report["net+int8@cpu"]["vs_float"]
    assert vs_float["timed_together"] and vs_float["latency_ms"] == metrics["float_latency_ms"]["median"]
    assert vs_float["latency_ratio"] == pytest.approx(metrics["latency_ms"]["median"] / vs_float["latency_ms"])
    assert "float_latency_ms" not in json.loads((tmp_path / "build/net/cpu/validation.json").read_text())


def test_an_int8_build_computes_in_int8_and_matches_onnxruntime_qdq(tmp_path, capsys):
    two_convs(tmp_path / "net.onnx")
    write(tmp_path)
    statuses = build(tmp_path, capsys)
    assert statuses["quantize:net+int8@cpu"] == "built" and statuses["reference-qdq:net+int8@cpu"] == "built"

    builds = {b["name"]: b for b in json.loads((tmp_path / "build/report.json").read_text())["builds"]}
    report = builds["net+int8@cpu"]
    assert report["vs_float"]["build"] == "net@cpu"  # the float build of the same recipe, timed alike
    assert report["vs_float"]["latency_ms"] == builds["net@cpu"]["latency_ms"]["median"]
    assert (tmp_path / "build/net+int8/cpu/model.so").exists() and (tmp_path / "build/net/cpu/model.so").exists()
    q = report["quantization"]
    assert q["weight_ratio"] > 3.5  # int8 weights (plus scales) against float32
    assert q["warnings"] and "random" in q["warnings"][0]  # calibrated on random data: said loudly
    vs_qdq = report["accuracy_vs_qdq"]["y"]
    assert vs_qdq["cosine"] > 0.9999
    step = 1.0 / 127 * max(1e-6, abs(report["accuracy"]["y"]["max_abs"]) + 1)  # generous bound on one step
    assert vs_qdq["max_abs"] <= step
    assert q["smoothed_convs"] == 2 and q["bias_corrected_convs"] == 0  # two_convs has no biases to correct
    assert "2 convs smoothed" in (tmp_path / "build/report.md").read_text()
    layers = q["layers"]
    assert [r["op"] for r in layers] == ["Conv", "Relu", "Conv"]  # every activation, in execution order
    assert all(0 < r["sqnr_db"] < 999 for r in layers)

    assert main(["explain", "net+int8@cpu", "--ir", "-f", str(tmp_path / "deploy.toml")]) == 0
    capsys.readouterr()
    after = (tmp_path / "build/net+int8/cpu/ir/ir_after_fusion.py").read_text()
    conv_kernels = [
        block for block in after.split("@T.prim_func")[1:] if re.match(r"[^\n]*\n\s*def (fused_)?conv2d", block)
    ]
    assert len(conv_kernels) == 2 and all('"int8")' in k and '"int32"' in k for k in conv_kernels)

    write(tmp_path, samples=1)  # only calibration changed (fewer samples: narrower ranges, new scales)
    statuses = build(tmp_path, capsys)
    assert statuses["import:net"] == "cached" and statuses["reference:net"] == "cached"
    assert {statuses[n] for n in ("quantize:net+int8@cpu", "compile:net+int8@cpu", "validate:net+int8@cpu")} == {
        "built"
    }, statuses


def test_a_failed_accuracy_gate_shows_the_layers_to_leave_in_float_and_the_sqnr_table(tmp_path, capsys):
    two_convs(tmp_path / "net.onnx")
    write(tmp_path)
    text = (
        (tmp_path / "deploy.toml")
        .read_text()
        .replace("[[builds]]", "[validation.gates]\nmin_cosine = 1.0\n\n[[builds]]", 1)
    )
    (tmp_path / "deploy.toml").write_text(text)
    assert main(["build", "-f", str(tmp_path / "deploy.toml")]) == 1  # int8 is never exactly the fp32 result
    capsys.readouterr()
    markdown = (tmp_path / "build/report.md").read_text()
    builds = {b["name"]: b for b in json.loads((tmp_path / "build/report.json").read_text())["builds"]}
    q = builds["net+int8@cpu"]["quantization"]
    assert [r["node"] for r in q["sensitivity"]["layers"]] == ["conv1", "conv2"]
    assert abs(sum(r["share"] for r in q["sensitivity"]["layers"]) - 1) < 1e-9
    names = ", ".join(f'"{name}"' for name in q["float_candidates"])
    assert f"`exclude_nodes = [{names}]`" in markdown
    assert ("in float removes about" in markdown) == (0.75 <= q["sensitivity"]["sum_over_whole"] <= 1.33)
    assert "SQNR of int8 against fp32 activations, in execution order" in markdown
    table = markdown.split("SQNR of int8 against fp32 activations")[1]
    assert table.count("| Conv |") == 2 and "| Relu |" in table


def test_int16_inputs_and_gptq_weights_build_integer_kernels_closer_to_fp32(tmp_path, capsys):
    two_convs(tmp_path / "net.onnx")
    write(tmp_path, samples=8)
    recipe = tmp_path / "deploy.toml"
    recipe.write_text(
        recipe.read_text()
        + textwrap.dedent("""
        [quantization.a16]
        calibration = { samples = 8 }
        int16_nodes = ["*"]
        weight_rounding = "gptq"

        [[builds]]
        model = "net"
        targets = ["cpu"]
        quantization = "a16"
        """)
    )
    statuses = build(tmp_path, capsys)
    assert statuses["quantize:net+a16@cpu"] == "built"
    builds = {b["name"]: b for b in json.loads((tmp_path / "build/report.json").read_text())["builds"]}
    a16, int8 = builds["net+a16@cpu"], builds["net+int8@cpu"]
    assert a16["quantization"]["int16_nodes"] == ["conv1", "conv2"] and a16["quantization"]["gptq_convs"] == 2
    # random weights: their int8 rounding, not the data's, limits both; still half the error power or less
    assert a16["accuracy"]["y"]["sqnr_db"] > int8["accuracy"]["y"]["sqnr_db"] + 3
    assert a16["accuracy_vs_qdq"]["y"]["sqnr_db"] > 60  # the library computes onnxruntime's QDQ model
    assert "2 convs GPTQ-rounded" in (tmp_path / "build/report.md").read_text()
    assert main(["explain", "net+a16@cpu", "--ir", "-f", str(recipe)]) == 0
    capsys.readouterr()
    fused = (tmp_path / "build/net+a16/cpu/ir/ir_after_fusion.py").read_text()
    # each conv twice, on the high (int8) and low (uint8) bytes of its int16 data
    assert len(re.findall(r"def fused_conv2d\w*\(", fused)) == 4
