"""int8 conv2d on Arm CPUs with the dot-product extension (Armv8.2 dotprod: Cortex-A55/A76 and later, Neoverse
N1, as in Graviton2): one sdot multiplies 4 int8 by 4 int8 and adds the sums into 4 int32 lanes, 16
multiply-adds an instruction where NEON's widening multiplies do 8 in three.

The conv is computed in packed_conv.py's layouts, 4 lanes wide (a 128-bit NEON register): column lanes hold 4
output columns of one channel, channel lanes 4 output channels of one column. sdot multiplies *signed* data,
so uint8 data (asymmetric activations) is shifted by -128 while packing and -128 * sum(w) subtracted
afterwards; int8 data is packed as it is. Bit-identical to the plain conv, like the VNNI kernel: the tests run
it on the emulated Arm device (scripts/emulated_arm64.py, qemu's `-cpu max` has dotprod) against numpy.

NEON has 32 vector registers, so the register tile is 16 accumulators: 4 output channels x 4 vectors of 4
columns in column lanes (each data vector feeds 4 sdots, each weight word 4), 16 columns of 4 channels in
channel lanes (each weight vector feeds 16). No Arm board measured these tiles: they follow the VNNI
kernel's, which were measured, and the register count. Armv8.6's i8mm (smmla) is not used.
"""

from __future__ import annotations

from modelbuild.compiler.kernels import packed_conv
from modelbuild.compiler.kernels.packed_conv import (
    block_names,
    register_intrinsics,
    schedule_channel_lanes,
    schedule_column_lanes,
)

SDOT = packed_conv.Instruction("sdot", lanes=4, data_dtype="int8")
LANES = SDOT.lanes
BLOCK, COLUMN_BLOCK = SDOT.blocks
BLOCKS = SDOT.blocks  # default_schedule recognises the kernel by them
STAGING_BLOCKS = SDOT.staging_blocks
COLUMN_VECTORS = 4  # column lanes: vectors of columns accumulated together, for each of the 4 output channels


def supported(target) -> bool:
    """Whether the target is an Arm CPU with the dot-product instructions (mattr +dotprod, or an mcpu that
    has them)."""
    from tvm.target import codegen

    return (
        target is not None
        and target.kind.name == "llvm"
        and str(target.attrs.get("mtriple", "")).startswith("aarch64")
        and bool(codegen.target_has_features("dotprod", target))
    )


def schedule(sch, cores: int) -> None:
    """Tensorise the packed conv's reduction with sdot; the unpack and whatever FuseOps put behind it are
    computed per register tile while the accumulators are hot."""
    intrinsics = register_intrinsics(SDOT, "llvm.aarch64.neon.sdot.v4i32.v16i8")
    names = block_names(sch)
    if COLUMN_BLOCK in names:
        schedule_column_lanes(sch, SDOT, cores, intrinsics[COLUMN_BLOCK], vectors=COLUMN_VECTORS)
    else:
        schedule_channel_lanes(sch, SDOT, cores, intrinsics[BLOCK])
    if SDOT.pad_block in names:
        packed_conv.vectorise_pad(sch, SDOT)
    packed_conv.vectorize_packing(sch, SDOT)  # 4 columns x 4 channels per 16-byte vector
