"""cache verify and cache gc on a real store: what they find, what they remove, what they keep."""

from __future__ import annotations

import json
import os
import time

import pytest

from modelbuild.engine.housekeeping import collect_garbage, parse_size, verify
from modelbuild.engine.store import ActionResult, Store
from modelbuild.errors import ModelbuildError
from tests.helpers.cli import damage_keeping_mtime, run_cli


def store_with(tmp_path, entries: dict[str, dict[str, bytes]], *, ages_days: dict[str, float] | None = None) -> Store:
    """A store with one entry per key, each naming objects with the given bytes; `ages_days` backdates use."""
    store = Store(tmp_path / ".cache")
    for key, files in entries.items():
        outputs = {}
        for name, data in files.items():
            path = tmp_path / f"{key}-{name}"
            path.write_bytes(data)
            outputs[name] = store.put_object(path)
        store.record(key, ActionResult("s", f"n-{key}", outputs, 1.0))
        used = time.time() - (ages_days or {}).get(key, 0) * 86400
        os.utime(store.root / "actions" / key[:2] / f"{key}.json", (used, used))
    return store


def test_verify_finds_a_damaged_object_and_the_entries_that_name_it_and_fix_removes_them(tmp_path):
    store = store_with(tmp_path, {"k1": {"lib.so": b"library one"}, "k2": {"lib.so": b"library two"}})
    damaged = store.read_entry("k1").outputs["lib.so"]
    damage_keeping_mtime(store.object_path(damaged))
    found = verify(store)
    assert {d.path.name for d in found} == {damaged, "k1.json"}
    assert store.lookup("k1") is not None  # verify alone changes nothing
    verify(store, fix=True)
    assert store.lookup("k1") is None and store.lookup("k2") is not None
    assert verify(store) == []


def test_verify_finds_an_entry_edited_by_hand(tmp_path):
    store = store_with(tmp_path, {"k1": {"a": b"1"}, "k2": {"a": b"2"}})
    entry = store.root / "actions/k1/k1.json"
    entry.write_text(entry.read_text().replace('"seconds":1.0', '"seconds":0.5'))
    assert [d.path for d in verify(store)] == [entry]


def test_gc_evicts_least_recently_used_first_until_the_objects_fit(tmp_path):
    store = store_with(
        tmp_path,
        {"old": {"a": b"x" * 100}, "mid": {"a": b"y" * 100}, "new": {"a": b"z" * 100}},
        ages_days={"old": 3, "mid": 2, "new": 1},
    )
    done = collect_garbage(store, max_bytes=250)
    assert (done.entries_removed, done.objects_removed, done.bytes_freed, done.bytes_left) == (1, 1, 100, 200)
    assert store.lookup("old") is None and store.lookup("mid") and store.lookup("new")


def test_gc_counts_a_shared_object_once_and_keeps_what_the_recipe_needs(tmp_path):
    shared = b"s" * 100
    store = store_with(
        tmp_path, {"old": {"a": shared, "b": b"o" * 50}, "new": {"a": shared}}, ages_days={"old": 2, "new": 1}
    )
    assert collect_garbage(store, max_bytes=150, keep=frozenset({"old"})).kept_for_recipe == 0  # fits: 150
    done = collect_garbage(store, max_bytes=120, keep=frozenset({"old"}))
    assert done.kept_for_recipe == 1 and done.entries_removed == 1 and store.lookup("old") is not None
    assert store.lookup("new") is None and store.has_object(store.read_entry("old").outputs["a"])


def test_gc_by_age(tmp_path):
    store = store_with(tmp_path, {"old": {"a": b"1"}, "new": {"a": b"2"}}, ages_days={"old": 40, "new": 1})
    assert collect_garbage(store, max_age_days=30).entries_removed == 1
    assert store.lookup("old") is None and store.lookup("new") is not None


@pytest.mark.parametrize(
    "text, size", [("20G", 20 * 10**9), ("500MB", 500 * 10**6), ("1.5GiB", 3 * 2**29), ("1024", 1024)]
)
def test_sizes_are_read_as_people_write_them(text, size):
    assert parse_size(text) == size


def test_a_size_that_is_not_one_says_how_to_write_it():
    with pytest.raises(ModelbuildError, match=r"--max-size '20 gallons' is not a size \(fix: .*500M, 20G"):
        parse_size("20 gallons")


def test_cache_verify_and_gc_from_the_command_line(fake_project, capsys):
    root, _ = fake_project
    run_cli(capsys, root, "build")
    code, out, _ = run_cli(capsys, root, "cache", "verify")
    assert code == 0 and "0 damaged" in out
    objects = sorted((root / ".cache/objects").glob("*/*"))
    damage_keeping_mtime(objects[0])
    code, out, _ = run_cli(capsys, root, "cache", "verify")
    assert code == 1 and f"DAMAGED {objects[0].relative_to(root)}" in out.replace(str(root) + "/", "")
    assert "(fix: modelbuild cache verify --fix removes them)" in out
    assert run_cli(capsys, root, "cache", "verify", "--fix")[0] == 0
    assert run_cli(capsys, root, "cache", "verify")[0] == 0
    run_cli(capsys, root, "build")  # rebuilds what --fix removed
    code, out, _ = run_cli(capsys, root, "cache", "gc", "--max-size", "0")
    assert code == 0 and "removed 0 entries" in out and "4 entries over the limit kept" in out
    code, out, _ = run_cli(capsys, root, "cache", "gc", "--max-size", "0", "--include-current", "--json")
    assert json.loads(out)["entries_removed"] == 4 and json.loads(out)["bytes_left"] == 0
    code, _, err = run_cli(capsys, root, "cache", "gc")
    assert code == 2 and "cache gc needs a limit (fix: modelbuild cache gc --max-size 20G" in err


def test_a_lookup_marks_its_entry_used_so_gc_evicts_the_entry_nobody_asked_for(tmp_path):
    store = store_with(
        tmp_path, {"asked": {"a": b"x" * 100}, "idle": {"a": b"y" * 100}}, ages_days={"asked": 3, "idle": 2}
    )
    assert store.lookup("asked") is not None  # used now: the newest of the two, whatever its age
    collect_garbage(store, max_bytes=150)
    assert store.lookup("asked") is not None and store.lookup("idle") is None
