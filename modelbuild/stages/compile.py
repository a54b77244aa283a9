"""The compile stage: Relax IRModule -> tvm.compile for the target -> exported library."""

from __future__ import annotations

from pathlib import Path

from modelbuild.errors import StageError


def run(*, inputs: dict[str, Path], params: dict, out: Path) -> None:
    """Write the library named by params['library'] (model.so, or model.tar of objects when cross-compiling
    with no cross compiler)."""
    import tvm

    module = tvm.ir.load_json(inputs["ir"].read_text())
    try:
        target = tvm.target.Target(params["target"])
    except Exception as err:
        raise StageError(f"TVM rejects the target {params['target']}: {err}") from err
    try:
        with tvm.transform.PassContext(opt_level=params.get("opt_level", 3)):
            executable = tvm.compile(module, target=target)
    except Exception as err:
        raise StageError(f"tvm.compile failed for {params['target']}: {_last_line(err)}") from err
    _export(executable, out / params["library"], params.get("cross_compiler"))


def _export(executable, path: Path, cross_compiler: str | None) -> None:
    if cross_compiler:
        from tvm.support import cc

        executable.export_library(str(path), fcompile=cc.cross_compiler(cross_compiler))
    else:
        executable.export_library(str(path))


def _last_line(err: Exception) -> str:
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__
