"""A tuning candidate timed in one pass sized by a probe: the same figures as MetaSchedule's own evaluator."""

from __future__ import annotations

from modelbuild.tuning import candidate_timing


def test_a_candidate_timed_in_one_pass_gives_the_figures_tvms_evaluator_gives():
    import numpy as np
    import tvm
    from tvm import te
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig
    from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common

    n = 1 << 16
    a = te.placeholder((n,), name="a")
    b = te.compute(a.shape, lambda i: a[i] * 2.0, name="b")
    module = tvm.compile(te.create_prim_func([a, b]), target="llvm")
    module = getattr(module, "mod", module)  # tvm.compile's Executable around the module
    device = tvm.cpu()
    args = [[tvm.runtime.tensor(np.ones(n, "float32")), tvm.runtime.tensor(np.zeros(n, "float32"))]]
    config = EvaluatorConfig(number=1, repeat=3, min_repeat_ms=50, enable_cpu_cache_flush=False)

    ours = candidate_timing.time_candidate(module, device, config, args)
    theirs = run_evaluator_common(module, device, config, args)
    assert len(ours) == len(theirs) == 3  # seconds per run, one figure per repeat
    assert 0.25 < np.median(ours) / np.median(theirs) < 4  # the same quantity, on a shared machine


def test_the_tune_stage_times_its_candidates_so():
    from modelbuild.recipe.schema import TuningSpec
    from modelbuild.stages.tune import Measurer

    assert Measurer().runner(TuningSpec()).f_run_evaluator is candidate_timing.time_candidate
