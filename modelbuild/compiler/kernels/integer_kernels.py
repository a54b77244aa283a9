"""How the integer operators of a quantized model are legalised, per target: `quantize` as ONNX rounds it,
and int8 conv2d in the fastest exact form the target has. Used by the compile pipeline (lowering.py) for
every module; the quantize stage's graph rewrite that creates these operators is integer_ops.py.
"""

from __future__ import annotations

from modelbuild.compiler.integer_ops import constant_value
from modelbuild.compiler.kernels import (
    amx_conv,
    avx2_conv,
    packed_conv,
    packed_matmul,
    sdot_conv,
    vnni_conv,
    vnni_depthwise,
)
from modelbuild.compiler.relax_rewrite import known_shape


def legalize_quantize(bb, call):
    """relax.quantize as clip(round(x * (1 / scale)) + zero_point), rounding half to even as ONNX
    QuantizeLinear specifies and onnxruntime computes.

    TVM 0.27's own legalisation divides by the scale; a vector division costs several multiplies (a 38400-
    element int8 quantize: 7.3 us dividing, 3.0 us multiplying by the reciprocal, one core).

    `tirx.round` and not `tirx.nearbyint`, although TVM's docs describe round as half away from zero: its
    LLVM backend lowers round to llvm.nearbyint (half to even, checked at exact halves), and TVM vectorises
    round but not nearbyint, whose vector loop it splits into one call per lane; LLVM then vectorises the
    loop around it with gathers and scatters, 4x slower (16% of the int8 classifier's kernel time).
    """
    import numpy as np
    from tvm import relax, te, tirx
    from tvm.ir import Constant
    from tvm.relax.transform.legalize_ops.common import _try_convert_to_scalar_const

    axis, out_dtype = int(call.attrs.axis), str(call.attrs.out_dtype)
    scale = call.args[1]
    # a constant scale per channel passes its reciprocals, computed here as the kernel would (one float32
    # division each): the kernel would otherwise divide once per channel and vector (folded rescales make
    # most of the classifier's scales per channel)
    reciprocal = (
        isinstance(scale, Constant) and constant_value(scale).size > 1 and str(call.args[0].ty.dtype) == "float32"
    )
    if reciprocal:
        scale = relax.const(np.float32(1) / constant_value(scale).astype(np.float32), "float32")

    def param(value, indices):
        if isinstance(value, (tirx.IntImm, tirx.FloatImm)):
            return value
        if all(int(d) == 1 for d in value.shape):
            return value[(0,) * len(value.shape)]
        return value[indices[axis]]

    def quantize(data, scale, zero):
        def compute(*indices):
            inverse = param(scale, indices) if reciprocal else tirx.const(1.0, data.dtype) / param(scale, indices)
            q = tirx.round(data[indices] * inverse) + param(zero, indices).astype(data.dtype)
            lo, hi = tirx.min_value(out_dtype).astype(data.dtype), tirx.max_value(out_dtype).astype(data.dtype)
            return te.max(te.min(q, hi), lo).astype(out_dtype)

        return te.compute(data.shape, compute, name="quantized")

    return bb.call_te(
        quantize,
        call.args[0],
        _try_convert_to_scalar_const(scale),
        _try_convert_to_scalar_const(call.args[2]),
        primfunc_name_hint="quantize",
    )


# |int8 x int8| <= 2^14, so float32 sums of up to 2^10 such products are integers below 2^24: exact
# (uint8 data doubles the bound on a product, halving the count)
EXACT_FLOAT_PRODUCTS = 1 << (24 - 14)


def legalize_conv2d(bb, call):
    """relax.nn.conv2d on 8-bit data and int8 weights, accumulating in int32, in the fastest exact form the
    target has:
    - AVX-512 VNNI (vpdpbusd) for ordinary convs (vnni_conv.py), and with VBMI for depthwise convs
      (vnni_depthwise.py); Arm's dot-product extension (sdot) for ordinary convs (sdot_conv.py);
    - else float32 multiply-adds of the int8 values when every partial sum stays below 2^24 and so is exact:
      grouped and depthwise convs (9 or 25 products) and small convs. x86 multiplies int32 vectors at a
      quarter of the float rate (vpmulld), so the plain integer loop ran the classifier's depthwise convs at
      half the speed of their fp32 versions;
    - else TVM's own int32 loop."""
    from tvm import ir
    from tvm import target as tvm_target

    if str(call.attrs.out_dtype) == "int32" and str(call.args[0].ty.dtype) in ("int8", "uint8"):
        target = tvm_target.Target.current()
        step = amx_conv.instruction(call) if amx_conv.supported(target) else None
        if step is not None:
            return packed_conv.legalize(bb, call, step)
        instruction = conv_instruction(target)
        if instruction is not None and packed_conv.eligible(call):
            return packed_conv.legalize(bb, call, instruction)
        if vnni_depthwise.supported(target) and vnni_depthwise.eligible(call):
            return vnni_depthwise.legalize(bb, call)
        if _reduction_length(call) <= EXACT_FLOAT_PRODUCTS // (2 if str(call.args[0].ty.dtype) == "uint8" else 1):
            if _sums_grouped_channels_last(call):
                return _channels_last_grouped_conv2d(bb, call)
            return _float_accumulated_conv2d(bb, call)
    return ir.Op.get("relax.nn.conv2d").get_attr("FLegalize")(bb, call)


def conv_instruction(target) -> packed_conv.Instruction | None:
    """The dot-product instruction that ordinary int8 convs are packed for on `target`, fastest first; None
    where it has none."""
    for kernel, instruction in ((vnni_conv, vnni_conv.VNNI), (sdot_conv, sdot_conv.SDOT), (avx2_conv, avx2_conv.AVX2)):
        if kernel.supported(target):
            return instruction
    return None


def legalize_matmul(bb, call):
    """relax.matmul of 8-bit data by constant int8 weights, accumulating in int32, as a packed 1x1 conv on the
    target's dot-product instruction (packed_matmul.py); any other matmul as TVM legalises it."""
    from tvm import ir
    from tvm import target as tvm_target

    if packed_matmul.eligible(call):
        target = tvm_target.Target.current()
        if vnni_conv.supported(target):
            return packed_matmul.legalize(bb, call, vnni_conv.VNNI)
        if sdot_conv.supported(target):
            return packed_matmul.legalize(bb, call, sdot_conv.SDOT)
        if avx2_conv.supported(target):
            return packed_matmul.legalize(bb, call, avx2_conv.AVX2)
    return ir.Op.get("relax.matmul").get_attr("FLegalize")(bb, call)


def _reduction_length(call) -> int:
    weight = known_shape(call.args[1])
    if weight is None or len(weight) != 4 or str(call.attrs.kernel_layout) != "OIHW":
        return EXACT_FLOAT_PRODUCTS + 1
    _, in_per_group, kh, kw = weight
    return in_per_group * kh * kw


def _float_accumulated_conv2d(bb, call):
    from tvm import te, topi

    attrs = call.attrs
    ints = _window(attrs)

    def conv(data, weight):
        # converted once per element, not once per use: a 3x3 depthwise conv reads each input nine times
        data = te.compute(data.shape, lambda *i: data(*i).astype("float32"), name="as_float")
        # the weights too, into a buffer of their own: converted inside the loop, each vector multiply-add
        # waited on loading, converting and broadcasting one int8 weight (57 us against 47 us in fp32 for
        # the classifier's largest depthwise conv, 46 us once converted ahead)
        weight = te.compute(weight.shape, lambda *i: weight(*i).astype("float32"), name="weight_as_float")
        total = topi.nn.conv(
            data,
            weight,
            ints["strides"],
            ints["padding"],
            ints["dilation"],
            int(attrs.groups),
            str(attrs.data_layout),
            str(attrs.kernel_layout),
            "float32",
        )
        return te.compute(total.shape, lambda *i: total(*i).astype("int32"), name="exact_sum")

    return bb.call_te(conv, call.args[0], call.args[1], primfunc_name_hint="conv2d_int8")


def _window(attrs) -> dict[str, list[int]]:
    """A conv's strides, padding and dilation as the integer lists topi takes."""
    return {name: [int(v) for v in getattr(attrs, name)] for name in ("strides", "padding", "dilation")}


def _sums_grouped_channels_last(call) -> bool:
    """A strided grouped conv of several input channels a group, NCHW, with a constant weight (see
    _channels_last_grouped_conv2d). Measured on ResNeXt's three grouped 3x3 convs (int8, 2 cores, Zen 5),
    NCHW -> channels-last: 256 channels at stride 2 to 29x29 2018 -> 462 us; at stride 1, 128 channels at
    57x57 322 -> 525 us (its rows make vectors, and the kernel's transposes cost more than it saves), 104
    channels at 29x29 217 -> 212 us."""
    from tvm.ir import Constant

    attrs = call.attrs
    groups = int(attrs.groups)
    if groups == 1 or not isinstance(call.args[1], Constant) or str(attrs.kernel_layout) != "OIHW":
        return False
    if int(attrs.strides[1]) == 1:
        return False
    if (str(attrs.data_layout), str(attrs.out_layout or attrs.data_layout)) != ("NCHW", "NCHW"):
        return False
    per_group_in = int(call.args[1].ty.shape.values[1])
    return per_group_in > 1 and packed_conv.static_shape(call.args[0].ty.shape)


def _channels_last_grouped_conv2d(bb, call):
    """A grouped int8 conv (a ResNeXt block's 3x3) summed in float32 channels-last inside its kernel: the data
    converted to float once as NHWC, the weights a float HWIO constant with groups merged into whole vectors
    of output channels (group_blocks.py: zeros between them, the same sums), the int32 result written back
    NCHW. In NCHW a vector runs along output columns: a 29-column row is a vector and a tail, and a stride-2
    conv gathers its columns (ResNeXt's 256-channel stride-2 conv at 29x29: 2.0 ms, 8x its fp32 version)."""
    import numpy as np
    from tvm import relax, te, topi

    from modelbuild.compiler.passes import group_blocks

    attrs, weight = call.attrs, constant_value(call.args[1])
    groups = int(attrs.groups)
    k = group_blocks.merged(groups, weight.shape[0] // groups)
    if k is not None:
        weight, groups = group_blocks.block_diagonal(weight, groups, k), groups // k
    hwio = np.ascontiguousarray(weight.transpose(2, 3, 1, 0).astype(np.float32))
    ints = _window(attrs)

    def conv(data, weights):
        n, c, h, w = data.shape
        nhwc = te.compute((n, h, w, c), lambda b, y, x, ch: data[b, ch, y, x].astype("float32"), name="as_float")
        total = topi.nn.conv(
            nhwc, weights, ints["strides"], ints["padding"], ints["dilation"], groups, "NHWC", "HWIO", "float32"
        )
        b, oh, ow, oc = total.shape
        return te.compute((b, oc, oh, ow), lambda i, ch, y, x: total[i, y, x, ch].astype("int32"), name="exact_sum")

    return bb.call_te(conv, call.args[0], relax.const(hwio, "float32"), primfunc_name_hint="conv2d_int8")
