"""How many runs a tuning candidate's timed pass needs (the pure half of tuning/candidate_timing.py)."""

from __future__ import annotations

from modelbuild.tuning.candidate_timing import MARGIN, runs_for


def test_a_pass_is_sized_to_the_minimum_with_a_margin():
    assert runs_for(0.001, 1000, 1) == round(1000 * MARGIN)  # 1 ms a run, 1 s a pass


def test_a_pass_never_runs_fewer_times_than_the_recipe_asks():
    assert runs_for(2.0, 1000, 3) == 3  # one run already outlasts the minimum


def test_a_run_too_short_to_time_leaves_the_recipes_count():
    assert runs_for(0.0, 1000, 3) == 3  # the evaluator's own loop then finds the count
