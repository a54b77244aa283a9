"""int8 conv2d on x86 CPUs with AVX-512 VNNI: one vpdpbusd multiplies 4 uint8 by 4 int8 and adds the sums
into 16 int32 lanes, 64 multiply-adds an instruction where the plain integer loop does 16 with vpmulld.

The conv is computed in packed_conv.py's layouts, 16 lanes wide: column lanes hold 16 output columns of one
channel, channel lanes 16 output channels of one column. vpdpbusd multiplies *unsigned* data, so int8 data
(the symmetric scheme) is shifted by +128 while packing and 128 * sum(w) subtracted afterwards. Padded data
is packed 16 columns x 4 channels per shuffle (packed_conv.tensorize_packing).

TVM 0.27 ships a VNNI tensor intrinsic (tvm.s_tir.tensor_intrin.x86), but it calls
llvm.x86.avx512.vpdpbusd.512 with the operand types of older LLVMs and fails LLVM's verifier; this module
registers its own with <64 x i8> operands.
"""

from __future__ import annotations

from modelbuild.compiler.kernels import packed_conv
from modelbuild.compiler.kernels.packed_conv import (
    block_names,
    register_intrinsics,
    schedule_channel_lanes,
    schedule_column_lanes,
)

VNNI = packed_conv.Instruction("vnni", lanes=16, data_dtype="uint8")
LANES = VNNI.lanes  # int32 accumulators of one vpdpbusd
BLOCK, COLUMN_BLOCK = VNNI.blocks  # the reduction block in channel lanes, and in column lanes
BLOCKS = VNNI.blocks  # default_schedule recognises the kernel by them
PACK_BLOCK, PAD_BLOCK = VNNI.pack_block, VNNI.pad_block
STAGING_BLOCKS = VNNI.staging_blocks


def supported(target) -> bool:
    """Whether the target has AVX-512 VNNI (Cascade Lake, Ice Lake, Sapphire Rapids, Zen 4 and later)."""
    from tvm.target import codegen

    return target is not None and target.kind.name == "llvm" and bool(codegen.target_has_features("avx512vnni", target))


def schedule(sch, cores: int) -> None:
    """Tensorise the packed conv's reduction with vpdpbusd; everything after it (the unpack, the rescale and
    whatever FuseOps put behind) is computed per register block while the accumulators are hot."""
    intrinsics = register_intrinsics(VNNI, "llvm.x86.avx512.vpdpbusd.512")
    names = block_names(sch)
    if COLUMN_BLOCK in names:
        schedule_column_lanes(sch, VNNI, cores, intrinsics[COLUMN_BLOCK])
    else:
        schedule_channel_lanes(sch, VNNI, cores, intrinsics[BLOCK])
    if PAD_BLOCK in names:
        packed_conv.schedule_padding(sch, VNNI)
