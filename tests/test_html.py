"""report.html: every chart a build's figures call for, failures first, nothing fetched from anywhere; and the
page as a person sees it, rendered by headless Chromium."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess

import pytest

from modelbuild.reports import html
from modelbuild.reports.model import BuildReport, Report, StageRun, Validation, VsFloat
from modelbuild.validation import metrics
from modelbuild.validation.gates import GateResult
from tests.helpers.timings import latencies


def int8_build() -> BuildReport:
    layers = [
        {"tensor": f"t{i}", "op": "Conv", "node": f"conv_{i}", "sqnr_db": 40.0 - i * (8 if i == 3 else 1)}
        for i in range(6)
    ]
    return BuildReport(
        "cls+int8@x86",
        model="cls",
        target="x86",
        artifact="build/cls+int8/x86/model.so",
        stages={
            "import": StageRun("cached", 0.01, "k1", built_seconds=2.0),
            "quantize": StageRun("built", 14.0, "k2"),
            "compile": StageRun("built", 20.0, "k3"),
            "validate": StageRun("built", 4.0, "k4"),
        },
        validation=Validation(ran=True),
        accuracy={"y": {"max_abs": 0.02, "cosine": 0.998, "sqnr_db": 31.0}},
        latency_ms=metrics.timing_summary(latencies(1, 0.5)),
        gates=[GateResult("min_cosine", 0.998, 0.999, False), GateResult("max_p99_ms", 3.0, 20.0, True)],
        quantization={"layers": layers, "first_jump": "t3"},
        scaling={
            "threads": [1, 2, 4],
            "median_ms": [4.0, 2.3, 1.6],
            "speedup": [1.0, 1.74, 2.5],
            "parallel_fraction": 0.8,
        },
        roofline={
            "peak_flops_per_s": 2e11,
            "peak_bytes_per_s": 1e10,
            "kernels": [
                {
                    "kernel": "fused_conv2d_add",
                    "intensity": 12.0,
                    "flops_per_s": 9e10,
                    "calls": 1,
                    "roof_fraction": 0.45,
                    "layers": ["stem_conv_Conv", "stem_add_Add"],
                },
                {
                    "kernel": "fused_conv2d1",
                    "intensity": 30.0,
                    "flops_per_s": 7e9,
                    "calls": 1,
                    "roof_fraction": 0.035,
                    "layers": ["grouped_Conv"],
                    "slow": True,
                    "shapes": [[1, 35, 35, 64], [3, 3, 16, 96]],
                },
                {
                    "kernel": "fused_add_relu",
                    "intensity": 0.2,
                    "flops_per_s": 1e9,
                    "calls": 2,
                    "roof_fraction": 0.5,
                    "layers": ["b1_Add", "b1_Relu", "b2_Add", "b2_Relu"],
                },
            ],
        },
        fusion={"operators": 40, "kernels": 12},
        memory={
            "intermediates": 30,
            "naive_bytes": 5_000_000,
            "planned_bytes": 500_000,
            "lower_bound_bytes": 300_000,
            "measured_peak_rss_bytes": 400_000_000,
        },
        vs_float=VsFloat("cls@x86", 2.0, 0.5),
        passed=False,
        vs_baseline={
            "report": "main/report.json",
            "latency_ms": {"median": [0.9, 1.0]},
            "accuracy": {"y": {"cosine": [0.9995, 0.998]}},
        },
    )


def report() -> Report:
    fine = BuildReport(
        "cls@x86",
        stages={"compile": StageRun("cached", 0.02, "k", built_seconds=20.0)},
        validation=Validation(ran=False, reason="built for aarch64"),
        passed=True,
    )
    return Report(
        passed=False, recipe="deploy.toml", builds=[int8_build(), fine], cache={"hits": 1, "misses": 4, "hit_rate": 0.2}
    )


def test_the_page_has_every_chart_the_figures_call_for_and_failures_first():
    page = html.render(report())
    charts = re.findall(r'<svg class="chart (\w+)"', page)
    assert charts == ["histogram", "cdf", "bars", "bars", "bars", "line", "roofline", "timeline", "timeline"]
    assert page.index("cls+int8@x86") < page.index("cls@x86")
    gates = re.findall(r'<tr class="gate"><td>(\w+)</td>', page)
    assert gates == ["min_cosine", "max_p99_ms"]  # the failed gate first
    assert "not validated: built for aarch64" in page and "Amdahl f = 0.80" in page
    jump = re.search(r'conv_3</text><rect [^>]*fill="([^"]+)"', page).group(1)
    others = set(re.findall(r'conv_[0-24-5]</text><rect [^>]*fill="([^"]+)"', page))
    assert jump == "#d64545" and others == {"#2f6fde"}  # the layer where the error first jumps, in red


def test_a_kernel_slow_for_its_shape_is_marked_with_its_shapes_and_the_others_are_not():
    page = html.render(report())
    assert page.count("slow for its shape") == 1
    assert '<td class="fail">slow for its shape: [1, 35, 35, 64] x [3, 3, 16, 96]</td>' in page


def test_the_page_names_the_onnx_layers_behind_each_kernel():
    kernels = re.findall(r"<tr><td><code>(\w+)</code></td><td>([^<]*)</td>", html.render(report()))
    assert kernels == [
        ("fused_conv2d_add", "stem_conv_Conv, stem_add_Add"),
        ("fused_conv2d1", "grouped_Conv"),
        ("fused_add_relu", "b1_Add, b1_Relu, b2_Add +1"),
    ]
    fused_only = BuildReport(
        "cls@x86",
        fusion={
            "operators": 3,
            "kernels": 1,
            "groups": [
                {"kernel": "fused_conv2d_relu", "ops": ["conv2d", "relu"], "calls": 1, "layers": ["conv0", "relu0"]}
            ],
        },
    )
    page = html.render(Report(passed=True, recipe="deploy.toml", builds=[fused_only], cache={}))
    assert "<td><code>fused_conv2d_relu</code></td><td>conv2d + relu</td><td>conv0, relu0</td>" in page
    by_flops = BuildReport(
        "cls@x86",
        fusion=fused_only.fusion,
        kernels=[
            {
                "kernel": "fused_conv2d_relu",
                "ops": ["conv2d", "relu"],
                "layers": ["conv0", "relu0"],
                "calls": 2,
                "flops": 3_000_000,
                "bytes": 1000,
            },
            {"kernel": "matmul", "ops": ["matmul"], "layers": ["fc"], "calls": 1, "flops": 2_000_000, "bytes": 1000},
        ],
    )
    page = html.render(Report(passed=True, recipe="deploy.toml", builds=[by_flops], cache={}))
    assert "heaviest kernels by FLOPs" in page and "fused kernel" not in page  # the costliest, not the largest
    assert "<td><code>fused_conv2d_relu</code></td><td>conv0, relu0</td><td>2</td><td>6.0</td><td>75%</td>" in page


def test_the_page_sets_the_build_beside_its_baseline():
    page = html.render(report())
    assert "<th>against <code>main/report.json</code></th>" in page
    assert "<tr><td>latency p50 (ms)</td><td>0.9</td><td>1</td><td>+11.1%</td></tr>" in page
    assert "<tr><td>y: cosine</td><td>0.9995</td><td>0.998</td><td>-0.0015</td></tr>" in page


def test_the_page_is_self_contained():
    page = html.render(report())
    assert "<script" not in page and not re.search(r"(src|href)=\"(https?:)?//", page) and "@import" not in page


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (.ci/run installs Debian's when it can)")
def test_chromium_renders_the_page_with_every_chart_and_no_console_error(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(html.render(report()))
    flags = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=1240,2000",
        "--enable-logging=stderr",
        "--v=0",
    ]
    shot = tmp_path / "report.png"
    done = subprocess.run([*flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.exists(), done.stderr[-2000:]
    width, height = struct.unpack(">II", shot.read_bytes()[16:24])  # the PNG header's IHDR
    assert (width, height) == (1240, 2000)
    assert "Uncaught" not in done.stderr and "CONSOLE" not in done.stderr
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert len(re.findall(r'<svg class="chart ', dom)) == 9 and "modelbuild report: FAILED" in dom
