"""A float 1x1 conv left in NCHW, computed as the matmul it is: [Co, Ci] weights by the [Ci, H * W] map.

In NCHW a pointwise conv's outputs for one channel are the whole map, contiguous: flattened, the map is a
matrix whose rows are its input channels, and the conv is the weights times it, as onnxruntime's MLAS computes
it. The default schedule then vectorises the matmul's long flattened rows, one tail at the end of each, where
as a conv it would vectorise each output row of the map, a tail in every row that makes no whole vectors
(measured in bench/results/README.md). Models that convert to channels-last compute their pointwise convs as
matmuls there; this takes those that keep NCHW (`channels_last._fast_in_nchw`). The reshapes are views. A
grouped conv is a batch of such matmuls, a group each; a strided one first takes the pixels it reads, a
strided slice of its input (a copy of a quarter of it at stride 2).

Eligible: conv2d, NCHW data and OIHW weights, float, a 1x1 kernel, no padding, static shapes.
"""

from __future__ import annotations

from modelbuild.compiler.relax_rewrite import known_shape, module_pass, rewrite_calls


def transform():
    """`rewrite` as a module pass: every eligible pointwise conv a matmul over the flattened map."""
    return module_pass(rewrite, "PointwiseConvsAsMatmuls")


def rewrite(module):
    """The module with every eligible conv2d (see the module's docstring) a matmul between reshapes."""
    return rewrite_calls(module, _as_matmul)


def eligible(call) -> bool:
    """A float NCHW 1x1 conv2d, unpadded, with known shapes."""
    if getattr(call.op, "name", None) != "relax.nn.conv2d":
        return False
    attrs = call.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout))
    weight, data = known_shape(call.args[1]), known_shape(call.args[0])
    return (
        layouts == ("NCHW", "OIHW", "NCHW")
        and str(getattr(call.args[0].ty, "dtype", "")) == "float32"
        and str(getattr(call.args[1].ty, "dtype", "")) == "float32"
        and str(attrs.out_dtype) in ("float32", "None", "void", "")
        and all(int(p) == 0 for p in attrs.padding)
        and weight is not None
        and data is not None
        and weight[2:] == [1, 1]
    )


def _as_matmul(mutator, call):
    from tvm import relax

    if not eligible(call):
        return call
    batch, channels, height, width = known_shape(call.args[0])
    _, out_channels, out_height, out_width = known_shape(call)
    groups = int(call.attrs.groups)
    emit = mutator.builder_.emit
    data = call.args[0]
    strides = [int(s) for s in call.attrs.strides]
    if strides != [1, 1]:  # a 1x1 kernel reads every stride-th pixel and nothing else
        data = emit(relax.op.strided_slice(data, axes=[2, 3], begin=[0, 0], end=[height, width], strides=strides))
    pixels = out_height * out_width
    if groups == 1:
        rows = emit(relax.op.reshape(data, [batch, channels, pixels]))
        weights = emit(relax.op.reshape(call.args[1], [out_channels, channels]))
    else:
        rows = emit(relax.op.reshape(data, [batch, groups, channels // groups, pixels]))
        weights = emit(relax.op.reshape(call.args[1], [groups, out_channels // groups, channels // groups]))
    product = emit(relax.op.matmul(weights, rows, out_dtype="float32"))
    return relax.op.reshape(product, [batch, out_channels, out_height, out_width])
