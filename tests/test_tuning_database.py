"""Tuning databases as files: merge, export and import, with no TVM."""

import json

import pytest

from modelbuild.errors import ModelbuildError
from modelbuild.tuning import database as tuning_db

TARGET = {"kind": "llvm", "mcpu": "skylake", "num-cores": 2}


def database(workloads, records, trials=None, target=TARGET, defaults=None):
    return {
        "target": target,
        "workloads": [[h, f"module-{h}"] for h in workloads],
        "records": records,
        "trials": trials or {},
        "defaults": defaults or {},
    }


def test_merge_reindexes_records_and_drops_duplicates():
    mine = database(["a"], [[0, ["trace-a1", [1.0]]]], {"a": 4})
    theirs = database(
        ["b", "a"], [[0, ["trace-b1", [2.0]]], [1, ["trace-a1", [1.0]]], [1, ["trace-a2", [0.5]]]], {"a": 2, "b": 8}
    )
    merged = tuning_db.merge(mine, theirs)
    assert [w[0] for w in merged["workloads"]] == ["a", "b"]
    by_workload = sorted((merged["workloads"][i][0], r[0]) for i, r in merged["records"])
    assert by_workload == [("a", "trace-a1"), ("a", "trace-a2"), ("b", "trace-b1")]
    assert merged["trials"] == {"a": 4, "b": 8}


def test_write_then_read_round_trips_in_metaschedules_line_format(tmp_path):
    data = database(["a"], [[0, ["trace", [1.0]]]], {"a": 1})
    tuning_db.write(tmp_path, data)
    assert tuning_db.read(tmp_path) == data
    lines = (tmp_path / tuning_db.WORKLOADS).read_text().splitlines()
    assert [json.loads(line) for line in lines] == [["a", "module-a"]]


def test_export_then_import_into_an_empty_store(tmp_path):
    source, dest = tmp_path / "one", tmp_path / "two"
    tuning_db.write(tuning_db.folder_for(source, TARGET), database(["a"], [[0, ["t", [1.0]]]], {"a": 3}))
    exported = json.loads(tuning_db.format_export(tuning_db.export_all(source)))
    assert tuning_db.import_all(dest, exported) == 1
    assert tuning_db.read(tuning_db.folder_for(dest, TARGET))["trials"] == {"a": 3}
    assert tuning_db.import_all(dest, exported) == 1  # importing twice adds nothing


def test_an_export_line_per_record(tmp_path):
    tuning_db.write(tuning_db.folder_for(tmp_path, TARGET), database(["a"], [[0, ["t1", [1.0]]], [0, ["t2", [2.0]]]]))
    text = tuning_db.format_export(tuning_db.export_all(tmp_path))
    assert sum('"t1"' in line for line in text.splitlines()) == 1
    assert len([line for line in text.splitlines() if line.startswith("    [0,")]) == 2


def test_importing_something_else_is_refused(tmp_path):
    with pytest.raises(ModelbuildError, match="not a modelbuild tuning export"):
        tuning_db.import_all(tmp_path, {"format": "other"})


def test_default_schedule_times_travel_with_the_records_and_local_ones_win():
    here = database(["a"], [], defaults={"a": {"modelbuild": "0.1.0", "seconds": 1.0}})
    there = database(
        ["a", "b"],
        [],
        defaults={"a": {"modelbuild": "0.1.0", "seconds": 9.0}, "b": {"modelbuild": "0.1.0", "seconds": 2.0}},
    )
    merged = tuning_db.merge(here, there)
    assert merged["defaults"]["a"]["seconds"] == 1.0 and merged["defaults"]["b"]["seconds"] == 2.0


def test_an_export_leaves_out_workloads_without_records_but_keeps_their_counts_and_default_times(tmp_path):
    data = database(
        ["a", "b", "c"],
        [[2, ["tc", [1.0]]], [0, ["ta", [2.0]]]],
        {"a": 8, "b": 8, "c": 8},
        defaults={"b": {"modelbuild": "0.1.0", "seconds": 3.0}},
    )
    tuning_db.write(tuning_db.folder_for(tmp_path, TARGET), data)
    exported = tuning_db.export_all(tmp_path)["databases"][0]
    assert [w[0] for w in exported["workloads"]] == ["a", "c"]
    assert sorted((exported["workloads"][i][0], r[0]) for i, r in exported["records"]) == [("a", "ta"), ("c", "tc")]
    assert exported["trials"] == {"a": 8, "b": 8, "c": 8} and "b" in exported["defaults"]
