"""Linear (bilinear) upsampling by whole factors in two passes, each output a sum of taps with weights that
depend only on its position within the factor: no per-element floor, clamp or lerp.

A segmentation head resizes its class logits back to the input's size (DeepLab's 8x, align_corners off:
half_pixel). TVM legalises resize2d per output element: the source coordinate computed in float, floored,
clamped, its four neighbours loaded by per-lane indices and interpolated. A DeepLab-style head's 21 x 40 x 40
-> 320 x 320 took 2.4 ms of an 11 ms float library, and 5.9 of 8.6 ms in its int8 build (NCHW, read through
the int8 convs' blocked layout).

For an output index o = f * i + r, the half_pixel source is i + d(r) with d(r) = (2r + 1 - f) / 2f, in
(-1/2, 1/2), so it interpolates input i with i - 1 (d < 0) or i + 1 (d > 0): out = L(r) in[i - 1] + M(r) in[i]
+ R(r) in[i + 1] with L = max(-d, 0), M = 1 - |d|, R = max(d, 0), the neighbours clamped to the edge as TVM
and onnxruntime clamp the source coordinate (a clamped neighbour is the same input, weights summing to 1).
asymmetric is d(r) = r / f (no left neighbour). The columns are interpolated first, into a map 1 / fh the
output's size, then the rows, whole rows of which are contiguous in either layout.

Eligible: mode linear, coordinate transformation half_pixel (pytorch_half_pixel is the same for outputs of
more than one pixel) or asymmetric, NCHW or NHWC, float32, static shapes, output sides whole multiples of
the input's, one of them larger; any other resize keeps TVM's.
"""

from __future__ import annotations

from modelbuild.compiler.kernels.nearest_upsample import LAYOUTS, upsampling_factors

COLUMNS_BLOCK = "linear_upsample_columns"  # kept a block of its own (inlined, its taps were computed per row)
BLOCK = "linear_upsample"
MODES = ("half_pixel", "pytorch_half_pixel", "asymmetric")


def eligible(call) -> bool:
    """A resize2d computed here (see the module's docstring)."""
    attrs = call.attrs
    if not (
        str(attrs.method) == "linear"
        and str(attrs.coordinate_transformation_mode) in MODES
        and str(attrs.layout) in LAYOUTS
        and str(call.ty.dtype) == "float32"
        and str(call.args[0].ty.dtype) == "float32"
    ):
        return False
    return upsampling_factors(call.args[0].ty.shape, call.ty.shape, str(attrs.layout)) not in (None, (1, 1))


def legalize(bb, call):
    """An eligible resize2d (see `eligible`) in two passes of taps."""
    layout, mode = str(call.attrs.layout), str(call.attrs.coordinate_transformation_mode)
    fh, fw = upsampling_factors(call.args[0].ty.shape, call.ty.shape, layout)
    return bb.call_te(
        lambda data: compute(data, fh, fw, mode=mode, layout=layout), call.args[0], primfunc_name_hint="resize2d"
    )


def compute(data, fh: int, fw: int, *, mode: str, layout: str):
    """The upsampled tensor: columns interpolated, then rows (a factor of 1 skips its pass)."""
    h_axis, w_axis = LAYOUTS[layout]
    columns = _along(data, w_axis, fw, mode, COLUMNS_BLOCK, layout) if fw > 1 else data
    return _along(columns, h_axis, fh, mode, BLOCK, layout) if fh > 1 else columns


def _along(x, axis: int, factor: int, mode: str, name: str, layout: str):
    """x upsampled `factor` times along one axis: L(r) x[i - 1] + M(r) x[i] + R(r) x[i + 1], o = factor i + r."""
    from tvm import te, tirx

    size = int(x.shape[axis])
    shape = [int(d) for d in x.shape]
    shape[axis] *= factor

    def tap(index, j):
        return x[(*index[:axis], j, *index[axis + 1 :])]

    def element(*index):
        o = index[axis]
        i = o // factor
        d = _offset(o % factor, factor, mode)
        left, right = tirx.max(-d, 0.0), tirx.max(d, 0.0)
        middle = 1.0 - left - right
        return (
            left * tap(index, tirx.max(i - 1, 0))
            + middle * tap(index, i)
            + right * tap(index, tirx.min(i + 1, size - 1))
        )

    return te.compute(shape, element, name=name, attrs={"layout": layout})


def read_transposed(sch) -> bool:
    """Whether the kernel is a channels-last upsampling fused with the transpose back to NCHW after it (a
    float build's last resize, at the model's edge)."""
    block = next(
        (b for b in sch.get_child_blocks(sch.get_sblock("root")) if sch.get(b).name_hint == COLUMNS_BLOCK), None
    )
    if block is None or str(sch.get(block).annotations.get("layout", "")) != "NHWC":
        return False
    consumers = sch.get_consumers(block)
    return len(consumers) == 1 and sch.get(consumers[0]).name_hint.startswith("T_transpose")


def columns_channels_first(sch) -> None:
    """The columns pass of a kernel that `read_transposed` written channels-first: the rows pass, inlined into
    the transpose, then reads whole rows of it where it had read one element per channel apart (the 21-class
    head's 8x, 320 x 320: 2.1 ms)."""
    block = sch.get_sblock(COLUMNS_BLOCK)
    sch.transform_layout(block, ("write", 0), lambda n, h, w, c: (n, c, h, w))
    n, h, w, c = sch.get_loops(block)
    sch.reorder(n, c, h, w)


def _offset(r, factor: int, mode: str):
    """d(r), the source's offset from input i for output factor * i + r, as a float32 expression."""
    r = r.astype("float32")
    if mode == "asymmetric":
        return r * (1.0 / factor)
    return (r * 2.0 + (1.0 - factor)) * (1.0 / (2 * factor))
