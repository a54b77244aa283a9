"""The Markdown report: what it suggests leaving in float when an accuracy gate fails, the outcome line, and the
fusion and layout figures."""

from __future__ import annotations

from dataclasses import replace

from modelbuild.reports.markdown import _details, _fusion_and_memory, _quantization, _tuning, outcome_line
from modelbuild.reports.model import BuildReport, Validation
from modelbuild.validation.gates import GateResult


def int8_build(sum_over_whole: float, *, gate_passed: bool = False) -> BuildReport:
    layers = [
        {"node": "conv_a", "op": "Conv", "share": 0.6, "sqnr_db": 31.0},
        {"node": "conv_b", "op": "Conv", "share": 0.4, "sqnr_db": 33.0},
    ]
    quantization = {
        "scheme": "symmetric",
        "per_channel": True,
        "calibration": {"method": "minmax", "samples": 4},
        "weight_bytes_fp32": 4000,
        "weight_bytes_int8": 1000,
        "weight_ratio": 4.0,
        "warnings": [],
        "sensitivity": {"layers": layers, "samples": 4, "sum_over_whole": sum_over_whole},
        "float_candidates": ["conv_a"],
    }
    return BuildReport(
        "cls+int8@x86", quantization=quantization, gates=[GateResult("min_cosine", 0.99, 0.999, gate_passed)]
    )


def test_where_the_layers_errors_add_up_the_report_says_what_leaving_them_in_float_removes():
    text = "\n".join(_quantization(int8_build(1.02)))
    assert "its share of the output error on 4 calibration samples" in text
    assert (
        'leaving this layer in float removes about 60% of it on the calibration samples: `exclude_nodes = ["conv_a"]`'
        in text
    )
    assert "| conv_a | Conv | 60.0% | 31.0 |" in text and "conv_b |" not in text


def test_where_they_do_not_the_report_only_ranks_them():
    text = "\n".join(_quantization(int8_build(0.4832)))
    assert "do not add up on these samples (0.48x the whole model's" in text and "removes about" not in text
    assert 'try this layer in float first: `exclude_nodes = ["conv_a"]`' in text


def test_the_latency_against_float_says_when_the_two_were_timed_in_turns():
    from modelbuild.reports.model import VsFloat

    together = replace(
        int8_build(1.0, gate_passed=True),
        latency_ms={"median": 0.5},
        vs_float=VsFloat("cls@x86", 1.25, 0.4, timed_together=True),
    )
    assert "against 1.250 ms for `cls@x86`: 0.40x (its library timed in turns with this one)." in "\n".join(
        _quantization(together)
    )
    apart = replace(together, vs_float=VsFloat("cls@x86", 1.25, 0.4))
    assert "`cls@x86`: 0.40x." in "\n".join(_quantization(apart))


def test_a_passing_build_shows_no_suggestion():
    assert "exclude_nodes" not in "\n".join(_quantization(int8_build(1.0, gate_passed=True)))


def test_the_suggestion_offers_int16_inputs_too_and_the_preparation_names_them():
    build = int8_build(1.02)
    build.quantization.update(int16_nodes=["conv_c", "conv_d"], gptq_convs=3)
    text = "\n".join(_quantization(build))
    assert 'Or keep them integer with int16 inputs, at twice their int8 cost: `int16_nodes = ["conv_a"]`' in text
    assert "3 convs GPTQ-rounded, 2 layers with int16 inputs" in text


def finished_build(gates: list[GateResult]) -> BuildReport:
    return BuildReport(
        "cls@x86",
        artifact="build/cls/x86/model.so",
        validation=Validation(ran=True),
        latency_ms={"median": 0.8312, "p99": 1.2049, "throughput": 1203.1},
        accuracy={"y": {"cosine": 0.99991, "max_abs": 3e-5, "max_rel": 1e-4, "sqnr_db": 80.0}},
        gates=gates,
    )


def test_the_outcome_line_gives_speed_the_cosine_against_its_gate_and_the_artifact():
    gates = [
        GateResult("min_cosine", 0.99991, 0.9999, True),
        GateResult("max_abs_error", 3e-5, 1e-3, True),
        GateResult("max_p99_ms", 1.2049, 20, True),
    ]
    assert outcome_line(finished_build(gates)) == (
        "cls@x86  p50 0.831 ms  p99 1.2 ms  1203/s  cosine 0.99991 (gate >= 0.9999)  build/cls/x86/model.so"
    )


def test_the_outcome_line_shows_a_failed_accuracy_gate_first():
    gates = [GateResult("min_cosine", 0.99991, 0.9999, True), GateResult("max_abs_error", 3e-5, 1e-5, False)]
    assert "max_abs 3e-05 (gate <= 1e-05, FAILED)" in outcome_line(finished_build(gates))


def test_without_accuracy_gates_the_outcome_line_gives_the_worst_cosine():
    assert "  cosine 0.99991  " in outcome_line(finished_build([]))


def test_a_layout_conversion_tvm_refused_is_said_with_its_reason_and_a_converted_one_is_not():
    refused = BuildReport(
        "det@x86",
        schedule={
            "refused_steps": 0,
            "kernels": {},
            "layout": "model (TVM's layout conversion failed: Invalid SLayout)",
        },
    )
    assert (
        "Layout: the model's own, channels-last was refused: TVM's layout conversion failed: Invalid SLayout."
        in _fusion_and_memory(refused)
    )
    converted = BuildReport("det@x86", schedule={"refused_steps": 0, "kernels": {}, "layout": "channels-last"})
    assert not any("Layout" in line for line in _fusion_and_memory(converted))


def test_the_fused_kernels_table_names_their_onnx_layers_and_an_older_report_says_it_has_none():
    groups = [
        {
            "kernel": "fused_conv2d_add_relu",
            "ops": ["conv2d", "add", "relu"],
            "calls": 2,
            "layers": ["s1_conv", "s1_relu", "s2_conv", "s2_relu"],
        },
        {"kernel": "fused_add_sigmoid", "ops": ["add", "sigmoid"], "calls": 1},
    ]  # written before layers
    fusion = {
        "operators": 5,
        "kernels": 2,
        "traffic_bytes_before": 10,
        "traffic_bytes_after": 5,
        "traffic_ratio": 2.0,
        "groups": groups,
    }
    text = "\n".join(_fusion_and_memory(BuildReport("cls@x86", fusion=fusion)))
    assert "| fused_conv2d_add_relu | conv2d + add + relu | s1_conv, s1_relu, s2_conv +1 | 2 |" in text
    assert "| fused_add_sigmoid | add + sigmoid | - | 1 |" in text


def test_against_a_baseline_the_report_sets_latency_and_each_outputs_accuracy_beside_it():
    vs = {
        "report": "main/report.json",
        "latency_ms": {"median": [1.0, 1.2], "p99": [2.0, 2.0]},
        "accuracy": {"boxes": {"cosine": [0.9999, 0.998], "sqnr_db": [40.0, 31.5], "max_abs": [0.5, 2.0]}},
        "kernels": [{"kernel": "fused_conv2d7_add3", "layers": ["head_conv", "head_add"], "us": [100.0, 130.0]}],
    }
    text = "\n".join(_details(BuildReport("det@x86", vs_baseline=vs)))
    assert "| kernel of head_conv, head_add (us per call) | 100 | 130 | +30.0% |" in text
    assert "Against the baseline `main/report.json`:" in text
    assert "| latency p50 (ms) | 1 | 1.2 | +20.0% |" in text and "| latency p99 (ms) | 2 | 2 | +0.0% |" in text
    assert "| boxes: cosine | 0.9999 | 0.998 | -0.0019 |" in text and "| boxes: SQNR dB | 40 | 31.5 | -8.5 |" in text


FULL_LATENCY = {
    "runs": 50,
    "min": 0.8,
    "mean": 0.84,
    "median": 0.8312,
    "p90": 1.0,
    "p99": 1.2049,
    "p99.9": 1.3,
    "max": 1.3,
    "cv": 0.04,
    "throughput": 1203.1,
    "percentile_method": "linear",
}


def test_a_build_on_an_emulated_device_says_where_it_ran_and_that_its_latency_is_not_a_hardware_figure():
    machine = {
        "device": "rpi4",
        "tracker": "127.0.0.1:9190",
        "via": "rpc",
        "machine": "aarch64",
        "os": "Debian bookworm userland",
        "emulated": "qemu-aarch64 7.2 -cpu max",
        "threads": 1,
    }
    na = GateResult("max_p99_ms", None, 20, True, "timed on an emulated device (qemu)", applicable=False)
    b = replace(finished_build([na]), provenance={"machine": machine}, latency_ms=FULL_LATENCY)
    assert "1203/s  (emulated device)  cosine" in outcome_line(b)
    details = "\n".join(_details(b))
    assert (
        "- ran on: device 'rpi4' from the RPC tracker at 127.0.0.1:9190 (aarch64, Debian bookworm userland, "
        "1 thread), emulated by qemu-aarch64 7.2 -cpu max: its latency is not a hardware figure"
    ) in details
    assert "| max_p99_ms | - | 20 | n/a |" in details
    four = replace(b, provenance={"machine": {**machine, "threads": 4}})
    assert "(aarch64, Debian bookworm userland, 4 threads)" in "\n".join(_details(four))
    host = replace(finished_build([]), provenance={"machine": {"cpu": "Xeon", "cores": 2}}, latency_ms=FULL_LATENCY)
    assert "(emulated" not in outcome_line(host) and "- ran on: this machine (Xeon, 2 cores)" in "\n".join(
        _details(host)
    )


def test_a_latency_timed_while_other_processes_kept_the_cpus_busy_says_so():
    busy = "\n".join(_details(replace(finished_build([]), latency_ms=FULL_LATENCY, others_cpu=0.61)))
    assert "> Warning: other processes used 61% of this machine's CPUs while the library was timed" in busy
    assert "1203/s  (busy machine: others used 61% of the CPUs)" in outcome_line(
        replace(finished_build([]), latency_ms=FULL_LATENCY, others_cpu=0.61)
    )
    quiet = replace(finished_build([]), latency_ms=FULL_LATENCY, others_cpu=0.03)
    assert "other processes" not in "\n".join(_details(quiet)) and "busy" not in outcome_line(quiet)
    throttled = replace(finished_build([]), latency_ms=FULL_LATENCY, throttled=0.4)
    assert "> Warning: a CPU quota (its cgroup's" in "\n".join(_details(throttled))
    assert "1203/s  (CPU quota: 40% of the CPUs' time withheld)" in outcome_line(throttled)
    assert "quota" not in "\n".join(_details(quiet)) + outcome_line(quiet)
    limited = replace(throttled, provenance={"machine": {"cpu": "Xeon", "cores": 2, "cpu_quota": 1.0}})
    details = "\n".join(_details(limited))
    assert "- ran on: this machine (Xeon, 2 cores, a CPU quota of 1 CPU)" in details
    assert (
        "The quota is 1 CPU: time and deploy the library with at most 1 thread (`timing.threads`, "
        "`num-cores`), or with TVM_THREAD_POOL_SPIN_COUNT=0."
    ) in details


def test_a_gpu_build_says_which_gpu_it_ran_on():
    machine = {"cpu": "AMD EPYC", "cores": 16, "gpu": "NVIDIA H200", "compute_capability": "9.0", "cuda_driver": "13.0"}
    b = replace(finished_build([]), provenance={"machine": machine}, latency_ms=FULL_LATENCY)
    assert (
        "- ran on: this machine (AMD EPYC, 16 cores, GPU NVIDIA H200, compute capability 9.0, CUDA driver 13.0)"
        in "\n".join(_details(b))
    )


def test_a_name_holding_a_pipe_stays_one_cell_of_its_row():
    build = replace(
        finished_build([GateResult("min_cosine", 0.99991, 0.9999, True)]),
        latency_ms={},
        accuracy={"logits|scores": {"cosine": 1.0, "max_abs": 0.0, "max_rel": 0.0, "sqnr_db": 90.0}},
    )
    row = next(line for line in _details(build) if "logits" in line)
    assert row.startswith("| logits\\|scores | ")
    header = "| output | max abs | max rel | cosine | SQNR dB | top-1 |"
    assert len(row.replace("\\|", "").split("|")) == len(header.split("|"))


def test_tuning_says_where_this_runs_seconds_went_and_nothing_of_them_when_cached():
    tuning = {
        "tuned_tasks": 1,
        "tasks": 4,
        "trials_total": 32,
        "trials_measured_now": 32,
        "seconds_now": {"defaults": 7.46, "search": 11.1, "builder": 2.3, "runner_waits": 8.6},
    }
    (line,) = [text for text in _tuning(tuning) if text]
    assert line.endswith(
        "32 measured by this run. Its seconds: 7.5 timing the default schedules, 11.1 searching, "
        "of which 2.3 waiting on the builder and 8.6 on measurements."
    )
    tuning |= {"trials_measured_now": 0, "seconds_now": {}}
    assert _tuning(tuning)[1].endswith("0 measured by this run.")
    defaults_only = _tuning(tuning | {"seconds_now": {"defaults": 1.0}})[1]  # every workload already tuned
    assert defaults_only.endswith("Its seconds: 1.0 timing the default schedules.")
