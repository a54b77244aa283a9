"""A float 1x1 conv computed as the matmul it is, in either layout.

In NCHW a pointwise conv's outputs for one channel are the whole map, contiguous: flattened, the map is a
matrix whose rows are its input channels, and the conv is the [Co, Ci] weights times it, as onnxruntime's MLAS
computes it. The default schedule then vectorises the matmul's long flattened rows, one tail at the end of each,
where as a conv it would vectorise each output row of the map, a tail in every row that makes no whole vectors
(measured in bench/results/README.md). A grouped conv is a batch of such matmuls, a group each.

Channels-last, every pixel of the batch is a row of the [N * H * W, Ci] matrix and the conv is it times the
[Ci, Co] weights. As a conv its register tile ran down the image's rows, a tail wherever the tile does not
divide them, whose bounds test inside the reduction kept the accumulators in memory; as a matmul the rows are
padded to whole tiles once (default_schedule._rows_padded). The bias, activation and residual after it run on
the matmul's rows, fused into it (reshape_sinking.py). Grouped ones stay convs there.

A strided conv first takes the pixels it reads, a strided slice of its input (a copy of a quarter of it at
stride 2). The reshapes are views.

Eligible: conv2d, NCHW data and OIHW weights or NHWC and HWIO, float, a 1x1 kernel, no padding, static shapes.
"""

from __future__ import annotations

from modelbuild.compiler.relax_rewrite import known_shape, module_pass, reshaped, rewrite_calls


def transform():
    """`rewrite` as a module pass: every eligible pointwise conv a matmul."""
    return module_pass(rewrite, "PointwiseConvsAsMatmuls")


def rewrite(module):
    """The module with every eligible conv2d (see the module's docstring) a matmul between reshapes."""
    return rewrite_calls(module, _as_matmul)


CHANNELS_FIRST = ("NCHW", "OIHW", "NCHW")
CHANNELS_LAST = ("NHWC", "HWIO", "NHWC")


def eligible(call) -> bool:
    """A float 1x1 conv2d, NCHW, or NHWC ungrouped, unpadded, with known shapes."""
    if getattr(call.op, "name", None) != "relax.nn.conv2d":
        return False
    attrs = call.attrs
    weight, data, out = known_shape(call.args[1]), known_shape(call.args[0]), known_shape(call)
    if weight is None or data is None or out is None:
        return False
    layouts = _layouts(call)
    return (
        (layouts == CHANNELS_FIRST or (layouts == CHANNELS_LAST and int(attrs.groups) == 1))
        and str(getattr(call.args[0].ty, "dtype", "")) == "float32"
        and str(getattr(call.args[1].ty, "dtype", "")) == "float32"
        and str(attrs.out_dtype) in ("float32", "None", "void", "")
        and all(int(p) == 0 for p in attrs.padding)
        and _kernel_size(call) == [1, 1]
    )


def _layouts(call) -> tuple[str, str, str]:
    attrs = call.attrs
    return str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout)


def _kernel_size(call) -> list[int]:
    weight = known_shape(call.args[1]) or []
    return weight[2:] if _layouts(call) == CHANNELS_FIRST else weight[:2]


def _as_matmul(mutator, call):
    if not eligible(call):
        return call
    return _channels_first(mutator, call) if _layouts(call) == CHANNELS_FIRST else _channels_last(mutator, call)


def _channels_first(mutator, call):
    from tvm import relax

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
        weights = reshaped(mutator, call.args[1], [out_channels, channels])
    else:
        rows = emit(relax.op.reshape(data, [batch, groups, channels // groups, pixels]))
        weights = reshaped(mutator, call.args[1], [groups, out_channels // groups, channels // groups])
    product = emit(relax.op.matmul(weights, rows, out_dtype="float32"))
    return relax.op.reshape(product, [batch, out_channels, out_height, out_width])


def _channels_last(mutator, call):
    """[N, H, W, Ci] as [N * H * W, Ci] rows times the [Ci, Co] weights: one matmul over every pixel of the
    batch, whose rows the default schedule tiles and pads to whole tiles, where the conv tiled one image row
    at a time with a tail in each."""
    from tvm import relax

    batch, height, width, channels = known_shape(call.args[0])
    _, out_height, out_width, out_channels = known_shape(call)
    emit = mutator.builder_.emit
    data = call.args[0]
    strides = [int(s) for s in call.attrs.strides]
    if strides != [1, 1]:
        data = emit(relax.op.strided_slice(data, axes=[1, 2], begin=[0, 0], end=[height, width], strides=strides))
    rows = emit(relax.op.reshape(data, [batch * out_height * out_width, channels]))
    weights = reshaped(mutator, call.args[1], [channels, out_channels])
    product = emit(relax.op.matmul(rows, weights, out_dtype="float32"))
    return relax.op.reshape(product, [batch, out_height, out_width, out_channels])
