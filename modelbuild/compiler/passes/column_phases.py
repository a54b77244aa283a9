"""NCHW convs of stride 2 along their rows computed as stride-1 convs over the rows' two phases.

An NCHW conv vectorises each output row, and at stride 2 the vector of a tap reads every other input column: a gather,
for every tap of every output channel, where the same conv at stride 1 with as many outputs loads contiguous vectors
(bench/results/README.md, "NCHW convs over rows of whole vectors"). Split once into its even and odd columns, the input
is a map of twice the channels and half the columns, and the conv is one of stride 1 along the rows over it: tap x of
input channel c reads column 2j + x, that is column j + x // 2 of phase x % 2, so the phase's channel takes the taps of
its parity and a zero where the kernel has none (a 3x3 kernel's taps 0 and 2 for the even phase, tap 1 and a zero for
the odd one). The sums are the same terms plus products by zero: 4 taps for 3, 6 for 5. The split is one copy of the
input, its padding on the left and right included, the only gather left.

Eligible: a float conv2d that is NCHW with OIHW constant weights once the layout is chosen, static shapes, stride 2
along the rows and no dilation along them, a kernel more than one column wide, and an input that reaches every column
the conv reads. Grouped convs keep their groups: each group's channels and their phases stay together.
"""

from __future__ import annotations

import numpy as np

from modelbuild.compiler.integer_ops import constant_value
from modelbuild.compiler.passes import column_padding
from modelbuild.compiler.relax_rewrite import bound_constant, known_shape, module_pass, rewrite_calls

PHASES = 2  # the stride split: every second column


def transform():
    """`rewrite` as a module pass: stride-2 NCHW convs over their columns' phases."""
    return module_pass(rewrite, "ColumnsSplitByPhase")


def rewrite(module):
    """The module with every eligible conv2d (see the module's docstring) over its input's column phases."""
    return rewrite_calls(module, _over_phases)


def phase_weights(weight: np.ndarray) -> np.ndarray:
    """OIHW weights of a stride-2 conv as those of the stride-1 conv over the phases: input channel c's tap
    x becomes channel 2c + x % 2, tap x // 2; the taps a phase lacks are zeros."""
    out_channels, per_group_in, kh, kw = weight.shape
    taps = -(-kw // PHASES)
    phased = np.zeros((out_channels, per_group_in, PHASES, kh, taps * PHASES), weight.dtype)
    phased[..., :kw] = weight[:, :, None]
    # column x of the padded kernel lands on phase x % 2, tap x // 2
    phased = phased.reshape(out_channels, per_group_in, PHASES, kh, taps, PHASES)
    picked = np.stack([phased[:, :, phase, :, :, phase] for phase in range(PHASES)], axis=2)
    return picked.reshape(out_channels, per_group_in * PHASES, kh, taps)


def phase_columns(columns: int, out_columns: int, kernel_width: int, pad_left: int) -> int | None:
    """Padding on the right that makes the padded row exactly the phases' columns: each phase holds the conv's
    output columns plus the taps it has less one; None where the conv reads fewer columns than the input has
    (it drops columns at the end), which the split does not cut."""
    phase = out_columns + -(-kernel_width // PHASES) - 1
    right = PHASES * phase - columns - pad_left
    return right if right >= 0 else None


def eligible(call) -> bool:
    """A float NCHW conv2d (column_padding.eligible) of constant weights, stride 2 and no dilation along its
    rows, a kernel wider than one column."""
    if not column_padding.eligible(call):
        return False
    attrs = call.attrs
    return int(attrs.strides[1]) == PHASES and int(attrs.dilation[1]) == 1 and known_shape(call.args[1])[3] > 1


def _over_phases(mutator, call):
    from tvm import relax

    if not eligible(call):
        return call
    weight = bound_constant(mutator, call.args[1])
    if weight is None:
        return call
    batch, channels, height, columns = known_shape(call.args[0])
    out_columns = known_shape(call)[3]
    attrs = call.attrs
    groups = int(attrs.groups)
    top, left, bottom, _ = (int(p) for p in attrs.padding)  # the right side: phase_columns's
    kernel_width = known_shape(call.args[1])[3]
    wide_right = phase_columns(columns, out_columns, kernel_width, left)
    if wide_right is None:
        return call
    emit = mutator.builder_.emit
    phase = (columns + left + wide_right) // PHASES
    padded = emit(relax.op.nn.pad(call.args[0], [0, 0, 0, 0, 0, 0, left, wide_right]))
    split = emit(relax.op.reshape(padded, [batch, groups, channels // groups, height, phase, PHASES]))
    phases = emit(relax.op.permute_dims(split, [0, 1, 2, 5, 3, 4]))
    data = emit(relax.op.reshape(phases, [batch, channels * PHASES, height, phase]))
    weights = relax.const(phase_weights(constant_value(weight)), "float32")
    return relax.op.nn.conv2d(
        data,
        weights,
        strides=[int(attrs.strides[0]), 1],
        padding=[top, 0, bottom, 0],
        dilation=[int(attrs.dilation[0]), 1],
        groups=groups,
        data_layout="NCHW",
        kernel_layout="OIHW",
        out_layout="NCHW",
        out_dtype=attrs.out_dtype,
    )
