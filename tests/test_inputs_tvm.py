"""Scalar and bound inputs end to end with the real TVM and onnxruntime: built, run and validated."""

from __future__ import annotations

import json
import textwrap

import pytest

from modelbuild.cli import main
from tests.helpers.onnx_models import branch_on_rate, branch_on_score, scaled_by_scalar

RECIPE = """
[models.net]
path = "net.onnx"
{inputs}

[targets.cpu]
kind = "llvm"
mcpu = "host"
num-cores = 1

[validation]
golden = {{ count = 4 }}
timing = {{ warmup = 1, min_runs = 3, min_seconds = 0.0 }}

[validation.gates]
max_abs_error = 1e-5

[[builds]]
model = "net"
targets = ["cpu"]
"""


def build(root, inputs: str, capsys) -> tuple[int, dict]:
    (root / "deploy.toml").write_text(textwrap.dedent(RECIPE.format(inputs=inputs)))
    code = main(["build", "-f", str(root / "deploy.toml"), "--json"])
    capsys.readouterr()
    return code, json.loads((root / "build/report.json").read_text())["builds"][0]


def test_scalar_inputs_build_and_validate_with_generated_data_in_their_range(tmp_path, capsys):
    scaled_by_scalar(tmp_path / "net.onnx")
    code, built = build(
        tmp_path, 'inputs.s = { shape = [] }\ninputs.row = { shape = [], dtype = "int64", range = [0, 3] }', capsys
    )
    assert code == 0, built["gates"]
    assert built["accuracy"]["y"]["max_abs"] < 1e-5


def test_a_bound_input_folds_its_if_and_leaves_the_library_signature(tmp_path, capsys):
    branch_on_rate(tmp_path / "net.onnx")
    code, built = build(tmp_path, 'inputs.sr = { value = 8000, dtype = "int64" }', capsys)
    assert code == 0, built["gates"]
    assert built["bound_inputs"] == {"sr": 8000}
    assert (
        "bound inputs (constants in the library, not its arguments): sr = 8000"
        in (tmp_path / "build/report.md").read_text()
    )
    import numpy as np
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(str(tmp_path / "build/net/cpu/model.so")), tvm.cpu())
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), x * 3.0)  # the else branch: one argument


def test_an_if_on_the_data_builds_as_both_branches_and_a_select(tmp_path, capsys):
    import numpy as np
    import onnxruntime as ort
    import tvm
    from tvm import relax

    branch_on_score(tmp_path / "net.onnx", nested=True)
    code, built = build(tmp_path, "inputs.x = { shape = [2, 4], range = [-1, 1] }", capsys)
    assert code == 0, (built["gates"], built["stages"])
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(tmp_path / "build/net/cpu/model.so")), tvm.cpu())
    session = ort.InferenceSession(str(tmp_path / "net.onnx"), providers=["CPUExecutionProvider"])
    for x in (-np.ones((2, 4), np.float32), np.full((2, 4), 0.5, np.float32), np.eye(2, 4, dtype=np.float32) * 3):
        got = vm["main"](tvm.runtime.tensor(x))
        for value, want in zip(got, session.run(None, {"x": x})):
            np.testing.assert_allclose(value.numpy(), want, rtol=1e-5, atol=1e-6)


def test_an_if_of_differently_shaped_branches_on_an_unbound_input_fails_import_with_the_fix(tmp_path, capsys):
    branch_on_rate(tmp_path / "net.onnx", else_repeats=2)
    code, built = build(tmp_path, 'inputs.sr = { shape = [], dtype = "int64" }', capsys)
    assert code == 3  # a stage failed
    assert (
        'bind it to a constant and the If folds away (fix: inputs.sr = { value = ..., dtype = "int64" }'
        in built["stages"]["import"]["error"]
    )


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_a_recurrent_layer_builds_unrolled_and_matches_onnxruntime(tmp_path, capsys, op):
    import onnx

    from tests.helpers.onnx_models import recurrent_model

    model, _ = recurrent_model(op, "bidirectional", "lengths")
    onnx.save(model, str(tmp_path / "net.onnx"))
    code, built = build(tmp_path, 'inputs.lens = { shape = [3], dtype = "int32", range = [1, 6] }', capsys)
    assert code == 0, (built["gates"], built["stages"])
    assert list(built["accuracy"]) == ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
    assert all(out["max_abs"] < 1e-5 for out in built["accuracy"].values())


@pytest.mark.parametrize("quant_format", ["QDQ", "QOperator"])
def test_a_pre_quantized_model_builds_integer_kernels_and_matches_onnxruntime_running_it(
    tmp_path, capsys, quant_format
):
    from tests.helpers.onnx_models import conv_then_dense, quantized_qdq

    quantized_qdq(
        conv_then_dense(tmp_path / "float.onnx"), tmp_path / "net.onnx", [1, 3, 8, 8], quant_format=quant_format
    )
    code, built = build(tmp_path, "", capsys)
    assert code == 0, built["gates"]  # max_abs_error <= 1e-5 against onnxruntime running the quantized model
    assert (tmp_path / "build/net/cpu/model.so").exists()
    assert main(["explain", "net@cpu", "--ir", "-f", str(tmp_path / "deploy.toml")]) == 0
    ir = (tmp_path / "build/net/cpu/ir/ir_after_fusion.py").read_text()
    kernels = [
        line for line in ir.splitlines() if line.strip().startswith("def ") and ("conv2d" in line or "matmul" in line)
    ]
    assert len(kernels) == 2 and all('"int8"' in k for k in kernels), kernels  # both read 8-bit data and weights
    assert ir.count('"int32")') >= 2  # and sum their products in int32


def test_a_qoperator_model_with_onnxruntimes_contrib_ops_builds_and_matches(tmp_path, capsys):
    from tests.helpers.onnx_models import mixed_ops, quantized_qdq

    quantized_qdq(
        mixed_ops(tmp_path / "float.onnx"),
        tmp_path / "net.onnx",
        [1, 3, 8, 8],
        quant_format="QOperator",
        activations="QUInt8",
    )
    _, built = build(tmp_path, "", capsys)  # the recipe's max_abs_error = 1e-5 is below one step: not the point
    # softmax probabilities in 1/256 steps: a requantization may round one step apart
    assert built["accuracy"]["y"]["max_abs"] <= 2 / 256 and built["accuracy"]["y"]["cosine"] > 0.999, built["accuracy"]
    assert built["stages"]["import"]["status"] == "built"


def test_a_streaming_model_is_validated_over_a_stream_of_chunks_with_its_state_fed_back(tmp_path, capsys):
    from tests.helpers.onnx_models import streaming

    streaming(tmp_path / "net.onnx")
    code, built = build(tmp_path, 'inputs.state = { shape = [1, 4], feedback = "stateN" }', capsys)
    assert code == 0, built["gates"]
    assert built["accuracy"]["y"]["max_abs"] < 1e-5 and built["accuracy"]["stateN"]["max_abs"] < 1e-5
