"""int8 conv2d and matmul on x86 CPUs with AVX2 but no VNNI (AMD Zen 1-3, Intel before Ice Lake): vpmaddwd
multiplies 16-bit pairs and adds each pair's products into one of 8 int32 lanes, 16 multiply-adds an
instruction, followed by one vpaddd into the accumulators.

The 8-bit data (either sign) and the int8 weights are widened to int16, which holds them exactly, so
nothing is shifted and nothing saturates: every product is at most 255 * 128 and a pair's sum fits int32
easily. (vpmaddubsw, which multiplies the bytes themselves, saturates its 16-bit pair sums, the reason
onnxruntime and oneDNN scale weights to 7 bits on such CPUs; this kernel stays bit-exact.) Without it, an
int8 conv on these CPUs was float multiply-adds of the converted values (exact only while partial sums stay
below 2^24) or TVM's int32 loop (vpmulld).

The conv is computed in packed_conv.py's layouts with pairs instead of groups of 4: column lanes hold 8
output columns of one channel, channel lanes 8 output channels of one column. AVX2 has 16 vector registers,
so the register tiles hold 8 accumulators: 8 channels x one vector of columns, or 8 columns of one vector of
channels, beside the data and weight vectors.
"""

from __future__ import annotations

from modelbuild.compiler.kernels import packed_conv
from modelbuild.compiler.kernels.packed_conv import (
    PAD_VECTOR,
    block_names,
    register_intrinsics,
    schedule_channel_lanes,
    schedule_column_lanes,
)

AVX2 = packed_conv.Instruction(
    "avx2", lanes=8, data_dtype="int16", group=2, weight_dtype="int16", accumulates=False, row_block=8
)
BLOCKS = AVX2.blocks  # default_schedule recognises the kernel by them
STAGING_BLOCKS = AVX2.staging_blocks


def supported(target) -> bool:
    """Whether the target is an x86 CPU with AVX2 (the VNNI kernels are preferred where it has those)."""
    from tvm.target import codegen

    return (
        target is not None
        and target.kind.name == "llvm"
        and not str(target.attrs.get("mtriple", "")).startswith("aarch64")
        and bool(codegen.target_has_features("avx2", target))
    )


def schedule(sch, cores: int) -> None:
    """Tensorise the packed conv's reduction with vpmaddwd; the unpack and whatever FuseOps put behind it are
    computed per register tile while the accumulators are hot."""
    intrinsics = register_intrinsics(AVX2, "llvm.x86.avx2.pmadd.wd")
    names = block_names(sch)
    if AVX2.column_block in names:
        schedule_column_lanes(sch, AVX2, cores, intrinsics[AVX2.column_block])
    else:
        schedule_channel_lanes(sch, AVX2, cores, intrinsics[AVX2.block])
    if AVX2.pad_block not in names:
        packed_conv.vectorize_packing(sch, AVX2)
        return
    packed_conv.vectorise_pad(sch, AVX2, vector=PAD_VECTOR // 2)
    # padded rows of stride 1 by shuffles (7-10% on 3x3 convs); stride 2 gained nothing from them
    if int(sch.get(sch.get_sblock(AVX2.pack_block)).annotations["stride"]) == 1:
        packed_conv.tensorize_packing(sch, AVX2)
    else:
        packed_conv.vectorize_packing(sch, AVX2)
