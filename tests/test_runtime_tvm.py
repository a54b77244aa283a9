"""modelbuild.runtime with the real TVM: libraries built by modelbuild.build, loaded from their build folder
and called by name, against onnxruntime; the threads TVM runs them on; the README's snippet."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import onnxruntime as ort
import pytest

import modelbuild
from modelbuild.runtime import Library, SignatureError
from tests.helpers.onnx_models import branch_on_rate, two_in_two_out
from tests.helpers.paths import REPO

RECIPE = """
[models.two]
path = "two.onnx"

[models.rate]
path = "rate.onnx"
inputs.sr = { value = 8000, dtype = "int64" }

[targets.cpu]
kind = "llvm"
mcpu = "host"
num-cores = 2

[validation]
enabled = false

[[builds]]
model = "two"
targets = ["cpu"]

[[builds]]
model = "rate"
targets = ["cpu"]
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("runtime")
    two_in_two_out(root / "two.onnx")
    branch_on_rate(root / "rate.onnx")
    (root / "deploy.toml").write_text(RECIPE)
    assert modelbuild.build(root / "deploy.toml").passed
    return root


def test_a_library_is_called_by_name_or_position_and_returns_outputs_by_name(built):
    lib = Library(built / "build/two/cpu")
    zeta, alpha = np.arange(4, dtype=np.float32)[None], np.ones((1, 4), np.float32)
    expected = ort.InferenceSession(str(built / "two.onnx")).run(None, {"zeta": zeta, "alpha": alpha})
    for outputs in (lib(alpha=alpha, zeta=zeta), lib(zeta, alpha)):
        assert list(outputs) == ["z_out", "a_out"]
        np.testing.assert_allclose(outputs["z_out"], expected[0], rtol=1e-6)
        np.testing.assert_allclose(outputs["a_out"], expected[1], rtol=1e-6)
    with pytest.raises(SignatureError, match=r"alpha is float64\[1, 4\]; expected \(zeta: float32\[1, 4\]"):
        lib(zeta, alpha.astype(np.float64))


def test_a_bound_input_is_refused_with_its_value_and_one_output_is_an_array(built):
    lib = Library(built / "build/rate/cpu/model.so")  # the library file finds its manifest beside it
    x = np.full((1, 4), 2.0, np.float32)
    np.testing.assert_allclose(lib(x=x), x * 3)  # sr bound to 8000: the else branch
    with pytest.raises(SignatureError, match=r"bound at build time \(sr = 8000\)"):
        lib(x=x, sr=np.array(16000))


def test_benchmark_gives_p50_and_p99(built):
    timing = Library(built / "build/two/cpu").benchmark(runs=20, min_seconds=0.0)
    assert timing.runs == 20 and 0 < timing.p50_ms <= timing.p99_ms


def test_after_onnxruntime_ran_a_library_runs_on_its_targets_cores_and_loads_nothing_of_the_build(built):
    """TVM sizes its pool at half the cores on x86 where TVM_NUM_THREADS is unset, and a pool never grows:
    the library must set it before TVM makes one, with TVM already imported."""
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        import onnxruntime as ort
        import tvm
        ort.InferenceSession({str(built / "two.onnx")!r}).run(None, {{"zeta": np.ones((1, 4), np.float32),
                                                                      "alpha": np.ones((1, 4), np.float32)}})
        heavy = {{m.split(".")[0] for m in sys.modules}} & {{"onnx", "pydantic", "rich"}}
        from modelbuild.runtime import Library
        lib = Library({str(built / "build/two/cpu")!r})
        lib(np.ones((1, 4), np.float32), np.ones((1, 4), np.float32))
        loaded = {{m.split(".")[0] for m in sys.modules}} & {{"onnx", "pydantic", "rich"}}
        print(lib.threads, tvm.get_global_func("runtime.NumThreads")(), sorted(loaded - heavy))
    """)
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split("\n")[0] == "2 2 []", out.stderr


def test_the_readmes_snippet_runs_the_bundled_classifier(tmp_path):
    """The README's three lines, run as written in a folder where the repository's recipe was built."""
    readme = (REPO / "README.md").read_text()
    snippet = re.search(r"```python\n(.*?Library\(.*?)```", readme, re.S).group(1)
    assert len(snippet.strip().splitlines()) == 3
    modelbuild.build(REPO / "deploy.toml", build_dir=tmp_path / "build", cache_dir=tmp_path / ".cache")
    run = subprocess.run(
        [sys.executable, "-c", snippet + "\nprint(scores.shape)"], cwd=tmp_path, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "(1, 2)"
