"""The report's own figures are sane: one unit per quantity, relative error where it means something, no
efficiency above 100%, no conclusion drawn from noise, each quantized build labelled by its real precision."""

from __future__ import annotations

import numpy as np
import pytest

from modelbuild.recipe.schema import QuantizationSpec
from modelbuild.reports.markdown import _details, _quantization, _roofline
from modelbuild.reports.model import BuildReport, Validation
from modelbuild.stages.quantize import _precision
from modelbuild.validation.metrics import compare, scaling_summary, timing_summary


def test_relative_error_is_taken_against_a_floor_so_near_zero_values_do_not_dominate():
    expected = np.array([10.0, 5.0, 2e-8])
    figures = compare(expected + np.array([1e-3, 0.0, 1e-6]), expected)
    assert figures["max_rel"] == pytest.approx(1e-4)  # 1e-3 on 10, not 1e-6 on 2e-8 (which would be 50x)
    assert figures["min_rtol"] == pytest.approx(50.0)  # np.allclose's own rtol keeps its plain definition


def test_a_scaling_curve_measured_under_noise_draws_no_conclusion():
    noisy = scaling_summary([1, 2], [0.8, 0.83], [0.05, 1.06])
    steady = scaling_summary([1, 2], [0.8, 0.45], [0.03, 0.04])
    assert noisy["noisy"] and not steady["noisy"]
    build = BuildReport(
        "m@x86",
        validation=Validation(ran=True),
        peak_rss_bytes=410_500_000,
        cold_ms=3.0,
        latency_ms=timing_summary([0.0008] * 20),
        scaling=noisy,
    )
    text = "\n".join(_details(build))
    assert "measured under noise (CV up to 106% at one thread count), so no conclusion" in text
    assert "Amdahl" not in text
    assert "peak RSS 410.5 MB" in text and "MiB" not in text  # one unit for memory, as everywhere else
    build.scaling = steady
    assert "Amdahl parallel fraction f = " in "\n".join(_details(build))


def test_a_kernel_above_the_roof_is_said_to_run_from_cache_not_at_150_percent():
    roofline = {
        "peak_flops_per_s": 1e11,
        "peak_bytes_per_s": 1e10,
        "ridge_flops_per_byte": 10.0,
        "kernels": [
            {
                "kernel": "k1",
                "calls": 1,
                "flops_per_s": 5e9,
                "bytes_per_s": 1.5e10,
                "intensity": 0.3,
                "bound": "memory",
                "roof_fraction": 1.5,
            },
            {
                "kernel": "k2",
                "calls": 1,
                "flops_per_s": 5e10,
                "bytes_per_s": 1e9,
                "intensity": 50,
                "bound": "compute",
                "roof_fraction": 0.5,
            },
        ],
    }
    text = "\n".join(_roofline(roofline))
    assert "| above (data in cache) |" in text and "| 50% |" in text and "150%" not in text
    assert "Slow for its shape" not in text


def test_a_kernel_marked_slow_is_listed_with_its_layers_and_shapes_under_the_roofline():
    kernel = {
        "kernel": "fused_conv2d3",
        "layers": ["Conv_7"],
        "calls": 1,
        "flops_per_s": 6.6e9,
        "bytes_per_s": 1e9,
        "intensity": 50,
        "bound": "compute",
        "roof_fraction": 0.033,
        "slow": True,
        "shapes": [[1, 35, 35, 64], [3, 3, 16, 96]],
    }
    roofline = {
        "peak_flops_per_s": 2e11,
        "peak_bytes_per_s": 1e10,
        "ridge_flops_per_byte": 20.0,
        "slow_below": 0.3,
        "blas_flops_per_s": 1.4e11,
        "kernels": [kernel],
    }
    text = "\n".join(_roofline(roofline))
    assert "Slow for its shape (under 30% of its roof):" in text
    assert "- fused_conv2d3 (Conv_7): [1, 35, 35, 64] x [3, 3, 16, 96], 6.6 GFLOP/s, 3% of its compute roof" in text
    assert "200.0 GFLOP/s, an FMA loop" in text and "BLAS sgemm 140.0 GFLOP/s" in text


def test_each_quantized_build_is_labelled_by_what_its_kernels_compute_in():
    assert _precision(QuantizationSpec()) == "A8W8 (int8)"
    assert _precision(QuantizationSpec(int16_nodes=["*"])) == "A16W8 (int16 activations, int8 weights)"
    assert (
        _precision(QuantizationSpec(int16_nodes=["conv_1"], int16_most_sensitive=2))
        == "A8W8 (int8), up to 3 layers with int16 inputs"
    )
    summary = {
        "precision": "A16W8 (int16 activations, int8 weights)",
        "scheme": "symmetric",
        "per_channel": True,
        "calibration": {"method": "minmax", "samples": 8},
        "weight_bytes_fp32": 4000,
        "weight_bytes_int8": 1000,
        "weight_ratio": 4.0,
        "warnings": [],
    }
    text = "\n".join(_quantization(BuildReport("m+int16@x86", quantization=summary)))
    assert text.strip().startswith("A16W8 (int16 activations, int8 weights) (symmetric, per-channel weights")
