"""A model's signature: its inputs and outputs with shapes and dtypes, in the model's graph order.

The import stage writes it (signature.json) and every stage that feeds or reads the model goes by it. The
order is the order the compiled library takes its arguments and returns its results, so it is kept as lists:
a JSON object would invite sorting its keys, which paired a model's outputs with the wrong reference arrays.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

FILE = "signature.json"


@dataclass(frozen=True)
class Signature:
    # name -> {"shape": [...], "dtype": "float32"}, in graph order; an input may add "range": [low, high), and
    # an output "features": true where it is an embedding (normalised pooled features), not scores per class
    inputs: dict[str, dict]
    outputs: dict[str, dict]
    # inputs the recipe bound to a constant: name -> {"dtype", "value"}; not arguments of the library, but the
    # original model (which the reference runs) still takes them
    bound: dict[str, dict] = field(default_factory=dict)

    def to_json(self) -> str:
        data = {"inputs": _listed(self.inputs), "outputs": _listed(self.outputs)}
        if self.bound:
            data["bound"] = [{"name": name, **spec} for name, spec in self.bound.items()]
        return json.dumps(data, indent=1)


def _listed(tensors: dict[str, dict]) -> list[dict]:
    return [{"name": name, **spec} for name, spec in tensors.items()]


def read(path: Path) -> Signature:
    return from_json(json.loads(Path(path).read_text()))


def from_json(data: dict) -> Signature:
    """The signature of its JSON form (what to_json writes, as parsed JSON)."""
    sides = {
        side: {t["name"]: {k: v for k, v in t.items() if k != "name"} for t in data.get(side, [])}
        for side in ("inputs", "outputs", "bound")
    }
    return Signature(**sides)
