"""A model's signature: its inputs and outputs with shapes and dtypes, in the model's graph order.

The import stage writes it (signature.json) and every stage that feeds or reads the model goes by it. The
order is the order the compiled library takes its arguments and returns its results, so it is kept as lists:
a JSON object would invite sorting its keys, which paired a model's outputs with the wrong reference arrays.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

FILE = "signature.json"


@dataclass(frozen=True)
class Signature:
    inputs: dict[str, dict]  # name -> {"shape": [...], "dtype": "float32"}, in graph order
    outputs: dict[str, dict]

    def to_json(self) -> str:
        return json.dumps({"inputs": _listed(self.inputs), "outputs": _listed(self.outputs)}, indent=1)


def _listed(tensors: dict[str, dict]) -> list[dict]:
    return [{"name": name, "shape": spec["shape"], "dtype": spec["dtype"]} for name, spec in tensors.items()]


def read(path: Path) -> Signature:
    data = json.loads(Path(path).read_text())
    return Signature(**{side: {t["name"]: {"shape": t["shape"], "dtype": t["dtype"]} for t in data[side]}
                        for side in ("inputs", "outputs")})
