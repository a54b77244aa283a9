from __future__ import annotations

import pytest

from modelbuild.build.store import ActionResult, Stats, Store


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


def test_an_entry_whose_object_is_damaged_or_gone_does_not_count(tmp_path):
    store, digest = stored(tmp_path)
    store.record("k", ActionResult("compile", "n", {"lib.so": digest}, 1.0))
    store.object_path(digest).write_bytes(b"tampered")
    assert store.lookup("k") is None
    store.object_path(digest).unlink()
    assert store.lookup("k") is None


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
