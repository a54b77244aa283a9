"""Kernels traced back to the ONNX layers they compute: named at import, read back after fusion."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from modelbuild.compiler import layer_names


def named_model():
    """Conv(+bias) -> Relu -> an unnamed Sigmoid -> Gemm: the conv and its activations fuse; Gemm stays apart."""
    rng = np.random.default_rng(0)
    consts = [
        numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
        for name, shape in [("w", (8, 3, 3, 3)), ("b", (8,)), ("fc", (8 * 8 * 8, 5))]
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="/stem/conv/Conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="/stem/act/Relu"),
        helper.make_node("Sigmoid", ["r"], ["s"]),
        helper.make_node("Flatten", ["s"], ["f"], name="/head/Flatten"),
        helper.make_node("Gemm", ["f", "fc"], ["y"], name="/head/fc/Gemm"),
    ]
    graph = helper.make_graph(
        nodes,
        "named",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        initializer=consts,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def kernel_layers(module):
    import tvm

    from modelbuild.compiler import lowering

    target = tvm.target.Target({"kind": "llvm"})
    with target, tvm.transform.PassContext(opt_level=3):
        phases = lowering.lower(tvm.ir.load_json(tvm.ir.save_json(module)), target, fuse=True, layout="auto")
    return {call.kernel: call.layers for call in lowering.kernel_calls(phases.fused, phases.grouped, phases.legalized)}


def test_each_kernel_names_the_onnx_layers_it_computes_through_fusion_and_a_saved_module():
    model = named_model()
    found = kernel_layers(layer_names.from_onnx(model, {"x": [1, 3, 8, 8]}, {"x": "float32"}))

    conv = next(k for k in found if "conv2d" in k)
    assert found[conv][:3] == ("stem_conv_Conv", "stem_act_Relu", "Sigmoid_2")
    matmul = next(k for k in found if "matmul" in k)
    assert "head_fc_Gemm" in found[matmul]
    every = {layer for layers in found.values() for layer in layers}
    assert every <= {layer_names.label(n, i) for i, n in enumerate(model.graph.node)}


def test_the_names_change_no_number_the_library_computes():
    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    model = named_model()
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    outputs = []
    for module in (layer_names.from_onnx(model, {"x": [1, 3, 8, 8]}, {"x": "float32"}), from_onnx(model)):
        vm = tvm.relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
        outputs.append(vm["main"](tvm.runtime.tensor(x)).numpy())
    np.testing.assert_array_equal(outputs[0], outputs[1])
    assert layer_names.from_onnx(model, {"x": [1, 3, 8, 8]}, {"x": "float32"}).script().count("stem_conv_Conv") >= 1
