"""Validated recipes kept as plain data, so a build whose recipe did not change skips pydantic.

Importing pydantic and building the schema's classes costs about 0.18 s, most of a no-op build. The first
load of a recipe validates it with pydantic and writes a snapshot: every table with its values after
validation (defaults filled in, numbers coerced) and the fields the recipe set. A later load of the same
bytes, under the same schema code, reads the snapshot back as `Table`s, which answer the attribute reads
and the three pydantic methods modelbuild calls, and dump to the same data, so every cache key is the same
whichever path loaded the recipe (tests/test_recipe.py checks this on every shipped recipe).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from modelbuild.fsutil import write_atomic

TABLE, FIELDS_SET = "$table", "$set"


class Table:
    """One validated table read back from a snapshot."""

    __slots__ = ("_values", "_fields_set")

    def __init__(self, values: dict[str, Any], fields_set: frozenset[str]) -> None:
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_fields_set", fields_set)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a recipe table is frozen")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Table) and self._values == other._values

    @property
    def model_fields_set(self) -> frozenset[str]:
        return self._fields_set

    def model_dump(self, *, exclude: set | dict | None = None) -> dict[str, Any]:
        """Plain data, nested tables included; `exclude` as pydantic takes it ({"path"}, {"calibration": {"path"}})."""
        out = {}
        for name, value in self._values.items():
            nested = exclude.get(name) if isinstance(exclude, dict) else None
            if exclude and name in exclude and not isinstance(nested, (set, dict)):
                continue  # excluded whole: listed in a set, or mapped to True
            out[name] = value.model_dump(exclude=nested) if isinstance(value, Table) else _plain(value)
        return out

    def model_copy(self, *, update: dict[str, Any]) -> Table:
        return Table({**self._values, **update}, self._fields_set | frozenset(update))


def _plain(value: Any) -> Any:
    if isinstance(value, Table):
        return value.model_dump()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def snapshot_key(data: dict, code: list[Path]) -> str:
    """The snapshot of this recipe data under this schema code (the recipe package's sources)."""
    h = hashlib.sha256(json.dumps(data, sort_keys=True, default=repr).encode())
    for path in code:
        h.update(path.read_bytes())
    return h.hexdigest()


def freeze(value: Any) -> Any:
    """A validated pydantic model as JSON data that `thaw` turns into Tables."""
    if hasattr(value, "model_fields_set"):
        return {
            TABLE: {name: freeze(getattr(value, name)) for name in type(value).model_fields},
            FIELDS_SET: sorted(value.model_fields_set),
        }
    if isinstance(value, dict):
        return {k: freeze(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [freeze(v) for v in value]
    return value


def thaw(data: Any) -> Any:
    if isinstance(data, dict):
        if TABLE in data:
            return Table({k: thaw(v) for k, v in data[TABLE].items()}, frozenset(data[FIELDS_SET]))
        return {k: thaw(v) for k, v in data.items()}
    if isinstance(data, list):
        return [thaw(v) for v in data]
    return data


def read(folder: Path, key: str) -> Table | None:
    try:
        return thaw(json.loads((folder / f"{key}.json").read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write(folder: Path, key: str, spec: Any) -> None:
    """Keep the snapshot; a read-only or full cache only means the next load validates again."""
    try:
        write_atomic(folder / f"{key}.json", json.dumps(freeze(spec)).encode())
    except OSError:
        pass
