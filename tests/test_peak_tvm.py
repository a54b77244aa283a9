"""The measured FP32 peak: TVM's FMA loop on this machine's cores, against numpy's sgemm timed beside it."""

from __future__ import annotations

import os

from modelbuild.measurement import peak


def test_the_fma_loop_runs_at_least_as_fast_as_a_blas_sgemm_and_within_the_vector_units_bound():
    """A well-blocked sgemm reaches a large share of the FMA peak, never much more: a loop that LLVM spilled to
    memory, or that lost its FMAs, would fall far under it; one whose chains LLVM dropped would pass any bound."""
    threads = min(2, os.cpu_count() or 1)
    # the best of several runs long enough that a thread taken off its core for a moment does not set them all
    # (three of 0.05 s once read half the loop's speed on a shared runner)
    fma = peak.fma_flops(threads, seconds=0.2, repeats=5)
    sgemm = peak.sgemm_flops(repeats=3)
    assert fma > 0.6 * sgemm
    lanes = peak.vector_lanes(peak.host_target(threads))
    # two FMA units a core, at no more than 6 GHz: what any core of today can do at most
    assert fma < threads * 2 * 2 * lanes * 6e9


def test_the_vector_width_follows_the_targets_features():
    import tvm

    assert peak.vector_lanes(tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})) == 16
    assert peak.vector_lanes(tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})) == 8
    assert peak.vector_lanes(tvm.target.Target({"kind": "llvm", "mcpu": "core2"})) == 4
