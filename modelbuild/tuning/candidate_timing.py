"""How a tuning candidate is timed: each repeat at least `min_repeat_ms` long, as MetaSchedule times it, but
in one pass where TVM's own evaluator takes two or three.

TVM's time evaluator starts from `number` runs and, while a pass is shorter than min_repeat_ms, sizes the
next pass from the last one and runs it, throwing the short pass away; a first estimate from one run is
rarely enough. Through MetaSchedule's RPC runner on an emulated board, a candidate timed at least 1 s took
2.4-2.8 s (0.13 s with no minimum). Here a probe of a tenth of the minimum sizes the pass, with a margin, and
the evaluator keeps its own minimum, so a pass that still falls short is run again as before: the same
figures (seconds per run, per repeat), each still at least min_repeat_ms.
"""

from __future__ import annotations

import math

PROBE_SHARE = 0.1  # of min_repeat_ms: long enough that the pass's size is known to a few percent
MARGIN = 1.05  # runs beyond the estimate, so a slightly slower pass still reaches the minimum


def runs_for(seconds_per_run: float, min_repeat_ms: float, number: int) -> int:
    """Runs a pass needs to last min_repeat_ms at `seconds_per_run`, and never fewer than `number`."""
    if seconds_per_run <= 0:
        return number
    return max(number, math.ceil(min_repeat_ms / 1e3 / seconds_per_run * MARGIN))


def time_candidate(rt_mod, device, config, repeated_args) -> list[float]:
    """MetaSchedule's LocalRunner `f_run_evaluator`: seconds per run, `repeat` figures per set of arguments."""
    from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common

    if config.min_repeat_ms <= 0:
        return run_evaluator_common(rt_mod, device, config, repeated_args)
    costs: list[float] = []
    for args in repeated_args:
        device.sync()
        probe = _evaluator(rt_mod, device, config, config.number, 1, config.min_repeat_ms * PROBE_SHARE)
        number = runs_for(probe(*args).mean, config.min_repeat_ms, config.number)
        device.sync()
        costs += [
            float(c)
            for c in _evaluator(rt_mod, device, config, number, config.repeat, config.min_repeat_ms)(*args).results
        ]
    return costs


def time_candidate_remotely(session, rt_mod, device, config, repeated_args) -> list[float]:
    """The same, as MetaSchedule's RPCRunner `f_run_evaluator` (which passes the session first)."""
    return time_candidate(rt_mod, device, config, repeated_args)


def _evaluator(rt_mod, device, config, number: int, repeat: int, min_repeat_ms: float):
    return rt_mod.time_evaluator(
        func_name=rt_mod.entry_name,
        dev=device,
        number=number,
        repeat=repeat,
        min_repeat_ms=int(min_repeat_ms),
        f_preproc="cache_flush_cpu_non_first_arg" if config.enable_cpu_cache_flush else "",
    )
