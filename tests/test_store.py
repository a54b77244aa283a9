from __future__ import annotations

import sys

import pytest

from modelbuild.engine.store import ActionResult, DamagedObject, Stats, Store
from tests.helpers.processes import run_on_read_only


def stored(tmp_path, content: bytes = b"library"):
    """A fresh store holding one object: (store, its digest)."""
    store = Store(tmp_path / ".cache")
    out = tmp_path / "lib.so"
    out.write_bytes(content)
    return store, store.put_object(out)


def test_record_then_lookup(tmp_path):
    store, digest = stored(tmp_path)
    store.record("k1", ActionResult("compile", "compile:a@x", {"lib.so": digest}, 1.5))
    assert store.lookup("k1").outputs == {"lib.so": digest}
    assert store.lookup("k2") is None


def test_a_damaged_object_is_caught_when_used_and_removed_so_the_next_lookup_misses(tmp_path):
    store, digest = stored(tmp_path)
    store.record("k", ActionResult("compile", "n", {"lib.so": digest}, 1.0))
    store.object_path(digest).write_bytes(b"tampered")
    assert store.lookup("k") is not None  # present: lookups stat, they do not hash
    with pytest.raises(DamagedObject):
        store.materialize(digest, tmp_path / "build/model.so")
    assert not (tmp_path / "build/model.so").exists()
    assert store.lookup("k") is None


def test_an_entry_edited_to_name_another_object_is_not_served(tmp_path):
    store, digest = stored(tmp_path, b"good")
    other = store.put_object(write(tmp_path / "evil.so", b"evil"))
    store.record("k", ActionResult("compile", "n", {"lib.so": digest}, 1.0))
    entry = store.root / "actions/k/k.json"
    entry.write_text(entry.read_text().replace(digest, other))
    assert store.lookup("k") is None


def test_with_a_signing_key_unsigned_and_wrongly_signed_entries_are_rejected(tmp_path):
    unsigned, digest = stored(tmp_path)
    unsigned.record("k", ActionResult("compile", "n", {"lib.so": digest}, 1.0))
    assert Store(unsigned.root, key=b"team").lookup("k") is None
    Store(unsigned.root, key=b"intruder").record("k", ActionResult("compile", "n", {"lib.so": digest}, 1.0))
    assert Store(unsigned.root, key=b"team").lookup("k") is None
    Store(unsigned.root, key=b"team").record("k", ActionResult("compile", "n", {"lib.so": digest}, 1.0))
    assert Store(unsigned.root, key=b"team").lookup("k").outputs == {"lib.so": digest}
    assert Store(unsigned.root).lookup("k") is not None  # a reader without the key checks the digest only


def write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_recording_outputs_that_are_not_stored_is_refused(tmp_path):
    store = Store(tmp_path / ".cache")
    with pytest.raises(RuntimeError):
        store.record("k", ActionResult("compile", "n", {"lib.so": "0" * 64}, 1.0))
    assert store.lookup("k") is None


def test_materialize_copies_and_skips_identical(tmp_path):
    store, digest = stored(tmp_path, b"abc")
    dest = tmp_path / "build/m/t/model.so"
    store.materialize(digest, dest)
    assert dest.read_bytes() == b"abc"
    mtime = dest.stat().st_mtime_ns
    store.materialize(digest, dest)
    assert dest.stat().st_mtime_ns == mtime


def test_stats_accumulate_across_runs_and_give_mean_access_time(tmp_path):
    store = Store(tmp_path / ".cache")
    store.add_stats(Stats(hits=3, misses=1, hit_seconds=0.003, miss_seconds=10.0))
    store.add_stats(Stats(hits=1, misses=0, hit_seconds=0.001))
    stats = store.stats()
    assert (stats.hits, stats.misses) == (4, 1)
    assert stats.hit_rate == pytest.approx(0.8)
    assert stats.mean_hit == pytest.approx(0.001)
    assert stats.mean_access == pytest.approx(0.8 * 0.001 + 0.2 * 10.0)


def test_usage_counts_entries_and_bytes(tmp_path):
    store, digest = stored(tmp_path, b"12345")
    store.record("k", ActionResult("s", "n", {"f": digest}, 0.1))
    assert store.usage() == (1, 5)


def test_leftovers_of_killed_writes_are_not_counted_and_are_listed_for_removal(tmp_path):
    store, digest = stored(tmp_path, b"12345")
    store.record("k", ActionResult("s", "n", {"f": digest}, 0.1))
    half = store.object_path(digest).parent / f".{digest}.abc.tmp"
    half.write_bytes(b"123")
    scratch = store.scratch("compile-")
    assert store.usage() == (1, 5)
    assert set(store.leftovers()) == {half, scratch}


READ_ONLY_RUN = """
import sys
from modelbuild.engine.store import Stats, Store
store = Store(sys.argv[1])
assert not store.writable
assert store.lookup("k") is not None
store.add_stats(Stats(hits=1))
store.flush()
print("|".join(store.notes))
"""


def test_a_read_only_cache_serves_hits_and_writes_nothing(tmp_path):
    store, digest = stored(tmp_path)
    store.record("k", ActionResult("s", "n", {"f": digest}, 0.1))
    before = sorted((p, p.stat().st_mtime_ns) for p in store.root.rglob("*"))
    done = run_on_read_only(store.root, [sys.executable, "-c", READ_ONLY_RUN, str(store.root)])
    assert done.returncode == 0, done.stderr
    assert sorted((p, p.stat().st_mtime_ns) for p in store.root.rglob("*")) == before
    assert "hits and misses are not added" in done.stdout and "not memoised" in done.stdout
