"""How an ONNX node's name becomes the name of its Relax bindings (no TVM needed)."""

from __future__ import annotations

import pytest
from onnx import helper

from modelbuild.compiler.layer_names import label


@pytest.mark.parametrize(
    "name, expected",
    [
        ("/backbone/stage2/conv1/Conv", "backbone_stage2_conv1_Conv"),  # PyTorch's exporter
        ("conv2d_67.tmp_0", "conv2d_67_tmp_0"),  # Paddle's
        ("7", "n7"),  # an identifier may not start with a digit
        ("", "Sigmoid_3"),  # unnamed: its operator and position
        ("//", "Sigmoid_3"),
    ],
)
def test_a_node_name_becomes_an_identifier_and_an_unnamed_node_is_named_by_its_operator(name, expected):
    assert label(helper.make_node("Sigmoid", ["a"], ["b"], name=name), 3) == expected
