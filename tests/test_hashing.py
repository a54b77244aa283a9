import os

from modelbuild import hashing
from modelbuild.hashing import FileDigests, canonical_json, digest_of


def test_canonical_json_ignores_key_order():
    assert canonical_json({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert digest_of({"a": 1, "b": 2}) == digest_of({"b": 2, "a": 1})


def test_file_digest_is_memoised_until_the_file_changes(tmp_path, monkeypatch):
    reads = []
    real = hashing.sha256_file
    monkeypatch.setattr(hashing, "sha256_file", lambda p: reads.append(p) or real(p))
    f = tmp_path / "model.onnx"
    f.write_bytes(b"weights")
    memo = tmp_path / "memo.json"
    first = FileDigests(memo)
    d1 = first.digest(f)
    first.save()
    assert FileDigests(memo).digest(f) == d1 and len(reads) == 1  # a new process trusts the memo
    os.utime(f, ns=(1, 1))
    assert FileDigests(memo).digest(f) == d1 and len(reads) == 2  # touched: re-read, same digest
    f.write_bytes(b"other weights")
    assert FileDigests(memo).digest(f) != d1


def test_a_damaged_memo_costs_a_rehash_not_a_wrong_digest(tmp_path):
    f = tmp_path / "x"
    f.write_bytes(b"x")
    memo = tmp_path / "memo.json"
    memo.write_text("{not json")
    assert FileDigests(memo).digest(f) == hashing.sha256_file(f)
