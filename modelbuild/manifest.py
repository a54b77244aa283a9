"""A built library's description of itself: library.json, published beside model.so.

It holds what a program needs to load and call the library without the recipe: the library's file, the
target it was compiled for (and the devices it is split between), the threads that target runs on, the TVM
runtime it needs, and its signature (inputs in argument order, outputs in result order, inputs bound to
constants). The compile stage writes
it; modelbuild.runtime reads it. It imports nothing beyond the standard library, so neither side pays for
the other's dependencies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from modelbuild.signature import Signature, from_json

FILE = "library.json"
FORMAT = "modelbuild.library/1"


@dataclass(frozen=True)
class Manifest:
    library: str  # the library's file name, beside library.json
    target: dict  # the TVM target JSON it was compiled for
    threads: int  # the target's num-cores: what the library is meant to run on
    runtime: dict[str, str]  # package -> version the library needs at run time (the TVM that compiled it)
    signature: Signature
    devices: tuple[str, ...] = ()  # a heterogeneous library's TVM device kinds, in the VM's order

    def to_json(self) -> str:
        data = {
            "format": FORMAT,
            "library": self.library,
            "target": self.target,
            "threads": self.threads,
            "runtime": self.runtime,
            "signature": json.loads(self.signature.to_json()),
            **({"devices": list(self.devices)} if self.devices else {}),
        }
        return json.dumps(data, indent=1, sort_keys=False)


def describe(
    *, library: str, target: dict, runtime: dict[str, str], signature: Signature, devices: list[str] | None = None
) -> Manifest:
    """The manifest of a library compiled for `target` (and `devices`, where it is split between them): its
    threads are the target's num-cores (one where the target does not say)."""
    return Manifest(library, target, int(target.get("num-cores") or 1), runtime, signature, tuple(devices or ()))


def read(path: Path) -> Manifest:
    """The manifest at `path` (a library.json, or the folder holding one); ValueError names what is wrong."""
    path = Path(path)
    file = path / FILE if path.is_dir() else path
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise ValueError(f"{file}: no such file; build the model first (`modelbuild`)") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{file}: not JSON ({err.msg} at line {err.lineno}); build the model again") from None
    if data.get("format") != FORMAT:
        raise ValueError(f"{file}: format {data.get('format')!r}, where this modelbuild reads {FORMAT!r}")
    signature = from_json(data["signature"])
    devices = tuple(data.get("devices", ()))
    return Manifest(data["library"], data["target"], int(data["threads"]), data["runtime"], signature, devices)
