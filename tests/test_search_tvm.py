"""`modelbuild search` end to end on a generated model with one sensitive layer: real quantization, real TVM
builds, real validation against onnxruntime."""

from __future__ import annotations

import itertools
import json
import shutil
import textwrap

import onnx

from modelbuild.cli import main
from tests.helpers.onnx_models import spread_inside

# smoothing and bias correction off: they would repair the pointwise conv's int8 input by themselves. Then
# int8 everywhere gives a worst cosine near 0.9986 against fp32, int16 at the depthwise conv 0.9988, and
# int16 at the pointwise conv 0.9999 (onnxruntime's QDQ model on held-out normal inputs)
RECIPE = """
include = {include}

[models.net]
path = "net.onnx"
inputs.x = {{ shape = [1, 8, 16, 16] }}

[targets.cpu]
kind = "llvm"
mcpu = "host"
num-cores = 1

[quantization.int8]
smoothing = false
bias_correction = false
calibration = {{ samples = 4 }}
{sections}
[search.fastest]
precisions = ["int16"]
objective = "size"

[validation]
golden = {{ count = 4 }}
timing = {{ warmup = 1, min_runs = 3, min_seconds = 0.0 }}
gates = {{ min_cosine = 0.9995 }}
{builds}"""

SEARCHED = """
[[builds]]
model = "net"
targets = ["cpu"]
quantization = "int8"
search = "fastest"
"""


def write(root, *, sections: str = "", builds: str = SEARCHED, include: list[str] = ()) -> None:
    root.mkdir(exist_ok=True)
    onnx.save(spread_inside(root / "net.onnx"), str(root / "net.onnx"))
    (root / "deploy.toml").write_text(
        textwrap.dedent(RECIPE.format(include=json.dumps(list(include)), sections=sections, builds=builds))
    )


def test_search_raises_only_the_sensitive_layer_as_a_sweep_of_every_subset_would(tmp_path, capsys):
    write(tmp_path)
    code = main(["search", "net+int8@cpu", "-f", str(tmp_path / "deploy.toml"), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0, result
    chosen = next(c for c in result["candidates"] if c["section"] == result["chosen"])
    assert (chosen["precision"], chosen["raised"]) == ("int16", ["pointwise"])
    rejected = result["candidates"][0]
    assert rejected["raised"] == [] and "min_cosine" in rejected["rejected_because"]
    searched = len(result["candidates"])
    reports = {
        b["name"]: b for b in json.loads((tmp_path / "build/search/net+int8@cpu/report.json").read_text())["builds"]
    }
    ranked = ["sensitivity" in reports[f"net+{c['section']}@cpu"]["quantization"] for c in result["candidates"]]
    assert ranked == [True] + [False] * (searched - 1)  # only the first candidate's ranking is read
    assert all(c["stages_run"] > 0 for c in result["candidates"])
    assert main(["search", "net+int8@cpu", "-f", str(tmp_path / "deploy.toml"), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)  # a finished search costs nothing the second time
    assert again["chosen"] == result["chosen"] and [c["stages_run"] for c in again["candidates"]] == [0] * searched

    # the sweep: every subset of the two layers in int16, built as a user would write them
    subsets = [list(s) for k in range(3) for s in itertools.combinations(["depthwise", "pointwise"], k)]
    sections = "".join(
        f"\n[quantization.s{i}]\nsmoothing = false\nbias_correction = false\n"
        f"calibration = {{ samples = 4 }}\nint16_nodes = {json.dumps(s)}\n"
        for i, s in enumerate(subsets)
    )
    builds = "".join(
        f'\n[[builds]]\nmodel = "net"\ntargets = ["cpu"]\nquantization = "s{i}"\n' for i in range(len(subsets))
    )
    write(tmp_path, sections=sections, builds=builds)
    main(["build", "-f", str(tmp_path / "deploy.toml"), "--keep-going", "--json"])
    capsys.readouterr()
    report = json.loads((tmp_path / "build/report.json").read_text())
    passing = [b for b in report["builds"] if b["passed"]]
    smallest = min(passing, key=lambda b: b["artifact_bytes"])
    assert subsets[int(smallest["name"].split("+s")[1].split("@")[0])] == ["pointwise"]
    assert searched < len(subsets)

    # the chosen configuration, built from the snippet in a fresh folder and store, gives the same library
    snippet = tmp_path / "build/search/net+int8@cpu/int8-searched.toml"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy(snippet, fresh / "searched.toml")
    write(
        fresh,
        include=["searched.toml"],
        builds='\n[[builds]]\nmodel = "net"\ntargets = ["cpu"]\nquantization = "int8-searched"\n',
    )
    assert main(["build", "-f", str(fresh / "deploy.toml"), "--json"]) == 0
    capsys.readouterr()
    library = tmp_path / f"build/search/net+int8@cpu/net+{result['chosen']}/cpu/model.so"
    assert (fresh / "build/net+int8-searched/cpu/model.so").read_bytes() == library.read_bytes()
    assert 'int16_nodes = ["pointwise"]' in snippet.read_text()


def test_a_search_whose_quantization_does_not_build_stops_with_that_error(tmp_path, capsys):
    write(tmp_path)
    recipe = tmp_path / "deploy.toml"
    recipe.write_text(
        recipe.read_text().replace(
            "bias_correction = false\n", 'bias_correction = false\nexclude_nodes = ["nope"]\n', 1
        )
    )
    code = main(["search", "net+int8@cpu", "-f", str(recipe)])
    out, err = capsys.readouterr()
    assert code == 3 and len(err.strip().splitlines()) == 1
    assert "the search cannot go on: quantize:net+int8-" in err and "exclude_nodes: no node named 'nope'" in err
    assert not (tmp_path / "build/search/net+int8@cpu/search.json").exists()
