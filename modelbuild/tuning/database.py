"""Tuning databases as files: MetaSchedule's JSON database format, merged, exported and imported without TVM.

A database folder holds `database_workload.json` (one `[structural hash, module]` line per workload),
`database_tuning_record.json` (one `[workload line index, record]` line per measured candidate),
`trials.json` (how many trials each workload has had, so tuning continues rather than restarts),
`defaults.json` (each workload's time under modelbuild's default schedule, by modelbuild version: a tuned
record is applied only where it beats it, and keeping the time here makes every clone choose alike) and
`target.json`. The store keeps one folder per target under .cache/tuning/: a record measured for one model is
found by every other model that has the same workload.
"""

from __future__ import annotations

import fcntl
import json
from contextlib import contextmanager
from pathlib import Path

from modelbuild.errors import ModelbuildError
from modelbuild.fsutil import write_atomic
from modelbuild.hashing import digest_of

WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"
TRIALS = "trials.json"
DEFAULTS = "defaults.json"
TARGET = "target.json"
EXPORT_FORMAT = "modelbuild.tuning/1"


def folder_for(root: Path, target: dict) -> Path:
    """The database folder of one target (resolved target JSON) under the store's tuning root."""
    return Path(root) / digest_of(target)[:16]


@contextmanager
def locked(folder: Path):
    """Hold the folder's lock: one process at a time tunes into or merges a database."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _lines(path: Path) -> list[list]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read(folder: Path) -> dict:
    """A database as data: target, workloads [[shash, module]], records [[workload index, record]], trials."""

    def load(name, empty):
        return json.loads((folder / name).read_text()) if (folder / name).exists() else empty

    return {
        "target": load(TARGET, None),
        "workloads": _lines(folder / WORKLOADS),
        "records": _lines(folder / RECORDS),
        "trials": load(TRIALS, {}),
        "defaults": load(DEFAULTS, {}),
    }


def write(folder: Path, data: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in ((WORKLOADS, data["workloads"]), (RECORDS, data["records"])):
        write_atomic(folder / name, "".join(json.dumps(row) + "\n" for row in rows).encode())
    write_atomic(folder / TRIALS, json.dumps(data["trials"], sort_keys=True).encode())
    write_atomic(folder / DEFAULTS, json.dumps(data.get("defaults", {}), sort_keys=True).encode())
    if data.get("target") is not None:
        write_atomic(folder / TARGET, json.dumps(data["target"], sort_keys=True).encode())


def merge(into: dict, other: dict) -> dict:
    """`into` with every workload and record of `other` it lacks; trial counts take the larger."""
    workloads = [list(w) for w in into["workloads"]]
    index = {w[0]: i for i, w in enumerate(workloads)}
    seen = {json.dumps([workloads[i][0], r], sort_keys=True) for i, r in into["records"]}
    records = [list(r) for r in into["records"]]
    for shash, module in other["workloads"]:
        if shash not in index:
            index[shash] = len(workloads)
            workloads.append([shash, module])
    for i, record in other["records"]:
        shash = other["workloads"][i][0]
        fingerprint = json.dumps([shash, record], sort_keys=True)
        if fingerprint not in seen:
            seen.add(fingerprint)
            records.append([index[shash], record])
    trials = dict(into["trials"])
    for shash, count in other["trials"].items():
        trials[shash] = max(count, trials.get(shash, 0))
    defaults = {**other.get("defaults", {}), **into.get("defaults", {})}  # a time measured here wins
    return {
        "target": into.get("target") or other.get("target"),
        "workloads": workloads,
        "records": records,
        "trials": trials,
        "defaults": defaults,
    }


def export_all(root: Path) -> dict:
    """Every target's database under a tuning root, as one file a team can commit."""
    folders = sorted(p for p in Path(root).glob("*") if (p / WORKLOADS).exists()) if Path(root).exists() else []
    return {"format": EXPORT_FORMAT, "databases": [_recorded_workloads_only(read(folder)) for folder in folders]}


def _recorded_workloads_only(data: dict) -> dict:
    """The database without the workloads that have no record. The tune stage registers every task of a
    model (its default time is kept by workload hash, which needs no module), so most workloads of a
    partly tuned model have none: dropping them took one export from 13 MB to about 2."""
    used = sorted({i for i, _ in data["records"]})
    index = {old: new for new, old in enumerate(used)}
    return {
        **data,
        "workloads": [data["workloads"][i] for i in used],
        "records": [[index[i], record] for i, record in data["records"]],
    }


def import_all(root: Path, exported: dict) -> int:
    """Merge an exported file into the tuning root; returns the number of records now known."""
    if exported.get("format") != EXPORT_FORMAT:
        raise ModelbuildError(
            f"not a modelbuild tuning export (format {exported.get('format')!r}, expected {EXPORT_FORMAT!r})"
        )
    total = 0
    for database in exported["databases"]:
        if database.get("target") is None:
            raise ModelbuildError("a database in the export names no target; export it again with modelbuild")
        folder = folder_for(root, database["target"])
        with locked(folder):
            merged = merge(read(folder), database)
            write(folder, merged)
        total += len(merged["records"])
    return total


def format_export(exported: dict) -> str:
    """The export as text with one workload or record per line, so committed records diff line by line."""

    def rows(items: list) -> str:
        return ",\n".join("    " + json.dumps(item, sort_keys=True) for item in items)

    databases = []
    for db in exported["databases"]:
        databases.append(
            "  {\n"
            f'   "target": {json.dumps(db["target"], sort_keys=True)},\n'
            f'   "trials": {json.dumps(db["trials"], sort_keys=True)},\n'
            f'   "defaults": {json.dumps(db.get("defaults", {}), sort_keys=True)},\n'
            f'   "workloads": [\n{rows(db["workloads"])}\n   ],\n'
            f'   "records": [\n{rows(db["records"])}\n   ]\n'
            "  }"
        )
    return f'{{\n "format": "{exported["format"]}",\n "databases": [\n' + ",\n".join(databases) + "\n ]\n}\n"
