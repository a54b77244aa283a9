"""The direction of imports between the package's layers, read from the sources with Python's parser.

One folder is one layer; a module may import its own layer, the layers listed for it here, and the shared
modules every layer uses. Imports under `if TYPE_CHECKING:` are annotations only and not counted.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import modelbuild
from tests.helpers.paths import REPO

PACKAGE = Path(modelbuild.__file__).parent  # the package as imported: the source tree, or an installed wheel

# used by every layer: errors, file and code digests, atomic writes, tool versions, a model's signature, a
# library's manifest, progress lines, and the package itself (its version)
SHARED = {"errors", "fsutil", "hashing", "sources", "versions", "signature", "manifest", "progress", ""}

# layer -> the other layers (or single modules) it may import
ALLOWED = {
    "engine": set(),  # never names a stage or a recipe: the plan it runs carries its stages
    "host": set(),  # probes of this machine: its CPU quota, GPUs, NVRTC
    "recipe": {"host"},  # a cuda target's architecture defaults to the GPU here
    "validation": set(),
    "compiler": set(),
    "frontend": set(),  # ONNX graph rewrites before import
    "quantization": {"validation"},
    # tuning databases are named by target; a model file is digested with the external data it names
    # and the stages' output files are named where the stages write them (stages.files)
    "pipeline": {"engine", "recipe", "host", "compiler.tuning_db", "frontend.external_data", "stages.files"},
    "tuning": set(),  # MetaSchedule's builder and candidate timing, driven by the tune stage
    # the validate stage's measuring script and the RPC device client: they run libraries, and time them
    "measurement": {"compiler", "host", "recipe.targets", "validation"},
    # adapters: params in (typed by recipe.params), calls out
    "stages": {
        "compiler",
        "quantization",
        "validation",
        "recipe.targets",
        "recipe.params",
        "recipe.schema",
        "frontend",
        "host",
        "tuning",
        "measurement",
    },
    "reports": {"engine", "pipeline", "recipe", "validation", "stages.files"},
    # a search builds candidates as a build does and reads their reports
    "search": {"engine", "pipeline", "recipe", "reports", "validation"},
}
# third-party packages a layer must never import
FORBIDDEN = {
    "engine": {"tvm", "onnx", "onnxruntime", "numpy", "pydantic"},
    "host": {"tvm", "onnx", "onnxruntime", "numpy", "pydantic"},
    "tuning": {"onnx", "onnxruntime"},
    "measurement": {"onnx", "onnxruntime"},
    "recipe": {"tvm", "onnx", "onnxruntime", "numpy"},
    "pipeline": {"tvm", "onnx", "onnxruntime", "numpy"},
    "compiler": {"onnxruntime", "onnx"},
    "quantization": {"tvm"},
    "frontend": {"tvm", "onnxruntime"},
    "validation": {"tvm", "onnxruntime"},
    "reports": {"tvm", "onnx", "onnxruntime"},
    "search": {"tvm", "onnx", "onnxruntime", "numpy"},
}


def layer_of(module: str) -> str:
    """'modelbuild.compiler.kernels.vnni_conv' -> 'compiler'; a top-level module is its own name."""
    parts = module.split(".")[1:]
    return parts[0] if parts else ""


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a source file, at any depth, outside `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found += [
                (node.lineno, f"{node.module}.{alias.name}")
                if node.module == "modelbuild"
                else (node.lineno, node.module)
                for alias in node.names
            ]
    return found


def violations(folder: Path, layer: str) -> list[str]:
    out = []
    allowed = ALLOWED[layer]
    for path in sorted(folder.rglob("*.py")):
        for line, module in imports(path):
            where = f"{path.relative_to(folder.parent)}:{line} imports {module}"
            top = module.split(".")[0]
            if top in FORBIDDEN.get(layer, ()):
                out.append(f"{where}: {layer}/ never imports {top}")
            if top != "modelbuild":
                continue
            target = layer_of(module)
            inner = ".".join(module.split(".")[1:3])
            if target in (layer, *SHARED) or target in allowed or inner in allowed:
                continue
            out.append(f"{where}: {layer}/ may import only {', '.join(sorted(allowed)) or 'itself'} and shared modules")
    return out


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_each_layer_imports_only_the_layers_below_it(layer):
    assert violations(PACKAGE / layer, layer) == []


def test_the_rule_catches_a_broken_import(tmp_path):
    """Shown once: the build core reaching up into the pipeline, and the compiler importing onnxruntime."""
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "bad.py").write_text("from modelbuild.pipeline.registry import STAGES\n")
    (tmp_path / "compiler").mkdir()
    (tmp_path / "compiler" / "bad.py").write_text("def f():\n    import onnxruntime\n")
    assert violations(tmp_path / "engine", "engine") == [
        "engine/bad.py:1 imports modelbuild.pipeline.registry: engine/ may import only itself and shared modules"
    ]
    assert violations(tmp_path / "compiler", "compiler") == [
        "compiler/bad.py:2 imports onnxruntime: compiler/ never imports onnxruntime"
    ]


def test_package_init_files_hold_only_their_docstring():
    """A package's __init__ is left out of stage code digests (modelbuild.sources), so it must hold no code."""
    for path in PACKAGE.rglob("__init__.py"):
        body = ast.parse(path.read_text()).body
        code = [n for n in body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        if path.parent == PACKAGE:
            continue  # modelbuild/__init__.py: the version, which enters every key through the tool versions
        if path.parent.name in ("recipe", "reports", "cli"):  # re-exports of the layer's entry points, nothing else
            assert all(isinstance(n, (ast.ImportFrom, ast.Assign)) for n in code), path
        else:
            assert code == [], path


def test_only_the_command_line_prints():
    printers = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                printers.append(str(path.relative_to(PACKAGE)))
    assert printers and all(p.startswith("cli/") for p in printers), sorted(set(printers))


def design_table_imports() -> dict[str, set[str]]:
    """Each folder's row of docs/design.md's layer table -> the layers and modules its last column says it
    may import ("shared only" is none; the CLI's "everything" is left out)."""
    rows = {}
    for line in (REPO / "docs" / "design.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) < 5 or not re.fullmatch(r"`\w+/`", cells[1]):
            continue
        allowed = re.split(r"[;:]", cells[3])[0].strip()
        if allowed != "everything":
            rows[cells[1].strip("`/")] = set() if allowed == "shared only" else set(allowed.split(", "))
    return rows


def test_the_design_documents_layer_table_says_what_the_import_rules_allow():
    assert design_table_imports() == ALLOWED
