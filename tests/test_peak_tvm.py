"""The measured FP32 peak: TVM's FMA loop on this machine's cores, what LLVM made of it and what it reaches."""

from __future__ import annotations

import os
import re

from modelbuild.measurement import peak

REGISTER = {16: "zmm", 8: "ymm", 4: "xmm"}


def _loops(assembly: str) -> list[list[str]]:
    """The bodies of the innermost loops in x86 assembly: from a label to the jump back to it, with no label
    between (an outer loop's body holds its inner loops' labels)."""
    bodies, open_labels = [], {}
    for line in assembly.splitlines():
        text = line.split("#")[0].strip()
        for body in open_labels.values():
            body.append(text)
        if re.fullmatch(r"\.LBB\w+:", text):
            open_labels[text[:-1]] = []
        jump = re.fullmatch(r"j\w+\s+(\.LBB\w+)", text)
        if jump and jump.group(1) in open_labels:
            bodies.append(open_labels.pop(jump.group(1)))
    return [body for body in bodies if not any(line.endswith(":") for line in body)]


def test_the_fma_loop_keeps_every_chain_in_vector_registers_with_no_memory_access():
    """The peak is only a peak if its hot loop is FMAs on registers: one that LLVM spilled to memory, narrowed,
    or whose multiply-adds it did not contract would read far under what the cores can do."""
    executable, lanes = peak.compiled_fma_loop(min(2, os.cpu_count() or 1))
    assembly = executable.mod.inspect_source("asm")
    register = REGISTER[lanes]
    fmas = [sum(line.startswith("vfmadd") and f"%{register}" in line for line in body) for body in _loops(assembly)]
    assert max(fmas, default=0) >= peak.CHAINS, f"no loop of {peak.CHAINS} {register} FMAs in the assembly"
    hot = _loops(assembly)[fmas.index(max(fmas))]
    # a constant read from the code's own pool is no spill; a stack or buffer access would be
    memory = [line for line in hot if "(%" in line and "(%rip)" not in line]
    assert not memory and not [line for line in hot if line.startswith(("vmul", "vadd"))], hot


def test_the_measured_peak_is_within_what_the_vector_units_can_do():
    """A machine's load can only slow the loop, so an upper bound holds on any runner: a loop whose chains LLVM
    dropped would read above it."""
    threads = min(2, os.cpu_count() or 1)
    fma = peak.fma_flops(threads, seconds=0.05, repeats=3)
    lanes = peak.vector_lanes(peak.host_target(threads))
    # two FMA units a core, at no more than 6 GHz: what any core of today can do at most
    assert 0 < fma < threads * 2 * 2 * lanes * 6e9


def test_the_vector_width_follows_the_targets_features():
    import tvm

    assert peak.vector_lanes(tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})) == 16
    assert peak.vector_lanes(tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})) == 8
    assert peak.vector_lanes(tvm.target.Target({"kind": "llvm", "mcpu": "core2"})) == 4
