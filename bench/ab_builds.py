"""A schedule change measured call by call: each zoo model's library before and after it, in one process.

`bench/zoo.py` keeps every build in bench/.zoo/cache, so after a change to the compiler the cache holds the
model's compile before the change and after it. This script loads the latest two (or the latest and one
`--back` builds earlier) and times them in alternating blocks on the same random input (zoo.alternate: the
ratio is immune to the machine's drift, which moved whole zoo runs by 10-60%), and says whether the two
libraries are the same file and whether their outputs are bit-identical.

Usage: python bench/zoo.py [--int8] --only NAME ... (after the change), then
       python bench/ab_builds.py NAME ... [--int8] [--back 1] [--seconds 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zoo  # noqa: E402


def compiled_libraries(cache: Path, name: str, int8: bool = False) -> list[Path]:
    """The model's compiled libraries in the zoo's cache (its int8 build's: `bench/zoo.py --int8`), oldest
    first."""
    node = f"compile:{name}+{name}_int8@cpu" if int8 else f"compile:{name}@cpu"
    found = []
    for action in cache.glob("actions/*/*.json"):
        record = json.loads(action.read_text())
        if record.get("node") == node:
            digest = record["outputs"]["model.so"]
            found.append((record.get("created", 0), cache / "objects" / digest[:2] / digest))
    return [path for _, path in sorted(found)]


def compare(model: zoo.ZooModel, before: Path, after: Path, seconds: float) -> dict:
    """Median latency of each library and whether their outputs are bit-identical, on one random input."""
    import numpy as np
    import tvm
    from tvm import relax

    names = [n for n in model.inputs if n not in model.bound]  # the library's arguments, in the model's order
    arrays = [tvm.runtime.tensor(a) for a in zoo.random_inputs(model, names)]
    runs, outputs = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, library in (("before", before), ("after", after)):
            loadable = Path(tmp) / f"{label}.so"  # the store's objects have no suffix, which load_module needs
            shutil.copy(library, loadable)
            main = relax.VirtualMachine(tvm.runtime.load_module(str(loadable)), tvm.cpu())["main"]
            result = main(*arrays)
            outputs[label] = [r.numpy() for r in ([result] if hasattr(result, "numpy") else result)]
            runs[label] = lambda main=main: main(*arrays)
        medians = zoo.alternate(runs, seconds)
    identical = all(np.array_equal(a, b) for a, b in zip(outputs["before"], outputs["after"]))
    return {"before_ms": medians["before"] * 1e3, "after_ms": medians["after"] * 1e3, "identical": identical}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", help="zoo model names")
    parser.add_argument("--back", type=int, default=1, help="compare with the build this many before the latest")
    parser.add_argument("--seconds", type=float, default=2.0, help="timing per library, in alternating blocks")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--int8", action="store_true", help="the models' int8 builds (bench/zoo.py --int8)")
    args = parser.parse_args()
    os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))  # read when TVM's thread pool starts
    zoo.print_core_distance()
    print("| model | before ms | after ms | after / before | same library | outputs |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in args.names:
        model = next((m for m in zoo.ZOO if m.name == name), None)
        libraries = compiled_libraries(zoo.CACHE / "cache", name, args.int8)
        if model is None or len(libraries) <= args.back:
            print(f"| {name} | no {'such zoo model' if model is None else f'{args.back + 1} builds in the cache'} |")
            continue
        before, after = libraries[-1 - args.back], libraries[-1]
        row = compare(model, before, after, args.seconds)
        same = "yes" if before.read_bytes() == after.read_bytes() else "no"
        print(
            f"| {name} | {row['before_ms']:.3f} | {row['after_ms']:.3f} | {row['after_ms'] / row['before_ms']:.3f}x "
            f"| {same} | {'bit-identical' if row['identical'] else 'differ'} |",
            flush=True,
        )
    zoo.print_core_distance()
    return 0


if __name__ == "__main__":
    sys.exit(main())
