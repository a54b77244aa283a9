"""How far apart this machine's two cores are right now: data one core wrote, read by the other core, against
the same read by the core that wrote it.

On this project's 2-core VMs the two vCPUs are at times far apart (on different dies of the host, as it
seems): for seconds to minutes, a 2 MB buffer that one core wrote takes the other 1.5-2.5x as long to read
as it takes the core that wrote it, then for a while no longer. Every library whose kernels hand data from one
core to the other slows down meanwhile, int8 libraries most (the DB detector's int8 library 7.6 ms near, 10.9 ms far;
its fp32 one 16.5 and 18.7 ms), so a ratio measured in one spell is not a ratio measured in the other. The
benchmarks print this figure before and after timing, so a run says which spells it saw (`bench/zoo.py
--int8`: before and after each model's timing, in its row).

The probe runs on TVM's own thread pool, as the libraries do: a kernel of two parallel tasks writes a buffer
half each, then each task sums its own half, or the other task's half (TVM's pool gives task i to the same
thread every time).

Usage: python bench/core_distance.py [--rounds 300]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

HALF = 1 << 19  # floats per task: 2 MB, past a core's L2 (1-2 MB), so a core reads its own half from L3 too
LANES = 16
FLOAT = "float32"
FAR = 1.5  # ratios above this read as far apart (near spells measured 1.04-1.22, a far one 2.26)


@functools.cache
def kernels():
    """(write, read own half, read other half), each a function of TVM's pool of two tasks: write(buf, values)
    sets half t to values[t]; read(buf, sums) sums a half per task into sums[t, :] (LANES partial sums)."""
    import tvm
    from tvm.script import tirx as T
    from tvm.target import codegen

    n = 2 * HALF

    @T.prim_func
    def write(buf: T.Buffer((n,), FLOAT), values: T.Buffer((2,), FLOAT)):
        for t in T.parallel(2):
            for i in range(HALF // LANES):
                for v in T.vectorized(LANES):
                    buf[t * HALF + i * LANES + v] = values[t]

    def reader(shift: int):
        @T.prim_func
        def read(buf: T.Buffer((n,), FLOAT), sums: T.Buffer((2, LANES), FLOAT)):
            for t in T.parallel(2):
                for v in T.vectorized(LANES):
                    sums[t, v] = T.float32(0)
                for i in range(HALF // LANES):
                    for v in T.vectorized(LANES):
                        sums[t, v] = sums[t, v] + buf[(t + shift) % 2 * HALF + i * LANES + v]

        return read

    target = tvm.target.Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu()})
    return tuple(tvm.compile(tvm.IRModule({"main": f}), target=target)["main"] for f in (write, reader(0), reader(1)))


def cross_core_read_ratio(rounds: int = 300) -> tuple[float, float]:
    """(median microseconds of reading a half the same core wrote, the other core's median over it), the two
    reads alternating so both see the same spells."""
    import numpy as np
    import tvm

    write, own, other = kernels()
    buf = tvm.runtime.tensor(np.zeros(2 * HALF, "float32"))
    sums = tvm.runtime.tensor(np.zeros((2, LANES), "float32"))
    values = tvm.runtime.tensor(np.array([1, 2], "float32"))
    seconds = {own: [], other: []}
    for _ in range(rounds):
        for read in (own, other):
            write(buf, values)
            started = time.perf_counter()
            read(buf, sums)
            seconds[read].append(time.perf_counter() - started)
    near = statistics.median(seconds[own])
    return near * 1e6, statistics.median(seconds[other]) / near


def spell_of(ratio: float) -> str:
    return "far" if ratio > FAR else "near"


def spell(rounds: int = 100) -> str:
    """'near' or 'far' right now, for a row of a benchmark's table."""
    return spell_of(cross_core_read_ratio(rounds)[1])


def describe(rounds: int = 300) -> str:
    """One line for a benchmark's output."""
    own_us, ratio = cross_core_read_ratio(rounds)
    where = "far apart" if spell_of(ratio) == "far" else "near"
    return (
        f"cores {where}: 2 MB another core wrote read in {ratio:.2f}x the time the core that wrote it "
        f"takes ({own_us:.0f} us) [{time.strftime('%H:%M:%S')}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    print(describe(parser.parse_args().rounds))


if __name__ == "__main__":
    main()
