"""The direction of imports between the package's layers, read from the sources with Python's parser.

One folder is one layer; a module may import its own layer, the layers listed for it here, and the shared
modules every layer uses. Imports under `if TYPE_CHECKING:` are annotations only and not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import modelbuild
from tests.helpers.layer_rules import ALLOWED, FORBIDDEN, HOLDS, SHARED

PACKAGE = Path(modelbuild.__file__).parent  # the package as imported: the source tree, or an installed wheel


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


def test_every_layer_is_described_and_every_folder_is_a_layer():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name not in ("cli", "__pycache__")}
    assert folders == set(HOLDS) == set(ALLOWED)


def test_no_layer_holds_more_than_a_third_of_the_package():
    lines = {layer: _lines(PACKAGE / layer) for layer in ALLOWED}
    total = _lines(PACKAGE)
    assert {layer: n for layer, n in lines.items() if n > total / 3} == {}


def _lines(folder: Path) -> int:
    return sum(len(path.read_text().splitlines()) for path in folder.rglob("*.py"))
