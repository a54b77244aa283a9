"""The compile stage: Relax IRModule -> the CPU pipeline in phases -> tvm.compile -> exported library.

Besides the library it writes analysis.json (fusion and memory figures) and the IR before fusion, after
fusion and after memory planning, all read off the same lowering: the figures cost no extra compile and
are cached with the library.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager, nullcontext
from pathlib import Path

from modelbuild import manifest, signature
from modelbuild.compiler import analysis, lowering
from modelbuild.errors import StageError, last_line
from modelbuild.gpu import cuda_kernels, heterogeneous
from modelbuild.recipe.params import CompileOptions, CompileParams
from modelbuild.stages import contracts
from modelbuild.stages.contracts import Role
from modelbuild.tuning import database as tuning_db
from modelbuild.versions import tool_version

# The VM's instructions (allocations, kernel calls) compiled to native code rather than interpreted from
# bytecode: the int8 classifier 0.369 -> 0.347 ms, the fp32 one 0.831 -> 0.819 ms (30 alternating rounds),
# outputs bit-identical. tvm.compile has no such option; relax.build is what it calls.
EXEC_MODE = "compiled"
IR_FILES = {"ir_before_fusion.py": "legalized", "ir_after_fusion.py": "fused", "ir_planned.py": "planned"}


def run(*, inputs: dict[str, Path], params: dict, out: Path) -> None:
    """Write params['library'] (model.so, or model.tar of objects when cross-compiling with no cross
    compiler), its manifest (library.json), analysis.json and the IR texts."""
    import tvm

    p: CompileParams = contracts.read_params(contracts.COMPILE, params)
    module = tvm.ir.load_json(inputs[Role.IR].read_text())
    target = _target(p.target)
    placement = None
    try:
        with target, tvm.transform.PassContext(opt_level=p.options.opt_level):
            if p.devices:
                (executable, placement), phases = _build_split(module, p.target, p.cuda_compiler), None
            else:
                executable, phases = _build(module, target, p.options, inputs.get(Role.TUNING), p.cuda_compiler)
    except StageError:
        raise
    except Exception as err:
        raise StageError(f"tvm.compile failed for {p.target}: {last_line(err)}") from err
    export(executable, out / p.library, p.cross_compiler)
    described = manifest.describe(
        library=p.library,
        target=p.target,
        runtime={"apache-tvm": tool_version("tvm")},
        signature=signature.read(inputs[Role.SIGNATURE]),
        devices=placement["vm_devices"] if placement else None,
    )
    (out / manifest.FILE).write_text(described.to_json())
    figures = _figures(phases) | ({"placement": placement} if placement else {})
    (out / contracts.ANALYSIS).write_text(json.dumps(figures, indent=1, sort_keys=True))
    for name, phase in IR_FILES.items() if phases is not None else ():  # a GPU target's pipeline is TVM's own
        (out / name).write_text(getattr(phases, phase).script(show_meta=False))


def _target(spec: dict):
    import tvm

    try:
        return tvm.target.Target(spec)
    except Exception as err:
        raise StageError(f"TVM rejects the target {spec}: {last_line(err)}") from err


def _build(module, target, options: CompileOptions, records: Path | None, cuda_compiler: dict | None = None):
    import tvm

    if target.kind.name != "llvm":  # the phased pipeline mirrors the CPU one; other kinds use their own
        with _gpu_code(cuda_compiler):
            return tvm.compile(module, target=target), None
    database = _database(records) if records else None
    phases = lowering.lower(
        module,
        target,
        fuse=options.fuse,
        layout=options.layout,
        database=database,
        schedule=options.schedule == "default",
    )
    executable = tvm.relax.build(
        phases.planned, target=target, relax_pipeline=lowering.finish_passes(target), exec_mode=EXEC_MODE
    )
    return executable, phases


def _build_split(module, gpu_target: dict, cuda_compiler: dict | None):
    """(the executable, its placement's summary) for a library split between the GPU and the CPU: each
    operator placed (gpu/heterogeneous.py), then TVM's own pipeline for each device's kernels."""
    import tvm

    placed, operators, placement = heterogeneous.split(module, gpu_target)
    with _gpu_code(cuda_compiler):
        executable = tvm.compile(placed, target=heterogeneous.build_target(gpu_target))
    return executable, placement.summary(operators)


@contextmanager
def _gpu_code(cuda_compiler: dict | None):
    """A GPU library's kernels kept as source, with what `cuda_compiler` compiles of them carried beside it."""
    with _device_code_as_source(), cuda_kernels.carried_in_source(cuda_compiler) if cuda_compiler else nullcontext():
        yield


@contextmanager
def _device_code_as_source():
    """TVM writes a GPU library's kernels as a binary module only where a driver is loaded, and as source
    elsewhere: the same recipe would give other bytes on a GPU machine than in CI, under one key. Kept as
    source everywhere, with the binaries compiled here carried beside it (cuda_kernels.carried_in_source)."""
    before = os.environ.get(FORCE_SOURCE)
    os.environ[FORCE_SOURCE] = "1"  # read by TVM's codegen (CUDAModuleCreateWithFallback) at each build
    try:
        yield
    finally:
        if before is None:
            del os.environ[FORCE_SOURCE]
        else:
            os.environ[FORCE_SOURCE] = before


FORCE_SOURCE = "TVM_COMPILE_FORCE_FALLBACK"


def _database(records: Path):
    """The tune stage's best records as an in-memory MetaSchedule database."""
    import tempfile

    from tvm.s_tir import meta_schedule as ms

    with tempfile.TemporaryDirectory(prefix="modelbuild-records-") as folder:
        tuning_db.write(Path(folder), json.loads(records.read_text()))
        return ms.database.JSONDatabase(work_dir=folder)  # reads both files now; only a commit would write


def _figures(phases) -> dict:
    if phases is None:
        return {"fusion": None, "memory": None}

    before = lowering.launched_kernel_calls(phases.legalized)
    after = lowering.launched_kernel_calls(phases.fused, phases.grouped, phases.legalized)
    steps, returned = lowering.steps(phases.lowered)
    flops, args = lowering.kernel_flops_and_args(phases.fused)
    return {
        "fusion": analysis.fusion_summary(before, after),
        "memory": analysis.memory_summary(steps, returned, lowering.planned_storage_bytes(phases.planned)),
        "kernels": analysis.heaviest_kernels(after, flops, args),
        "schedule": {**lowering.refused_steps(phases.fused), "layout": phases.layout},
    }


def export(executable, path: Path, cross_compiler: str | None) -> None:
    """The executable as a shared library at `path`, linked by `cross_compiler` when given, else this
    machine's compiler; a linker failure is a StageError with the linker's own complaint."""
    from tvm.support import cc

    try:
        if cross_compiler:
            executable.export_library(str(path), fcompile=cc.cross_compiler(cross_compiler))
        else:
            executable.export_library(str(path))
    except RuntimeError as err:
        if "Command line:" not in str(err):
            raise
        raise StageError(
            f"linking {path.name} with {cross_compiler or cc.get_cc()} failed: {linker_says(err)}"
        ) from err


def linker_says(err: BaseException) -> str:
    """The linker's own complaint from TVM's "Compilation error:\n<its output>\nCommand line: ..." message:
    its first line that says error, else its last line."""
    output = str(err).split("Command line:")[0].replace("Compilation error:", "").strip().splitlines()
    errors = [line.strip() for line in output if "error" in line.lower()]
    return (errors or [line.strip() for line in output if line.strip()] or ["no output"])[0][:500]
