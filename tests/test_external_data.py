"""A model's digest covers the files it keeps its tensors in: no TVM."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelbuild.errors import InputError
from modelbuild.frontend import external_data
from modelbuild.hashing import FileDigests
from tests.helpers.onnx_models import conv_relu


def with_external_data(path, location="weights.bin"):
    """The conv model at `path`, re-saved with every tensor in `location` beside it."""
    model = onnx.load(str(path))
    onnx.save(
        model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=location, size_threshold=0
    )
    return path


def negate_weights(data):
    values = np.fromfile(data, dtype=np.float32)
    (-values).tofile(data)


def test_a_model_names_the_file_its_tensors_are_kept_in_and_an_inline_model_names_none(tmp_path):
    assert external_data.locations(conv_relu(tmp_path / "inline.onnx")) == []
    assert external_data.locations(with_external_data(conv_relu(tmp_path / "m.onnx"))) == ["weights.bin"]


def test_tensors_of_constant_nodes_and_of_subgraphs_are_found_too(tmp_path):
    value = numpy_helper.from_array(np.ones(4, np.float32), "c")
    inner = helper.make_graph(
        [helper.make_node("Constant", [], ["k"], value=value)],
        "branch",
        [],
        [helper.make_tensor_value_info("k", TensorProto.FLOAT, [4])],
    )
    outer = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], then_branch=inner, else_branch=inner)],
        "g",
        [helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(outer, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(
        model,
        str(tmp_path / "if.onnx"),
        save_as_external_data=True,
        location="constants.bin",
        size_threshold=0,
        convert_attribute=True,
    )
    assert external_data.locations(tmp_path / "if.onnx") == ["constants.bin"]


def test_the_digest_changes_when_only_the_external_data_changes(tmp_path):
    model = with_external_data(conv_relu(tmp_path / "m.onnx"))
    digests = FileDigests()
    before = external_data.model_digest(digests, model)
    model_bytes = model.read_bytes()
    negate_weights(tmp_path / "weights.bin")
    assert model.read_bytes() == model_bytes  # the .onnx itself holds offsets, not values
    assert external_data.model_digest(digests, model) != before


def test_an_inline_model_keeps_its_files_own_digest_so_existing_cache_keys_stay(tmp_path):
    model = conv_relu(tmp_path / "m.onnx")
    digests = FileDigests()
    assert external_data.model_digest(digests, model) == digests.digest(model)


def test_what_a_model_names_is_remembered_across_builds_so_it_is_parsed_once(tmp_path, monkeypatch):
    model = with_external_data(conv_relu(tmp_path / "m.onnx"))
    memo = tmp_path / "digests.json"
    first = FileDigests(memo)
    digest = external_data.model_digest(first, model)
    first.save()
    monkeypatch.setattr(external_data, "locations", lambda path: pytest.fail("parsed again"))
    assert external_data.model_digest(FileDigests(memo), model) == digest
    assert ["weights.bin"] in json.loads(memo.read_text()).values()


def test_a_missing_external_data_file_is_bad_input_naming_the_file_and_the_fix(tmp_path):
    model = with_external_data(conv_relu(tmp_path / "m.onnx"))
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(InputError) as caught:
        external_data.model_digest(FileDigests(), model)
    assert "'weights.bin'" in caught.value.message and "fix: copy the model's external data" in caught.value.message


def test_a_file_onnx_cannot_read_names_nothing(tmp_path):
    (tmp_path / "m.onnx").write_text('{"graph": "not protobuf"}')
    assert external_data.locations(tmp_path / "m.onnx") == []
