"""This machine's float32 peak and memory bandwidth, measured where the library runs.

The compute peak is a loop of independent vector FMAs on every core, built by TVM's LLVM for this CPU: what
its cores give here, under the hypervisor and the other tenants, where a spec sheet's figure need not be. It
is the roofline's compute roof. A BLAS sgemm is timed beside it: a well-blocked matmul reaches 60-95% of the
loop, so a much lower ratio says the loop, not the kernels, is off.
"""

from __future__ import annotations

import time

import numpy as np

CHAINS = 12  # independent accumulators: more than an FMA unit's latency x throughput (4 x 2 on Zen and Intel)


def vector_lanes(target) -> int:
    """float32 lanes of the widest vector `target` computes in."""
    from tvm.target import codegen

    if codegen.target_has_features("avx512f", target):
        return 16
    if codegen.target_has_features("avx", target):
        return 8
    return 4  # SSE, NEON


def host_target(threads: int):
    """This CPU as LLVM names it, less what its flags say it cannot run here (recipe.targets.host_extensions)."""
    import tvm

    from modelbuild.recipe.targets import host_extensions, host_features

    cpu = tvm.target.codegen.llvm_get_system_cpu()
    extensions = host_extensions(cpu, host_features())
    return tvm.target.Target(
        {"kind": "llvm", "mcpu": cpu, "num-cores": threads, **({"mattr": extensions} if extensions else {})}
    )


def fma_flops(threads: int, seconds: float = 0.05, repeats: int = 5) -> float:
    """The best FLOP/s of `repeats` runs of the FMA loop on `threads` cores, each run about `seconds` long."""
    import tvm

    executable, lanes = compiled_fma_loop(threads)
    run = executable["main"]
    out = tvm.runtime.tensor(np.zeros((threads, lanes), "float32"))
    flops_per_step = 2 * CHAINS * lanes * threads
    steps = 1000
    while _run_seconds(run, out, steps) < seconds / 4 and steps < 10**9:  # size a run to `seconds`
        steps *= 4
    best = max(flops_per_step * steps / _run_seconds(run, out, steps) for _ in range(repeats))
    if not np.all(np.isfinite(out.numpy())):  # the chains are read back, so LLVM cannot drop them
        raise RuntimeError("the FMA loop gave non-finite sums")
    return best


def compiled_fma_loop(threads: int):
    """The FMA loop built for this CPU on `threads` cores, and the float32 lanes of its vectors."""
    import tvm

    target = host_target(threads)
    lanes = vector_lanes(target)
    return tvm.compile(tvm.IRModule({"main": _fma_loop(threads, lanes)}), target=target), lanes


def _fma_loop(threads: int, lanes: int):
    """A PrimFunc(out[threads, lanes], steps): on each core CHAINS vectors, each step a * 0.999 + 0.001 (an FMA,
    TVM letting LLVM contract a multiply-add), summed into `out`. The constants keep every load out of the loop,
    so the accumulators stay in registers."""
    from tvm import tirx
    from tvm.script import tirx as T

    @T.prim_func
    def fma(out: T.Buffer((threads, lanes), "float32"), steps: T.int32):
        for core in T.parallel(threads):
            acc = T.alloc_buffer((CHAINS, lanes), "float32", scope="local")
            for j in T.unroll(CHAINS):
                for lane in T.vectorized(lanes):
                    acc[j, lane] = T.float32(0.001) * T.Cast("float32", j + 1 + core)
            for _ in range(steps):
                for j in T.unroll(CHAINS):
                    for lane in T.vectorized(lanes):
                        acc[j, lane] = acc[j, lane] * T.float32(0.999) + T.float32(0.001)
            for lane in T.vectorized(lanes):
                out[core, lane] = T.float32(0)
            for j in range(CHAINS):
                for lane in T.vectorized(lanes):
                    out[core, lane] = out[core, lane] + acc[j, lane]

    assert isinstance(fma, tirx.PrimFunc)
    return fma


def sgemm_flops(n: int = 1024, repeats: int = 5) -> float:
    """numpy's BLAS float32 matmul of n x n matrices: best FLOP/s of `repeats`."""
    a, b = np.ones((n, n), np.float32), np.ones((n, n), np.float32)
    return max(2 * n**3 / _timed(lambda: a @ b) for _ in range(repeats))


def copy_bytes(megabytes: int = 64, repeats: int = 5) -> float:
    """Bytes read and written per second by a copy larger than any cache: main memory's bandwidth."""
    src = np.ones(megabytes * 2**20 // 4, np.float32)
    dst = np.empty_like(src)
    return max(2 * src.nbytes / _timed(lambda: np.copyto(dst, src)) for _ in range(repeats))


def _run_seconds(run, out, steps: int) -> float:
    return _timed(lambda: run(out, steps))


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started
