"""Integer kernels for quantized models: dequantize -> conv2d / matmul becomes int8 x int8 -> int32.

An onnxruntime QDQ model imports into Relax as float operators between `dequantize` and `quantize`, and
computes in float. This pass finds conv2d, conv2d_transpose and matmul whose data and weight both come
straight from `dequantize` of 8-bit tensors, and replaces each with the same operator on the 8-bit tensors
accumulating in int32, followed by one rescale by s_x * s_w (per output channel for per-channel weights). The
rescale is a float multiply, which on CPUs is as fast as a fixed-point multiplier and shift; everything
downstream (bias, activation, the next `quantize`) is unchanged, so the result equals onnxruntime's QDQ
result up to the rounding of that one multiply. Constant rescales right before a `quantize` (smoothing's per-channel
multiply, hard-swish's / 6) are then folded into its scale (`fold_into_quantize`), after divisions that
only feed means and products are moved past them towards one (`defer_divisions`).

Non-zero zero points (affine activations, onnxruntime's default uint8 ones) stay out of the hot loop: the
operator runs on the raw 8-bit data, padded with the zero point (what float zero is), and z * sum(w) per
output channel is subtracted from its int32 sums, so the 8-bit kernels (VNNI) take it. Where that cannot be
done (a zero point per channel, weights that are not constants) the data is centred in int32 instead, exact
but off the fast path.

int16 activations (A16W8, for the layers whose int8 inputs lose too much) are split into bytes, q = 256 * hi
+ lo with hi int8 and lo uint8, and computed as two 8-bit operators on the same int8 weights, rescaled by
256 * s_x * s_w and s_x * s_w and added in float: twice an int8 operator's work on the same fast 8-bit
kernels, none of which needs an int16 form, and no int32 sum that could overflow (hi * w <= 2^14 per
product, as for int8).

How the compile stage then computes these operators on each target is integer_kernels.py.
"""

from __future__ import annotations

import numpy as np

from modelbuild.compiler.relax_rewrite import operator_name

_EIGHT_BIT = ("int8", "uint8")
_SPLIT = "int16"  # activations computed as two bytes, when their zero point is 0
BYTE = 256
_CONVS = ("relax.nn.conv2d", "relax.nn.conv2d_transpose")
_OPS = (*_CONVS, "relax.matmul")


def rewrite(module):
    """The module with every eligible float conv2d / matmul over dequantized 8-bit inputs made integer."""
    from tvm import relax
    from tvm.ir import Constant  # relax constants are tvm.ir.Constant in TVM 0.27

    @relax.expr_functor.mutator
    class IntegerOps(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = getattr(call.op, "name", None)
            if name == "relax.nn.conv1d":
                return self._conv1d(call)
            if name not in _OPS:
                return call
            data = self._dequantized(call.args[0], _EIGHT_BIT + (_SPLIT,))
            weight = self._dequantized(call.args[1], _EIGHT_BIT) or self._transposed_constant(call.args[1])
            if data is None and weight is not None and name == "relax.matmul" and _dense_weight(weight):
                dynamic = self._dynamically_dequantized(call.args[0])
                return call if dynamic is None else _dynamic_integer(self.builder_, call, dynamic, weight)
            if data is None or weight is None or not _channels_supported(call, weight[1], weight[3]):
                return call
            return _integer(self.builder_, call, data, weight)

        def _conv1d(self, call):
            """A conv1d over dequantized 8-bit data and constant weights as the integer conv2d of one row, the
            same sums: onnxruntime quantizes a speech model's conv1d as any conv, and it ran in float."""
            data = self._dequantized(call.args[0], _EIGHT_BIT + (_SPLIT,))
            weight = self._dequantized(call.args[1], _EIGHT_BIT)
            attrs = call.attrs
            per_channel = weight is not None and np.asarray(weight[1]).size > 1
            if (
                data is None
                or weight is None
                or not isinstance(weight[0], Constant)
                or (per_channel and weight[3] % 3 != 0)  # scales along the output channels, or one
                or (str(attrs.data_layout), str(attrs.kernel_layout)) != ("NCW", "OIW")
            ):
                return call
            row = self.builder_.emit(relax.op.expand_dims(data[0], 2))
            taps = relax.const(constant_value(weight[0])[:, :, None, :], str(weight[0].ty.dtype))
            as_2d = self.builder_.normalize(
                relax.op.nn.conv2d(  # what _integer computes, in its attributes
                    row,
                    taps,
                    strides=(1, int(attrs.strides[0])),
                    padding=(0, int(attrs.padding[0]), 0, int(attrs.padding[1])),
                    dilation=(1, int(attrs.dilation[0])),
                    groups=int(attrs.groups),
                    out_dtype=str(call.ty.dtype),
                )
            )
            rows = self.builder_.emit(_integer(self.builder_, as_2d, (row, *data[1:]), (taps, *weight[1:])))
            return relax.op.squeeze(rows, [2])

        def _transposed_constant(self, expr):
            """As _dequantized, for a transpose of a dequantized 8-bit constant, with the constant transposed:
            onnx's Gemm with transB = 1 (how PyTorch's Linear exports) imports as matmul(x, permute_dims(w))."""
            value = self._bound(expr)
            if operator_name(value) != "relax.permute_dims":
                return None
            weight = self._dequantized(value.args[0], _EIGHT_BIT)
            if weight is None or not isinstance(weight[0], Constant):
                return None
            quantized, scale, zero, axis = weight
            rank = len(quantized.ty.shape)
            axes = [int(a) for a in value.attrs.axes] if value.attrs.axes is not None else list(range(rank))[::-1]
            moved = np.ascontiguousarray(np.transpose(constant_value(quantized), axes))
            return relax.const(moved, str(quantized.ty.dtype)), scale, zero, axes.index(axis % rank)

        def _bound(self, expr):
            return self.lookup_binding(expr) if isinstance(expr, relax.Var) else expr

        def _dequantized(self, expr, dtypes):
            """(quantized tensor, scale array, zero point array, axis) if `expr` is dequantize of `dtypes`."""
            value = self._bound(expr)
            if value is None or operator_name(value) != "relax.dequantize":
                return None
            quantized, scale, zero = value.args[0], value.args[1], value.args[2]
            if str(quantized.ty.dtype) not in dtypes:
                return None
            if not isinstance(scale, Constant) or not isinstance(zero, Constant):
                return None
            if str(quantized.ty.dtype) == _SPLIT and np.any(constant_value(zero)):
                return None
            return quantized, constant_value(scale), constant_value(zero), int(value.attrs.axis)

        def _dynamically_dequantized(self, expr):
            """As _dequantized, for 8-bit data quantized at run time with a constant scale: its zero point a
            scalar computed by the model (onnxruntime's dynamic quantization, DynamicQuantizeLinear, whose scale
            the model applies after the MatMulInteger), returned as the expression."""
            value = self._bound(expr)
            if value is None or operator_name(value) != "relax.dequantize":
                return None
            quantized, scale, zero = value.args
            if (
                str(quantized.ty.dtype) not in _EIGHT_BIT
                or not isinstance(scale, Constant)
                or isinstance(zero, Constant)
                or str(zero.ty.dtype) not in _EIGHT_BIT
                or getattr(zero.ty, "ndim", -1) != 0
            ):
                return None
            return quantized, constant_value(scale), zero, int(value.attrs.axis)

    for gv, func in list(module.functions.items()):
        if isinstance(func, relax.Function):
            module[gv] = IntegerOps(module).visit_expr(func)
    module = fold_into_quantize(defer_divisions(module))
    return relax.transform.RemoveUnusedOutputs()(relax.transform.DeadCodeElimination()(module))


def defer_divisions(module):
    """x / c, for a positive scalar constant c, whose every use is a mean or a product, as mean(x) / c and
    (x * g) / c at each use: the division moves to where fold_into_quantize can take it into a quantize's
    scale. Hard-swish ends in / 6, and before a squeeze-and-excite block its output is only pooled and
    gated, then quantized: the division, the slowest instruction of the classifier's int8 depthwise
    epilogues, goes from the kernel's every element to nowhere (or to one per channel, after a mean)."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Deferral(relax.PyExprMutator):
        def __init__(self, module, divisions):
            super().__init__(module)
            self.divisions = divisions  # division var -> its binding's value, x / c

        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = getattr(call.op, "name", None)
            if name not in ("relax.mean", "relax.multiply"):
                return call
            args = list(call.args)
            found = [(i, value) for i, a in enumerate(args) if (value := self._division(a)) is not None]
            if not found:
                return call
            index, value = found[0]
            args[index] = value.args[0]
            undivided = self.builder_.emit(relax.Call(call.op, args, call.attrs))
            return relax.op.divide(undivided, value.args[1])

        def _division(self, expr):
            return next((value for var, value in self.divisions if var.same_as(expr)), None)

    for gv, func in list(module.functions.items()):
        if isinstance(func, relax.Function):
            module[gv] = Deferral(module, _deferrable_divisions(func)).visit_expr(func)
    return module


def _deferrable_divisions(func) -> list:
    """(var, x / c) for each division by a positive float32 scalar constant that only means and products use,
    each taking it once, and that is not a dataflow block's output."""
    from tvm import relax
    from tvm.ir import Constant

    bindings = [b for block in func.body.blocks for b in block.bindings]
    candidates = []
    for b in bindings:
        value = b.value
        if (
            operator_name(value) == "relax.divide"
            and isinstance(b.var, relax.DataflowVar)
            and isinstance(value.args[1], Constant)
            and str(value.args[1].ty.dtype) == "float32"
            and constant_value(value.args[1]).size == 1
            and float(constant_value(value.args[1]).ravel()[0]) > 0
        ):
            candidates.append((b.var, value))
    reads = [(b.value, relax.analysis.free_vars(b.value)) for b in bindings]
    deferrable = []
    for var, value in candidates:
        uses = [use for use, free in reads if any(v.same_as(var) for v in free)]
        if uses and all(_takes_once(use, var) for use in uses):
            deferrable.append((var, value))
    return deferrable


def _takes_once(use, var) -> bool:
    name = operator_name(use)
    taken = [a for a in getattr(use, "args", []) if a.same_as(var)]
    if name == "relax.mean":
        return use.args[0].same_as(var) and len(taken) == 1
    return name == "relax.multiply" and len(taken) == 1


def fold_into_quantize(module):
    """quantize(x * m, s) as quantize(x, s / m) and quantize(x / d, s) as quantize(x, s * d), for constants m,
    d > 0 that are scalars or vary along the quantize's axis only.

    Each rescale costs a vector op per element of the kernel's epilogue, and a division (hard-swish's / 6)
    several: in the classifier's int8 epilogues the division was the slowest instruction. Folded into the
    quantize's scale (per channel when m is), they cost nothing; quantize already multiplies by 1 / scale,
    so the rounding moves by an ulp or two before quantizing, as it does between onnxruntime and TVM."""
    from tvm import relax
    from tvm.ir import Constant

    @relax.expr_functor.mutator
    class ScaleFolding(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", None) != "relax.quantize" or not isinstance(call.args[1], Constant):
                return call
            data, scale, axis = call.args[0], constant_value(call.args[1]).astype(np.float64), int(call.attrs.axis)
            rank = len(call.ty.shape)
            folded = self._rescale(data, axis % rank, rank)
            if folded is None:
                return call
            while folded is not None:
                data, factor = folded
                scale = scale.reshape(-1) * factor
                folded = self._rescale(data, axis % rank, rank)
            scale = scale.astype(np.float32)
            return relax.op.quantize(
                data,
                relax.const(scale if scale.size > 1 else scale[0], "float32"),
                call.args[2],
                axis=axis,
                out_dtype=str(call.attrs.out_dtype),
            )

        def _rescale(self, expr, axis, rank):
            """(x, factor) when `expr` is x * m or x / d as above: the quantize scale gets multiplied by factor
            (1 / m, or d), a scalar or one value per index of `axis`."""
            value = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
            name = operator_name(value)
            if name not in ("relax.multiply", "relax.divide") or not isinstance(value.args[1], Constant):
                return None
            constant = constant_value(value.args[1]).astype(np.float64)
            if str(value.args[1].ty.dtype) != "float32" or not np.all(constant > 0) or constant.ndim > rank:
                return None
            shape = (1,) * (rank - constant.ndim) + constant.shape
            if any(extent != 1 for i, extent in enumerate(shape) if i != axis):
                return None
            per_index = constant.reshape(-1)
            return value.args[0], (1 / per_index if name == "relax.multiply" else per_index)

    for gv, func in list(module.functions.items()):
        if isinstance(func, relax.Function):
            module[gv] = ScaleFolding(module).visit_expr(func)
    return module


def _channels_supported(call, weight_scale: np.ndarray, weight_axis: int) -> bool:
    """Whether the weight's scales are one, or one per output channel along the axis the rescale takes:
    onnxruntime quantizes a ConvTranspose's [in, out / groups, kh, kw] weight along axis 1, which holds the
    output channels only with one group."""
    if call.op.name != "relax.nn.conv2d_transpose" or np.asarray(weight_scale).size == 1:
        return True
    return (
        int(call.attrs.groups) == 1
        and str(call.attrs.kernel_layout) == "IOHW"
        and str(call.attrs.data_layout) == "NCHW"
        and weight_axis % 4 == 1
    )


def _integer(bb, call, data, weight):
    """Emit the integer operator and its rescale; return the float result that replaces `call`."""
    from tvm import relax

    (xq, sx, zx, _), (wq, sw, zw, w_axis) = data, weight
    w = _centered(bb, wq, zw)
    if call.op.name in _CONVS:
        scale = _channel_scale(sx, sw, rank=4, channel_axis=1)
    else:
        rank = len(call.ty.shape)
        scale = _channel_scale(sx, sw if w_axis in (-1, 1) else sw.reshape(-1)[:1], rank=rank, channel_axis=rank - 1)
    if str(xq.ty.dtype) == _SPLIT:
        high, low = _bytes(bb, xq)
        return relax.op.add(
            bb.emit(_rescaled(bb, _accumulated(bb, call, high, w), scale * np.float32(BYTE))),
            bb.emit(_rescaled(bb, _accumulated(bb, call, low, w), scale)),
        )
    if _offset_applies(call, zx, w):
        return _rescaled(bb, _offset_accumulated(bb, call, xq, int(np.asarray(zx).reshape(-1)[0]), w), scale)
    return _rescaled(bb, _accumulated(bb, call, _centered(bb, xq, zx), w), scale)


def _dense_weight(weight) -> bool:
    """Whether a dequantized weight is a constant int8 [K, N] matrix with zero points 0: what the packed
    matmul kernels take as it is."""
    from tvm.ir import Constant

    quantized, _, zero, _ = weight
    return (
        isinstance(quantized, Constant)
        and str(quantized.ty.dtype) == "int8"
        and len(quantized.ty.shape) == 2
        and not np.any(zero)
    )


def _dynamic_integer(bb, call, data, weight):
    """_integer for data whose zero point z is computed at run time: sum((x - z) w) as sum(x w) - z sum(w),
    with z sum(w) a vector of N products per call, the 8-bit data read as it is by the packed kernels."""
    from tvm import relax

    (xq, sx, zero, _), (wq, sw, _, w_axis) = data, weight
    rank = len(call.ty.shape)
    scale = _channel_scale(sx, sw if w_axis in (-1, 1) else sw.reshape(-1)[:1], rank=rank, channel_axis=rank - 1)
    sums = constant_value(wq).astype(np.int64).sum(axis=0).astype(np.int32)
    correction = bb.emit(relax.op.multiply(bb.emit(relax.op.astype(zero, "int32")), relax.const(sums, "int32")))
    return _rescaled(bb, bb.emit(relax.op.subtract(_accumulated(bb, call, xq, wq), correction)), scale)


def _offset_applies(call, zero: np.ndarray, weight) -> bool:
    """Whether sum((x - z) w) can be computed as sum(x w) - z sum(w): one data zero point, constant weights,
    and the layouts whose weight sums are taken below."""
    from tvm.ir import Constant

    if not np.any(zero) or np.asarray(zero).size != 1 or not isinstance(weight, Constant):
        return False
    if call.op.name == "relax.nn.conv2d_transpose":  # its padding crops the output: z would not pad it
        return False
    if call.op.name == "relax.nn.conv2d":
        return str(call.attrs.data_layout) == "NCHW" and str(call.attrs.kernel_layout) == "OIHW"
    return len(weight.ty.shape) == 2


def _offset_accumulated(bb, call, xq, zero: int, weight):
    """sum((x - z) w) in int32 as sum(x w) - z sum(w), x left 8-bit. A conv's padding becomes an explicit pad
    with z, the quantized form of the float zero ONNX pads with, so every window holds the whole sum(w)."""
    from tvm import relax

    sums = constant_value(weight).astype(np.int64)
    if call.op.name == "relax.nn.conv2d":
        top, left, bottom, right = (int(p) for p in call.attrs.padding)
        if top or left or bottom or right:
            xq = bb.emit(relax.op.nn.pad(xq, [0, 0, 0, 0, top, bottom, left, right], pad_value=float(zero)))
        correction = (zero * sums.sum(axis=(1, 2, 3))).reshape(1, -1, 1, 1)
        total = _accumulated(bb, call, xq, weight, padding=(0, 0, 0, 0))
    else:
        correction = zero * sums.sum(axis=0)
        total = _accumulated(bb, call, xq, weight)
    return bb.emit(relax.op.subtract(total, relax.const(correction.astype(np.int32), "int32")))


def _accumulated(bb, call, x, w, padding=None):
    """`call`'s operator on integer x and w, summing in int32 (a conv with its own padding, or `padding`)."""
    from tvm import relax

    if call.op.name == "relax.nn.conv2d":
        attrs = call.attrs
        return bb.emit(
            relax.op.nn.conv2d(
                x,
                w,
                strides=attrs.strides,
                padding=attrs.padding if padding is None else padding,
                dilation=attrs.dilation,
                groups=attrs.groups,
                data_layout=attrs.data_layout,
                kernel_layout=attrs.kernel_layout,
                out_layout=attrs.out_layout,
                out_dtype="int32",
            )
        )
    if call.op.name == "relax.nn.conv2d_transpose":
        attrs = call.attrs
        return bb.emit(
            relax.op.nn.conv2d_transpose(
                x,
                w,
                strides=attrs.strides,
                padding=attrs.padding,
                output_padding=attrs.output_padding,
                dilation=attrs.dilation,
                groups=attrs.groups,
                data_layout=attrs.data_layout,
                kernel_layout=attrs.kernel_layout,
                out_layout=attrs.out_layout,
                out_dtype="int32",
            )
        )
    return bb.emit(relax.op.matmul(x, w, out_dtype="int32"))


def _rescaled(bb, accumulated, scale: np.ndarray):
    from tvm import relax

    if np.all(scale == 1):  # MatMulInteger's: the model rescales the integer sums itself
        return relax.op.astype(accumulated, "float32")
    real = bb.emit(relax.op.astype(accumulated, "float32"))
    return relax.op.multiply(real, relax.const(scale, "float32"))


def _bytes(bb, quantized):
    """int16 q as (hi, lo), hi = q >> 8 in int8 (the shift is arithmetic) and lo = q & 255 in uint8."""
    from tvm import relax

    high = bb.emit(relax.op.astype(relax.op.right_shift(quantized, relax.const(8, "int16")), "int8"))
    low = bb.emit(relax.op.astype(relax.op.bitwise_and(quantized, relax.const(BYTE - 1, "int16")), "uint8"))
    return high, low


def _centered(bb, quantized, zero):
    """The 8-bit tensor itself when its zero point is 0, else (q - z) in int32."""
    from tvm import relax

    if not np.any(zero):
        return quantized
    shifted = bb.emit(relax.op.astype(quantized, "int32"))
    return bb.emit(relax.op.subtract(shifted, relax.const(zero.astype("int32"), "int32")))


def _channel_scale(sx: np.ndarray, sw: np.ndarray, *, rank: int, channel_axis: int) -> np.ndarray:
    """s_x * s_w shaped to broadcast along the output-channel axis."""
    scale = (np.asarray(sx, np.float64).reshape(-1)[0] * np.asarray(sw, np.float64).reshape(-1)).astype(np.float32)
    shape = [1] * rank
    shape[channel_axis] = scale.size
    return scale.reshape(shape)


def constant_value(constant) -> np.ndarray:
    """A relax constant's value as numpy (TVM 0.27 keeps it in `.value`)."""
    value = constant.value
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)
