"""Inputs of every kind, without TVM: scalars, value ranges for generated data, and inputs bound to a constant
(declared in the recipe, bound and folded at import, fed to onnxruntime by the reference)."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from modelbuild import signature
from modelbuild.errors import RecipeError, StageError
from modelbuild.frontend import facts, loops
from modelbuild.frontend import inputs as model_inputs
from modelbuild.measurement import measure
from modelbuild.recipe import load_recipe
from modelbuild.recipe.schema import InputSpec
from modelbuild.stages import contracts, onnx_import, reference
from modelbuild.validation import golden
from tests.helpers.onnx_models import branch_on_rate, scaled_by_scalar, streaming

RECIPE = """
[models.vad]
path = "m.onnx"
{inputs}

[targets.cpu]
kind = "llvm"

[[builds]]
model = "vad"
targets = ["cpu"]
"""


def load(tmp_path, inputs: str):
    (tmp_path / "m.onnx").write_bytes(b"")
    (tmp_path / "deploy.toml").write_text(textwrap.dedent(RECIPE.format(inputs=inputs)))
    return load_recipe(tmp_path / "deploy.toml")


def test_a_scalar_a_range_and_a_bound_value_are_declared_in_the_recipe(tmp_path):
    recipe = load(
        tmp_path,
        'inputs.sr = { shape = [], dtype = "int64" }\n'
        'inputs.ids = { shape = [1, 8], dtype = "int32", range = [0, 257] }\n'
        'inputs.rate = { value = 16000, dtype = "int64" }\n'
        "inputs.window = { value = [[1.0, 0.5]] }\n"
        'inputs.state = { shape = [2, 1, 128], feedback = "stateN" }',
    )
    spec = recipe.spec.models["vad"].inputs
    assert spec["state"].feedback == "stateN"
    assert spec["sr"].shape == [] and spec["ids"].range == [0, 257]
    assert (spec["rate"].value, spec["rate"].shape, spec["window"].value) == (16000, None, [[1.0, 0.5]])


@pytest.mark.parametrize(
    "declaration, message",
    [
        ('{ dtype = "int64" }', "give the shape to build for"),
        ("{ shape = [2], value = 3 }", "value has shape [], the input declares shape [2]"),
        ("{ value = [[1, 2], [3]] }", "value is not a scalar or a rectangular list"),
        ("{ value = 3, range = [0, 4] }", "a bound input has one value"),
        ('{ value = 3, feedback = "stateN" }', "a bound input has one value"),
    ],
)
def test_an_input_declared_wrong_is_one_line_naming_the_field(tmp_path, declaration, message):
    with pytest.raises(RecipeError) as caught:
        load(tmp_path, f"inputs.sr = {declaration}")
    text = caught.value.render()
    assert message in text and "inputs.sr" in text and "deploy.toml:4" in text and "\n" not in text


def test_generated_data_keeps_to_the_declared_range():
    tensors = {
        "ids": {"shape": [4, 64], "dtype": "int32", "range": [250, 257]},
        "gain": {"shape": [], "dtype": "float32", "range": [0.5, 0.75]},
        "plain": {"shape": [64], "dtype": "int64"},
    }
    samples = golden.generate(tensors, fill="random", seed=0, count=8, stream=golden.GOLDEN)
    assert samples["ids"].shape == (8, 4, 64) and samples["gain"].shape == (8,)
    assert samples["ids"].min() == 250 and samples["ids"].max() == 256  # high is exclusive, every value drawn
    assert 0.5 <= samples["gain"].min() and samples["gain"].max() < 0.75
    assert 0 <= samples["plain"].min() and samples["plain"].max() <= 9  # no range: the default 0 to 9


def test_binding_an_input_folds_the_if_it_selects_and_removes_it_from_the_signature(tmp_path):
    model = onnx.load(str(branch_on_rate(tmp_path / "m.onnx")))
    declared = {"sr": InputSpec(value=16000, dtype="int64")}
    model_inputs.bind_inputs(model, declared)
    simplified = onnx_import._simplify(model)
    assert [n.op_type for n in simplified.graph.node] == ["Mul"]
    signed = facts.signature_of(simplified, declared)
    assert list(signed.inputs) == ["x"] and signed.bound == {"sr": {"dtype": "int64", "value": 16000}}
    again = signature.Signature(**json.loads(json.dumps(signed.__dict__)))
    (tmp_path / "signature.json").write_text(again.to_json())
    assert signature.read(tmp_path / "signature.json") == signed


def test_a_bound_value_the_model_contradicts_is_bad_input(tmp_path):
    model = onnx.load(str(branch_on_rate(tmp_path / "m.onnx")))
    with pytest.raises(StageError, match=r"input 'sr' is int64 in the model, the recipe binds a float32 value"):
        model_inputs.bind_inputs(model, {"sr": InputSpec(value=16000.0)})
    with pytest.raises(StageError, match=r"input 'sr' is \[\] in the model, the recipe binds a value of shape \[2\]"):
        model_inputs.bind_inputs(model, {"sr": InputSpec(value=[8000, 16000], dtype="int64")})
    with pytest.raises(StageError, match="the model has no input 'rate' to bind; the model's inputs: x float32"):
        model_inputs.bind_inputs(model, {"rate": InputSpec(value=1, dtype="int64")})


def test_an_if_left_unbound_names_the_input_that_would_fold_it(tmp_path):
    model = onnx.load(str(branch_on_rate(tmp_path / "m.onnx")))
    with pytest.raises(StageError) as caught:
        onnx_import._check_supported(model, {"Equal": None, "Mul": None})
    assert caught.value.message == (
        "operator If (node 'by_rate') is not supported by TVM's ONNX frontend; its condition depends on input "
        "'sr': bind it to a constant and the If folds away (fix: inputs.sr = { value = ..., dtype = \"int64\" } "
        "under the model)"
    )


@pytest.mark.parametrize("rate, factor", [(16000, 2.0), (8000, 3.0)])
def test_the_reference_feeds_the_original_model_its_bound_inputs(tmp_path, rate, factor):
    model = branch_on_rate(tmp_path / "m.onnx")
    signed = signature.Signature(
        inputs={"x": {"shape": [1, 4], "dtype": "float32"}},
        outputs={"y": {"shape": [1, 4], "dtype": "float32"}},
        bound={"sr": {"dtype": "int64", "value": rate}},
    )
    (tmp_path / "signature.json").write_text(signed.to_json())
    out = tmp_path / "out"
    out.mkdir()
    reference.run(
        inputs={"model": model, "signature": tmp_path / "signature.json"}, params={"golden": {"count": 2}}, out=out
    )
    with np.load(out / contracts.GOLDEN) as data:
        assert sorted(data.files) == ["in.x", "out.y"]
        np.testing.assert_allclose(data["out.y"], data["in.x"] * factor, rtol=1e-6)


def test_an_index_out_of_the_models_range_says_to_declare_the_range(tmp_path):
    model = scaled_by_scalar(tmp_path / "m.onnx")
    tensors = {
        "x": {"shape": [1, 4], "dtype": "float32"},
        "s": {"shape": [], "dtype": "float32"},
        "row": {"shape": [], "dtype": "int64"},
    }
    (tmp_path / "signature.json").write_text(signature.Signature(inputs=tensors, outputs={}).to_json())
    with pytest.raises(
        StageError,
        match=r"out of data bounds.*; integer inputs were generated as 0 to 9: declare "
        r"the values the model takes \(fix: inputs.row = \{ ..., range = \[low, high\] \}\)",
    ):
        reference.run(
            inputs={"model": model, "signature": tmp_path / "signature.json"},
            params={"golden": {"count": 4}},
            out=tmp_path,
        )


STREAM = {
    "x": {"shape": [1, 4], "dtype": "float32"},
    "state": {"shape": [1, 4], "dtype": "float32", "feedback": "stateN"},
}
STREAM_OUT = {"y": {"shape": [1, 4], "dtype": "float32"}, "stateN": {"shape": [1, 4], "dtype": "float32"}}


def stream_golden(tmp_path, count: int = 8) -> dict:
    (tmp_path / "signature.json").write_text(signature.Signature(inputs=STREAM, outputs=STREAM_OUT).to_json())
    out = tmp_path / "golden"
    out.mkdir()
    reference.run(
        inputs={"model": streaming(tmp_path / "m.onnx"), "signature": tmp_path / "signature.json"},
        params={"golden": {"count": count}},
        out=out,
    )
    with np.load(out / contracts.GOLDEN) as data:
        return {name: data[name] for name in data.files}


def test_a_streaming_state_is_fed_back_through_the_golden_samples(tmp_path):
    data = stream_golden(tmp_path)
    assert not data["in.state"][0].any()  # the stream starts from zeros
    np.testing.assert_array_equal(data["in.state"][1:], data["out.stateN"][:-1])  # then takes the previous state
    assert data["in.state"][1:].any()


def test_validation_runs_the_stream_on_the_librarys_own_states(tmp_path):
    """A library whose state drifts from onnxruntime's: fed the golden (onnxruntime's) states, its y would
    match every sample; fed its own, the drift shows from the second sample on."""
    golden_data = stream_golden(tmp_path)
    session = ort.InferenceSession(str(streaming(tmp_path / "drifting.onnx", drift=0.01)))
    library = signature.Signature(inputs=STREAM, outputs=STREAM_OUT)
    actual = measure.outputs_over_stream(
        lambda args: session.run(None, dict(zip(STREAM, args))), golden_data, library, count=8
    )
    y = np.stack(actual["y"])
    np.testing.assert_allclose(y[0], golden_data["out.y"][0], atol=1e-6)
    assert all(np.abs(y[i] - golden_data["out.y"][i]).max() > 5e-3 for i in range(1, 8))


def test_feedback_names_an_output_that_fits_the_input(tmp_path):
    outputs = {"y": {"shape": [1, 4], "dtype": "float32"}, "stateN": {"shape": [2, 4], "dtype": "float32"}}
    state = {"shape": [1, 4], "dtype": "float32"}
    with pytest.raises(
        StageError,
        match=r"inputs.state.feedback: the model has no output 'state_n'; its outputs: "
        r"y float32 \[1, 4\], stateN float32 \[2, 4\]",
    ):
        facts.fed_back("state", state, "state_n", outputs)
    with pytest.raises(StageError, match=r"output 'stateN' is float32 \[2, 4\], the input is float32 \[1, 4\]"):
        facts.fed_back("state", state, "stateN", outputs)


def test_an_onnxruntime_operator_tvm_lacks_says_how_to_export_without_it(tmp_path):
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("FusedGemm", ["x", "x"], ["y"], name="fused", domain="com.microsoft")],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 2])],
    )
    with pytest.raises(StageError) as caught:
        onnx_import._check_supported(onnx.helper.make_model(graph), {})
    assert caught.value.message == (
        "operator com.microsoft.FusedGemm (node 'fused') is not supported by TVM; it is onnxruntime's own operator, "
        "written by its graph optimizer or QOperator quantizer: export the model before onnxruntime optimizes it, "
        "or quantize in the QDQ format"
    )


def test_a_loop_of_a_constant_count_over_an_input_says_why_it_stays_and_to_export_it_unrolled():
    """onnxslim folds control flow on constants, but unrolls no loop, and simplify = true, which the hint for an
    If on constants says, would not fold it; frontend/loops.py unrolls up to 256 steps: a Loop of 300 steps
    adding one to x stays."""
    from onnx import TensorProto, helper, numpy_helper

    one = numpy_helper.from_array(np.ones((1, 4), np.float32), "one")
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["acc_in", "one"], ["acc_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [1, 4]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1, 4]),
        ],
        initializer=[one],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trip", "cond", "x"], ["y"], name="steps", body=body)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=[
            numpy_helper.from_array(np.array(300, np.int64), "trip"),
            numpy_helper.from_array(np.array(True), "cond"),
        ],
    )
    model = helper.make_model(graph)
    assert loops.unrolled(model) is model
    with pytest.raises(StageError) as caught:
        onnx_import._check_supported(model, {"Add": None, "Identity": None})
    assert caught.value.message == (
        "operator Loop (node 'steps') is not supported by TVM's ONNX frontend; its trip count and condition is "
        "computed from constants alone, but it runs over values computed from input 'x', and modelbuild unrolls a "
        "Loop of 1 to 256 steps, and this one runs 300: export the model with the loop unrolled "
        "(torch.onnx.export traces a Python loop unrolled; a scripted one stays a Loop), or run it with onnxruntime"
    )


def test_an_if_on_constants_left_by_simplify_false_says_to_simplify(tmp_path):
    model = onnx.load(str(branch_on_rate(tmp_path / "m.onnx")))
    model_inputs.bind_inputs(model, {"sr": InputSpec(value=16000, dtype="int64")})
    with pytest.raises(
        StageError,
        match=r"operator If \(node 'by_rate'\) is not supported by TVM's ONNX frontend; its "
        r"condition is computed from constants alone: simplify = true \(the default\) "
        r"folds it away",
    ):
        onnx_import._check_supported(model, {"Equal": None, "Mul": None})


def test_a_scan_too_long_to_write_out_says_how_long_it_is_and_to_export_it_unrolled():
    from tests.helpers.onnx_loops import scan_model

    model = scan_model(length=300)
    with pytest.raises(StageError) as caught:
        onnx_import._check_supported(loops.unrolled(model), {"Transpose": None, "Mul": None, "Add": None})
    assert caught.value.message == (
        "operator Scan (node '') is not supported by TVM's ONNX frontend; modelbuild writes a Scan out step by step, "
        "and modelbuild unrolls a Scan of 1 to 256 steps, and this one runs 300: export the model with the loop "
        "unrolled, or run it with onnxruntime"
    )
