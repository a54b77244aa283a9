"""The tune stage's choices, on database data: no TVM needed."""

from modelbuild.stages.tune import _best_records, _deficits


def data():
    return {"target": {"kind": "llvm"}, "trials": {}, "defaults": {},
            "workloads": [["a", "ma"], ["b", "mb"]],
            "records": [[0, ["ta1", [3.0e-6]]], [0, ["ta2", [1.0e-6]]], [1, ["tb1", [5.0e-6]]],
                        [1, ["tb-failed", [1e10]]]]}


def test_the_fastest_record_is_applied_only_where_it_beats_the_default_schedule():
    best = _best_records(data(), ["a", "b"], {"a": 2.0e-6, "b": 4.0e-6})
    assert [w[0] for w in best["workloads"]] == ["a"]  # b's best (5 us) loses to its default (4 us)
    assert best["records"] == [[0, ["ta2", [1.0e-6]]]]


def test_without_a_default_time_the_tuned_record_is_applied():
    best = _best_records(data(), ["a", "b"], {"a": None, "b": None})
    assert [w[0] for w in best["workloads"]] == ["a", "b"]
    assert best["records"][1] == [1, ["tb1", [5.0e-6]]]  # the failed candidate (1e10 s) is never chosen


def test_deficits_continue_from_the_trials_already_measured_and_respect_the_cap():
    tuning = {"trials_per_task": 8, "max_trials": None}
    assert _deficits(["a", "b", "c"], {"a": 8, "b": 3}, tuning) == {1: 5, 2: 8}
    assert _deficits(["a", "b", "c"], {"a": 8, "b": 3}, {**tuning, "max_trials": 6}) == {1: 5, 2: 1}
    assert _deficits(["a"], {}, {"trials_per_task": 0, "max_trials": None}) == {}
