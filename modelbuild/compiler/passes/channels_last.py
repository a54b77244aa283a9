"""Float convs computed channels-last: NHWC activations, HWIO weights.

The default schedule vectorises a conv over its innermost output axis. In NCHW that is the output columns,
which real models do not keep at multiples of the vector width (26, 57, 38); in NHWC it is the output
channels, which they do (a 96->96 3x3 conv at 26x26: 1.2 GFLOP/s in NCHW, 60 channels-last; at 32x32 both
run at 55-70). TVM's ConvertLayout then keeps activations channels-last between convs through every operator
it can infer a layout for, so the transposes sit at the model's edges and the weights' are folded away.

- `layout = "auto"` (the default) converts float convs only: integer convs keep NCHW, the layout their VNNI and sdot
  kernels are written for. `"NHWC"` converts them too; `"NCHW"` (or None) keeps the model's layout.
- Transposed convs keep NCHW, the only layout TVM legalises them in.
- A conv3d goes NDHWC / DHWIO, its vectors over output channels as a conv2d's: a video classifier's 3x3x3
  convs over 16 frames of 112x112 ran at 130 GFLOP/s NCDHW (vectors over 112 columns) and 400-500 NDHWC.
- A conv1d goes NWC / WIO where that pays (`_channels_last_pays`): its vectors then run over channels, not
  over the few time steps a streaming audio model gives it.
- clip, which TVM 0.27 infers no layout for, is rewritten first as a maximum and a minimum, which it does:
  the hard-swish activations of a DB text detector had put 16 transposes around their clips. So is a
  leaky ReLU (as the maximum of x and alpha * x): each of AECMOS's went back to NCHW, and its max pool with it.
- TVM's layout inference fails on a reduction over a freshly stacked axis ("Invalid SLayout"), as in
  magika's max(stack([a, b]), axis=0); such a reduction is rewritten first as the element-wise maximum,
  minimum or sum of the stacked tensors, which it is.
- Where TVM's layout inference fails all the same, the model keeps its own layout, which is always correct,
  and the reason is returned for the build's figures.
"""

from __future__ import annotations

import math
import re

from modelbuild.compiler.default_schedule import VECTOR_LANES
from modelbuild.compiler.passes import group_blocks, pointwise_matmul
from modelbuild.compiler.passes.channel_padding import padded_channels
from modelbuild.compiler.relax_rewrite import ARITHMETIC, known_dims, known_shape, rewrite_calls
from modelbuild.errors import last_line

CHANNELS_LAST = {
    "relax.nn.conv2d": ["NHWC", "HWIO"],
    "relax.nn.conv1d": ["NWC", "WIO"],
    "relax.nn.conv3d": ["NDHWC", "DHWIO"],
}
CONVS = tuple(CHANNELS_LAST)
LAYOUTS = ("auto", "NHWC")  # the recipe's layouts that convert convs
CONVERTED = "channels-last"
KEPT = "model"
EDGES_OUTWEIGH = f"{KEPT} (too little conv work to pay for transposing its inputs and outputs)"
# depthwise multiply-adds per element of the model's inputs and outputs (each transposed once, into channels-last
# and out of it) from which converting pays: a single 3x3 depthwise conv does about 4.5 and ran faster in NCHW,
# dense convs of 72 and more faster channels-last (bench/results/README.md, "NCHW filters").
EDGE_WORK = 32


def convert(module, layout: str | None):
    """The module with its convs in `layout`, and the layout used: CONVERTED, or KEPT with the reason where
    a conversion was asked for and TVM refused it, or where "auto" found it would not pay."""
    from tvm import relax

    if layout not in LAYOUTS or not _has_conv(module, chosen=layout == "auto"):
        return module, KEPT
    if layout == "auto" and not _pays_for_its_edges(module):
        return module, EDGES_OUTWEIGH
    try:
        converted = relax.transform.ConvertLayout({}, lambda call: _desired_layouts(call, layout))
        return converted(plain_elementwise(module)), CONVERTED
    except (RuntimeError, ValueError, TypeError) as err:
        return module, f"{KEPT} (TVM's layout conversion failed: {last_line(err, 200)})"


def _pays_for_its_edges(module) -> bool:
    """Whether converting pays: unless every float conv2d is one NCHW computes well (`_fast_in_nchw`) and
    those that channels-last would speed up (the depthwise ones: a pointwise conv is the same matmul in either
    layout, thin groups are faster in NCHW) do fewer than EDGE_WORK multiply-adds per element of main's inputs
    and outputs of four dimensions or more (the maps a channels-last model transposes at its edges). A model
    whose shapes are not all known converts, as a real network's convs always pay, and so does one with a
    conv1d that pays, whose few time steps made NWC several times faster even in a model of a few convs
    (silero)."""
    main = next((func for gv, func in module.functions.items() if gv.name_hint == "main"), None)
    edges = _edge_shapes(main)
    convs = [call for call in _calls(module, ("relax.nn.conv2d", "relax.nn.conv3d")) if _is_float(call.args[0])]
    gaining = [call for call in convs if not (_thin_groups(call) or pointwise_matmul.eligible(call))]
    work = [_multiply_adds(call) for call in gaining]
    if (
        edges is None
        or any(w is None for w in work)
        or not all(map(_fast_in_nchw, convs))
        or any(map(_channels_last_pays, _calls(module, ("relax.nn.conv1d",))))
    ):
        return True
    return sum(work) >= EDGE_WORK * sum(math.prod(shape) for shape in edges if len(shape) >= 4)


def _fast_in_nchw(conv) -> bool:
    """A conv2d of thin groups (`_thin_groups`), a pointwise one that is a matmul in NCHW (pointwise_matmul.py),
    or a depthwise one of 3x3 taps or fewer at stride 1, whose NCHW kernel, vectors over an output row,
    measured as fast as its channels-last one at any width. Dense convs' NCHW kernel falls off wherever their
    rows make no whole vectors, or at a stride, and so does a strided or 5x5 depthwise one's
    (bench/results/README.md)."""
    weight = known_shape(conv.args[1])
    if getattr(conv.op, "name", None) != "relax.nn.conv2d" or weight is None or len(weight) != 4:
        return False
    if _thin_groups(conv) or pointwise_matmul.eligible(conv):
        return True
    depthwise = weight[1] == 1 and int(conv.attrs.groups) == weight[0]
    taps = weight[2:] if str(conv.attrs.kernel_layout) == "OIHW" else [99]
    return depthwise and max(taps) <= 3 and all(int(s) == 1 for s in conv.attrs.strides)


def _edge_shapes(func) -> list[list[int]] | None:
    """The shapes of a Relax function's parameters and of each tensor it returns; None where one is unknown."""
    from tvm import relax

    if not isinstance(func, relax.Function):
        return None
    returned = func.ret_ty.fields if isinstance(func.ret_ty, relax.TupleType) else [func.ret_ty]
    shapes = [known_shape(param) for param in func.params] + [known_dims(getattr(ty, "shape", None)) for ty in returned]
    return None if any(shape is None for shape in shapes) else shapes


def _calls(module, ops: tuple) -> list:
    """Every call to one of `ops` in the module's Relax functions."""
    from tvm import relax

    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", None) in ops:
            found.append(expr)

    for func in module.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


def _multiply_adds(conv) -> int | None:
    """A conv's multiply-adds: each output element sums its group's input channels over the kernel's taps."""
    out, weight = known_shape(conv), known_shape(conv.args[1])
    if out is None or weight is None or not str(conv.attrs.kernel_layout).startswith("OI"):
        return None
    return math.prod(out) * math.prod(weight[1:])


def _has_conv(module, *, chosen: bool) -> bool:
    """Whether a conv would be converted; `chosen`: the layout is modelbuild's choice ("auto"), which converts
    float convs that pay for it, where NHWC asked for converts any."""
    return any(
        (not chosen or _is_float(conv.args[0])) and _channels_last_pays(conv, chosen=chosen)
        for conv in _calls(module, CONVS)
    )


def _is_float(expr) -> bool:
    return str(expr.ty.dtype).startswith("float")


def _desired_layouts(call, layout: str) -> dict:
    """ConvertLayout's wish for one call."""
    op = getattr(call.op, "name", None)
    if op == "relax.nn.conv2d_transpose":
        return {op: ["NCHW", "IOHW"]}
    if layout == "auto" and op in ("relax.nn.conv2d", "relax.nn.conv3d") and not _is_float(call.args[0]):
        return {}
    if op == "relax.nn.conv1d" and (
        (layout == "auto" and not _is_float(call.args[0])) or not _channels_last_pays(call)
    ):
        return {op: ["NCW", "OIW"]}  # asked for: with no wish, it would take its input's layout, NWC
    return CHANNELS_LAST


def _channels_last_pays(conv, *, chosen: bool = True) -> bool:
    """Every conv2d and conv3d; a conv1d with one group whose output channels make whole 8-lane vectors, as computed
    (channel_padding rounds 161 up to 176, 1500 to 1504). A conv1d's output rows are a clip's time steps, often
    1 to 4 in a streaming model: silero's encoder, 129 -> 128 channels over 4 steps, ran 11.9 us NCW and 3.2 us
    NWC; but a conv1d to 161 channels over 900 steps (DNSMOS's spectrogram) 18x slower NWC, where its channels
    made no whole vectors, 0.7x padded to 176."""
    op = getattr(conv.op, "name", None)
    if op == "relax.nn.conv2d":
        return not (chosen and _thin_groups(conv))
    if op != "relax.nn.conv1d":
        return True
    shape = known_shape(conv)
    return (
        shape is not None
        and int(conv.attrs.groups) == 1
        and padded_channels(shape[1]) % 8 == 0
        and conv.attrs.data_layout == "NCW"
    )


def _thin_groups(conv) -> bool:
    """Whether a grouped conv2d's groups are too thin for vectors of output channels: fewer output channels a
    group than a vector holds, and no merge of groups (group_blocks.merged) that makes whole vectors of them.
    Such a conv computes faster in NCHW, its vectors over columns, and a model whose every conv is one keeps
    NCHW rather than pay for channels-last and its transposes (alone, several times faster:
    bench/results/README.md). Where another conv of the model pays, the whole model converts, these convs with
    it. Depthwise convs are not thin: at stride 2, or 5x5, they compute faster channels-last."""
    weight = known_shape(conv.args[1])
    groups = int(conv.attrs.groups)
    if weight is None or groups == 1 or str(conv.attrs.kernel_layout) != "OIHW":
        return False
    per_group_out, per_group_in = weight[0] // groups, weight[1]
    return per_group_in > 1 and per_group_out < VECTOR_LANES and group_blocks.merged(groups, per_group_out) is None


ELEMENTWISE_OF_REDUCTION = {"relax.max": "maximum", "relax.min": "minimum", "relax.sum": "add"}


def plain_elementwise(module):
    """The module with the element-wise work that the importer writes in other forms (see _as_inferable)
    written as relax's element-wise operators, which layout inference, and pixel_rows.py, see through. The
    calls a rewrite leaves unused go too: layout inference would convert them all the same."""
    from tvm import relax

    return relax.transform.DeadCodeElimination()(rewrite_calls(module, _as_inferable))


def _as_inferable(mutator, call):
    """The call as operators TVM infers layouts through, or the call itself:
    - a float clip(x, lo, hi) as minimum(maximum(x, lo), hi), the same values in any layout;
    - a float leakyrelu(x, alpha) as maximum(x, x * alpha) where 0 <= alpha <= 1 (minimum where alpha > 1):
      the same products, chosen by the same sign;
    - the ONNX importer's clip of opset 11 and later (bounds as inputs): a call_tir of its own maximum or
      minimum kernel by a scalar, as the relax operator (see _tir_bound);
    - an element-wise operator with a constant holding one value ([1] beside [1, C, H, W], which layout
      inference gives up on: the hard-swish's + 3 and / 6), with that value as a scalar;
    - one with a constant of lower rank beside a 4-D operand ([C, 1, 1] beside [1, C, H, W], tf2onnx's batch
      normalisation), which layout inference gives up on too, with the constant's shape led by ones (a 3-D
      tensor beside a constant of its rank got transposes where it had none: magika's);
    - a squeeze of negative axes as the same axes counted from the front: ConvertLayout failed with
      std::bad_alloc on silero's squeeze(x, axis=[-1]);
    - max / min / sum over axis k of stack([a, b, ...], axis=k), without keepdims, as maximum(a, b, ...)."""
    from tvm import relax

    op = getattr(call.op, "name", None)
    bounded = _tir_bound(mutator, call) if op == "relax.call_tir" else None
    if bounded is not None:
        return bounded
    if op in BROADCASTING and any(_single_value(arg) is not None for arg in call.args):
        return relax.Call(call.op, [_scalar(arg) for arg in call.args], call.attrs)
    ranks = [_rank(arg) for arg in call.args] if op in BROADCASTING else []
    if len(ranks) == 2 and 4 in ranks and ranks[0] != ranks[1]:
        return relax.Call(call.op, [_constant_of_rank(arg, 4) for arg in call.args], call.attrs)
    if op == "relax.clip" and _is_float(call.args[0]):
        x, dtype = call.args[0], str(call.args[0].ty.dtype)
        low, high = (relax.const(float(bound.value), dtype) for bound in call.args[1:3])
        return relax.op.minimum(mutator.builder_.emit(relax.op.maximum(x, low)), high)
    if op == "relax.squeeze" and call.attrs.axis is not None and any(int(a) < 0 for a in call.attrs.axis):
        rank = _rank(call.args[0])
        return relax.op.squeeze(call.args[0], [int(a) % rank for a in call.attrs.axis]) if rank > 0 else call
    if op == "relax.nn.leakyrelu" and _is_float(call.args[0]) and float(call.attrs.alpha) >= 0:
        return _leaky_as_bound(mutator, call.args[0], float(call.attrs.alpha))
    if op in ELEMENTWISE_OF_REDUCTION and isinstance(call.args[0], relax.Var):
        return _reduced_stack_as_elementwise(mutator, call, op)
    return call


def _reduced_stack_as_elementwise(mutator, call, op: str):
    """max / min / sum over the stacked axis of stack([a, b, ...]) as maximum(a, b, ...) (else the call). TVM's
    importer stacks ONNX's Max, Min and Sum of several inputs so, each broadcast to the output's shape first, and
    broadcast_to stops layout inference too: an input already of that shape is taken as it is, a constant of one
    value as a scalar (tf2onnx's Max(x, 0) after each of openWakeWord's leaky ReLUs)."""
    from tvm import relax

    stacked = mutator.lookup_binding(call.args[0])
    if not (
        isinstance(stacked, relax.Call)
        and getattr(stacked.op, "name", None) == "relax.stack"
        and call.attrs.axis is not None
        and len(call.attrs.axis) == 1
        and not call.attrs.keepdims
        and int(call.attrs.axis[0]) == int(stacked.attrs.axis)
        and hasattr(stacked.args[0], "fields")
        and len(stacked.args[0].fields) > 0
    ):
        return call
    parts = [_unbroadcast(mutator, part) for part in stacked.args[0].fields]
    if not any(_same_shape(part, call) for part in parts):  # nothing left to give the result its shape
        parts = list(stacked.args[0].fields)
    if len(parts) == 1:
        return call
    combine = getattr(relax.op, ELEMENTWISE_OF_REDUCTION[op])
    result = parts[0]
    for part in parts[1:-1]:
        result = mutator.builder_.emit(combine(result, part))
    return combine(result, parts[-1])  # not emitted: a binding of one variable to another stops layout inference


def _unbroadcast(mutator, part):
    """What broadcast_to(x, shape) broadcast, where an element-wise operator broadcasts it alike: x if it has
    that shape already, a constant of one value as a scalar; else the part itself."""
    from tvm import relax

    bound = mutator.lookup_binding(part) if isinstance(part, relax.Var) else None
    if not (isinstance(bound, relax.Call) and getattr(bound.op, "name", None) == "relax.broadcast_to"):
        return part
    source = bound.args[0]
    if _single_value(source) is not None:
        return _scalar(source)
    return source if _same_shape(source, part) else part


def _same_shape(a, b) -> bool:
    shape = known_shape(a)
    return shape is not None and shape == known_shape(b)


def _leaky_as_bound(mutator, x, alpha: float):
    """leakyrelu(x, alpha), alpha >= 0, which is x where x > 0 and x * alpha elsewhere: with alpha <= 1, x * alpha
    is at most x where x > 0 and at least x elsewhere, so the maximum picks leaky's value; with alpha > 1 the
    minimum does."""
    from tvm import relax

    scaled = mutator.builder_.emit(relax.op.multiply(x, relax.const(alpha, str(x.ty.dtype))))
    return relax.op.maximum(x, scaled) if alpha <= 1 else relax.op.minimum(x, scaled)


BROADCASTING = ARITHMETIC | {"relax.power"}


def _single_value(expr):
    """The value of a constant holding one value (of any rank), else None."""
    from tvm.ir import Constant

    shape = [int(d) for d in expr.ty.shape] if isinstance(expr, Constant) else []
    if not shape or any(d != 1 for d in shape):  # a scalar already, or more than one value: never copied out
        return None
    return expr.value.numpy().reshape(())


def _rank(expr) -> int:
    shape = getattr(expr.ty, "shape", None)
    return len(shape) if shape is not None and hasattr(shape, "values") else -1


def _constant_of_rank(expr, rank: int):
    """A constant of lower rank reshaped to `rank` dimensions, ones leading (the same broadcast); else expr."""
    from tvm import relax
    from tvm.ir import Constant

    if not isinstance(expr, Constant) or not 1 <= _rank(expr) < rank:  # a scalar broadcasts in any layout
        return expr
    value = expr.value.numpy()
    return relax.const(value.reshape((1,) * (rank - value.ndim) + value.shape), str(value.dtype))


def _scalar(expr):
    from tvm import relax

    value = _single_value(expr)
    return expr if value is None else relax.const(value, str(value.dtype))


TIR_BOUNDS = re.compile(r"(maximum|minimum)\d*")


def _tir_bound(mutator, call):
    """maximum(x, b) or minimum(x, b) for a call_tir of a kernel named so whose body is that one operation,
    with a float tensor x and a scalar b; else None. TVM's ONNX importer emits Clip with input bounds (opset 11
    and later) as such kernels (topi.maximum, topi.minimum), which layout inference cannot see through: the
    layout net's 20 hard-swish activations put 2 transposes each around them, 46% of its kernel time."""
    from tvm import relax, tirx

    callee, args = call.args[0], getattr(call.args[1], "fields", None)
    match = TIR_BOUNDS.fullmatch(getattr(callee, "name_hint", ""))
    if match is None or args is None or len(args) != 2 or not _is_float(args[0]) or len(args[1].ty.shape) != 0:
        return None
    module = mutator.builder_.get()
    kernel = module[callee] if callee in module.functions else None
    operation = "T.max(" if match.group(1) == "maximum" else "T.min("
    if not isinstance(kernel, tirx.PrimFunc) or kernel.script().count(operation) != 1:
        return None
    return getattr(relax.op, match.group(1))(args[0], args[1])
