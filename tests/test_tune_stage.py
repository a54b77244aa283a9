"""The tune stage's choices, on database data: no TVM needed."""

from types import SimpleNamespace

import pytest

from modelbuild.recipe.schema import TuningSpec
from modelbuild.stages.tune import _best_records, _deficits, _heaviest


def data():
    return {
        "target": {"kind": "llvm"},
        "trials": {},
        "defaults": {},
        "workloads": [["a", "ma"], ["b", "mb"]],
        "records": [[0, ["ta1", [3.0e-6]]], [0, ["ta2", [1.0e-6]]], [1, ["tb1", [5.0e-6]]], [1, ["tb-failed", [1e10]]]],
    }


def test_the_fastest_record_is_applied_only_where_it_beats_the_default_schedule():
    best = _best_records(data(), ["a", "b"], {"a": 2.0e-6, "b": 4.0e-6})
    assert [w[0] for w in best["workloads"]] == ["a"]  # b's best (5 us) loses to its default (4 us)
    assert best["records"] == [[0, ["ta2", [1.0e-6]]]]


def test_without_a_default_time_the_tuned_record_is_applied():
    best = _best_records(data(), ["a", "b"], {"a": None, "b": None})
    assert [w[0] for w in best["workloads"]] == ["a", "b"]
    assert best["records"][1] == [1, ["tb1", [5.0e-6]]]  # the failed candidate (1e10 s) is never chosen


def test_deficits_continue_from_the_trials_already_measured_and_respect_the_cap():
    tuning = TuningSpec(trials_per_task=8)
    every = {0, 1, 2}
    assert _deficits(["a", "b", "c"], {"a": 8, "b": 3}, tuning, every) == {1: 5, 2: 8}
    assert _deficits(["a", "b", "c"], {"a": 8, "b": 3}, TuningSpec(trials_per_task=8, max_trials=6), every) == {
        1: 5,
        2: 1,
    }
    assert _deficits(["a"], {}, TuningSpec(trials_per_task=0), {0}) == {}
    assert _deficits(["a", "b", "c"], {"a": 8, "b": 3}, tuning, {0, 2}) == {2: 8}  # b is not chosen


def test_only_the_tasks_with_the_most_default_time_are_searched_when_tasks_is_set():
    tasks = [SimpleNamespace(weight=w) for w in (1, 4, 1, 2)]
    baseline = {"a": 3.0, "b": 1.0, "c": None, "d": 0.5}  # seconds per call; c could not be timed
    hashes = ["a", "b", "c", "d"]
    assert _heaviest(tasks, hashes, baseline, None) == {0, 1, 2, 3}
    assert _heaviest(tasks, hashes, baseline, 2) == {2, 1}  # untimed first, then 4 x 1.0 s over 1 x 3.0 s
    assert _heaviest(tasks, hashes, baseline, 3) == {2, 1, 0}


def test_the_xgb_cost_model_without_xgboost_names_the_package_to_install(monkeypatch):
    import importlib.util

    from modelbuild.errors import StageError
    from modelbuild.stages.tune import require_cost_model

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "xgboost" else real(name))
    with pytest.raises(StageError, match=r"needs xgboost: pip install xgboost-cpu \(as modelbuild's dependencies"):
        require_cost_model("xgb")
    require_cost_model("random")  # needs no xgboost
