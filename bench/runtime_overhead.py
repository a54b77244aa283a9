"""What modelbuild.runtime.Library adds to a call over TVM's raw VM call.

Builds a model of one Add ([1, 16] floats: the call is the overhead), then times, in alternating blocks in
one process, the raw call (`vm["main"](tvm.runtime.tensor(x)).numpy()`, what a program would write by hand)
and `Library(folder)(x=x)` (which also checks the input against the signature). Prints both medians and
the difference per call (goal: under 5 us).

Usage: python bench/runtime_overhead.py [--seconds S]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
import zoo  # noqa: E402  (its alternating timer)


def add_model(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    one = numpy_helper.from_array(np.ones((1, 16), np.float32), "one")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])],
        "add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [one],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


RECIPE = """
[models.add]
path = "add.onnx"

[targets.cpu]
kind = "llvm"
mcpu = "host"
num-cores = 1

[validation]
enabled = false

[[builds]]
model = "add"
targets = ["cpu"]
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds of each call")
    args = parser.parse_args()
    import modelbuild
    from modelbuild.runtime import Library

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        add_model(root / "add.onnx")
        (root / "deploy.toml").write_text(RECIPE)
        modelbuild.build(root / "deploy.toml")
        folder = root / "build/add/cpu"
        lib = Library(folder)

        import tvm
        from tvm import relax

        main_fn = relax.VirtualMachine(tvm.runtime.load_module(str(folder / "model.so")), tvm.cpu())["main"]
        x = np.zeros((1, 16), np.float32)
        np.testing.assert_array_equal(lib(x=x), main_fn(tvm.runtime.tensor(x)).numpy())
        medians = zoo.alternate(
            {"raw": lambda: main_fn(tvm.runtime.tensor(x)).numpy(), "library": lambda: lib(x=x)}, args.seconds, 0.05
        )
    raw, wrapped = medians["raw"] * 1e6, medians["library"] * 1e6
    print(f"raw VM call: median {raw:.2f} us; Library call: median {wrapped:.2f} us")
    print(f"summary: the wrapper adds {wrapped - raw:.2f} us a call ({wrapped / raw:.2f}x)   (goal < 5 us)")


if __name__ == "__main__":
    main()
