"""Reading deploy.toml: TOML, includes, schema validation, and the checks that span sections."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args, get_origin

from modelbuild.errors import RecipeError
from modelbuild.recipe import snapshot
from modelbuild.recipe.locate import dotted, locate, locate_in_files

if TYPE_CHECKING:  # for annotations only: importing the schema loads pydantic
    from modelbuild.recipe.schema import Recipe
import tomllib

from modelbuild.recipe.targets import (
    HETEROGENEOUS,
    HOST,
    MODELBUILD_KEYS,
    RPC_TRACKER_ENV,
    TARGET_OPTIONS,
    known_cpus,
    runs_on_host,
    target_arch,
)

_TOML_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")


@dataclass(frozen=True)
class LoadedRecipe:
    """A validated recipe with where it came from: paths in it are relative to `root`.

    `spec` is the pydantic Recipe when the recipe was validated on this load, or the snapshot's Table read
    back without pydantic (recipe/snapshot.py); both answer the same attribute reads and model_dump."""

    spec: Recipe | snapshot.Table
    path: Path
    files: list[Path] = field(default_factory=list)
    baseline: Path | None = None  # `--baseline REPORT`: replaces every [validation.baseline] report

    @property
    def root(self) -> Path:
        return self.path.parent

    def model_path(self, name: str) -> Path:
        return (self.root / self.spec.models[name].path).resolve()

    def validation_for(self, build):
        """The validation settings of one [[builds]] entry: the recipe's defaults under its own overrides.

        It takes the entry, not a model and target: a float and an int8 build of one model and target are
        two entries, each with its own overrides."""
        return overridden(self.spec.validation, build.validation)

    def baseline_report(self, validation) -> Path | None:
        """The report a build with these validation settings is compared with: --baseline, else its
        [validation.baseline] report; None when there is neither."""
        if self.baseline is not None:
            return self.baseline
        report = validation.baseline.report if validation.baseline is not None else None
        return self.root / report if report else None

    def validation_error(self, build, setting: tuple[str, ...], message: str, fix: str) -> RecipeError:
        """A RecipeError at the line of a build's validation setting (see validation_location)."""
        file, line = self.validation_location(build, setting)
        return RecipeError(message, file=_shown(file), line=line, field=dotted(("validation", *setting)), fix=fix)

    def shown(self, path: Path) -> str:
        """A path as the user would write it: relative to the recipe's folder where it is inside it."""
        return str(path.relative_to(self.root)) if path.is_relative_to(self.root) else str(path)

    def gate_location(self, build, gate: str) -> tuple[Path, int | None]:
        """The file and line where a build's gate limit is written: its own [builds.validation.gates] when it
        sets that gate, else the recipe's (or an included preset's) [validation.gates]."""
        return self.validation_location(build, ("gates", gate))

    def validation_location(self, build, setting: tuple[str, ...]) -> tuple[Path, int | None]:
        """The file and line where a build's validation setting (a path under [validation]) is written: its
        own [builds.validation] when it sets it, else the recipe's (or an included preset's)."""
        table, own = build.validation, build.validation is not None
        for key in setting:
            own = own and key in table.model_fields_set
            table = getattr(table, key, None) if own else None
        path = ("builds", self.spec.builds.index(build), "validation", *setting) if own else ("validation", *setting)
        return locate_in_files(self.files or [self.path], path)

    def build_spec(self, model: str, target: str, quantization: str | None = None):
        """The [[builds]] entry that builds this model for this target with this quantization."""
        for build in self.spec.builds:
            if build.model == model and target in build.targets and build.quantization == quantization:
                return build
        raise KeyError(f"{model}+{quantization}@{target}" if quantization else f"{model}@{target}")


def overridden(base, other):
    """`base` (a validation table) with every field `other` sets explicitly, nested tables field by field."""
    if other is None:
        return base
    update = {}
    for name in other.model_fields_set:
        mine, theirs = getattr(base, name), getattr(other, name)
        if hasattr(mine, "model_fields_set") and hasattr(theirs, "model_fields_set"):
            update[name] = mine.model_copy(update={f: getattr(theirs, f) for f in theirs.model_fields_set})
        else:
            update[name] = theirs
    return base.model_copy(update=update)


# the code that decides what a valid recipe is: a snapshot is reused only under the same code
_SCHEMA_CODE = [Path(__file__).parent / name for name in ("schema.py", "load.py", "snapshot.py")]


def load_recipe(path: Path, *, snapshots: Path | None = None) -> LoadedRecipe:
    """Read, merge and validate a recipe; every user mistake raises a RecipeError naming file and line.

    With `snapshots` (a folder in the cache), a recipe validated before is read back without pydantic."""
    path = Path(path).resolve()
    if not path.exists():
        raise RecipeError("no recipe here", file=str(path), fix="run modelbuild where deploy.toml is, or pass -f FILE")
    files: list[Path] = []
    data = _read_with_includes(path, files, chain=())
    key = snapshot.snapshot_key(data, _SCHEMA_CODE) if snapshots else None
    spec = snapshot.read(snapshots, key) if snapshots else None
    fresh = spec is None
    if fresh:
        spec = _validate(data, files)
    loaded = LoadedRecipe(spec=spec, path=path, files=files)
    _check_targets(loaded)
    _check_builds(loaded)
    _check_model_files(loaded)
    _check_golden_files(loaded)
    _check_tuning_records(loaded)
    _check_calibration_files(loaded)
    _check_int16_activations(loaded)
    _check_held_out_golden(loaded)
    if fresh and snapshots:  # only a recipe that passed every check: bad input leaves the cache as it was
        snapshot.write(snapshots, key, spec)
    return loaded


def _validate(data: dict, files: list[Path]):
    # imported here: a recipe read back from its snapshot never loads pydantic
    from pydantic import ValidationError

    from modelbuild.recipe.schema import Recipe

    try:
        return Recipe.model_validate(data)
    except ValidationError as err:
        raise _recipe_error(err.errors()[0], files) from None


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise RecipeError(
            f"not UTF-8 text (byte {err.start})", file=_shown(path), fix="save the recipe as UTF-8 TOML"
        ) from None
    except tomllib.TOMLDecodeError as err:
        match = _TOML_POSITION.search(str(err))
        message = _TOML_POSITION.sub("", str(err)).strip()
        line = int(match.group(1)) if match else None
        raise RecipeError(
            f"invalid TOML: {message}", file=_shown(path), line=line, fix="correct the TOML syntax on that line"
        ) from None


def _read_with_includes(path: Path, files: list[Path], chain: tuple[Path, ...]) -> dict:
    """The file's tables deep-merged over those of the files it includes (the including file wins)."""
    files.append(path)
    data = _read_toml(path)
    merged: dict = {}
    includes = data.get("include", [])
    if not isinstance(includes, list) or not all(isinstance(name, str) for name in includes):
        raise RecipeError(
            f"expected a list of recipe files, found {_short(includes)}",
            file=_shown(path),
            line=locate(path.read_text(), ("include",)),
            field="include",
            fix='include = ["recipes/targets/x86-server.toml"]',
        )
    for index, name in enumerate(includes):
        piece = (path.parent / name).resolve()
        if piece in chain or piece == path:
            raise RecipeError(
                f"include cycle through {name!r}",
                file=_shown(path),
                field=f"include[{index}]",
                fix="remove the include that leads back to this file",
            )
        if not piece.exists():
            raise RecipeError(
                f"included file {name!r} not found",
                file=_shown(path),
                line=locate(path.read_text(), ("include",)),
                field=f"include[{index}]",
                fix="paths in include are relative to the including file",
            )
        if not piece.is_file():  # "" or "recipes/" name a folder
            raise RecipeError(
                f"included path {name!r} is a folder, not a recipe file",
                file=_shown(path),
                line=locate(path.read_text(), ("include",)),
                field=f"include[{index}]",
                fix='name a .toml file, such as include = ["recipes/targets/x86-server.toml"]',
            )
        merged = _merge(merged, _read_with_includes(piece, files, (*chain, path)))
    return _merge(merged, data)


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        if key == "include":
            continue
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        elif isinstance(value, list) and key == "builds" and isinstance(out.get(key), list):
            out[key] = [*out[key], *value]
        else:
            out[key] = value
    return out


def _recipe_error(error: dict, files: list[Path]) -> RecipeError:
    loc = tuple(error["loc"])
    file, line = locate_in_files(files, loc)
    kind = error["type"]
    if kind == "extra_forbidden":
        return RecipeError(
            f"unknown key {loc[-1]!r}",
            file=_shown(file),
            line=line,
            field=dotted(loc),
            fix=_spelling_fix(str(loc[-1]), _fields_at(loc[:-1])),
        )
    if kind == "missing":
        return RecipeError(
            "required field is missing", file=_shown(file), line=line, field=dotted(loc), fix=f"add {loc[-1]} = ..."
        )
    if kind == "greater_than_equal" and "shape" in loc and error.get("input") == 0:
        return RecipeError(
            "0 is a placeholder for a dimension the model leaves dynamic",
            file=_shown(file),
            line=line,
            field=dotted(loc),
            fix="set the size to build for",
        )
    expected = error["msg"].replace("Input should be", "expected").replace("String should", "expected to")
    found = error.get("input")
    return RecipeError(
        f"{expected}, found {_short(found)}",
        file=_shown(file),
        line=line,
        field=dotted(loc),
        fix="see `modelbuild schema` for this field",
    )


def _spelling_fix(word: str, valid: list[str] | tuple[str, ...]) -> str:
    import difflib  # here and below: only a mistake needs it, and a no-op build pays for every import

    close = difflib.get_close_matches(word, valid, n=1)
    hint = f"did you mean {close[0]!r}? " if close else "check the spelling; "
    return f"{hint}valid keys here: {', '.join(valid) or 'none'}"


def _fields_at(loc: tuple) -> list[str]:
    """The keys the schema allows at a location, to suggest the right spelling."""
    from pydantic import BaseModel

    from modelbuild.recipe.schema import Recipe

    node: Any = Recipe
    for part in loc:
        if isinstance(node, type) and issubclass(node, BaseModel):
            info = node.model_fields.get(str(part))
            if info is None:
                return []
            node = info.annotation
        elif get_origin(node) in (dict, list):
            node = get_args(node)[-1]
        else:
            return []
        while get_origin(node) is not None and get_origin(node) not in (dict, list):
            node = get_args(node)[0]  # unwrap Annotated / Optional
    if isinstance(node, type) and issubclass(node, BaseModel):
        return [info.alias or name for name, info in node.model_fields.items()]
    return []


def _short(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, bool) else repr(value)  # as TOML writes it: true, not True
    return text if len(text) <= 60 else text[:57] + "..."


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _fail(loaded: LoadedRecipe, loc: tuple, message: str, fix: str) -> RecipeError:
    file, line = locate_in_files(loaded.files, loc)
    return RecipeError(message, file=_shown(file), line=line, field=dotted(loc), fix=fix)


def _check_targets(loaded: LoadedRecipe) -> None:
    for name, table in loaded.spec.targets.items():
        kind = table.get("kind")
        if kind not in TARGET_OPTIONS:
            raise _fail(
                loaded,
                ("targets", name, "kind"),
                f"unknown target kind {kind!r}",
                f"use one of {', '.join(TARGET_OPTIONS)}",
            )
        allowed = (*TARGET_OPTIONS[kind], *MODELBUILD_KEYS)
        for key in table:
            if key not in allowed:
                raise _fail(
                    loaded, ("targets", name, key), f"unknown {kind} target option {key!r}", _spelling_fix(key, allowed)
                )
        _check_mcpu(loaded, name, table)
        _check_rpc(loaded, name, table.get("rpc"))
        _check_devices(loaded, name, table)
        cores = table.get("num-cores")
        if cores is not None and (not isinstance(cores, int) or cores < 1):
            raise _fail(
                loaded,
                ("targets", name, "num-cores"),
                f"expected a positive integer, found {cores!r}",
                "set num-cores to the number of cores the library may use",
            )


def _check_devices(loaded: LoadedRecipe, name: str, table: dict) -> None:
    """devices = ["cuda", "llvm"] on a cuda target: one model split between the GPU and the CPU."""
    devices = table.get("devices")
    if devices is None:
        return
    if table.get("kind") != "cuda" or devices != HETEROGENEOUS:
        raise _fail(
            loaded,
            ("targets", name, "devices"),
            f"expected devices = {json.dumps(HETEROGENEOUS)} on a cuda target, found {json.dumps(devices)} "
            f"on a {table.get('kind')} target",
            'kind = "cuda" with devices = ["cuda", "llvm"]: the GPU, with the CPU for what the GPU lacks',
        )


def _check_rpc(loaded: LoadedRecipe, name: str, rpc) -> None:
    """rpc = { tracker = "host:port", key = "rpi4", timeout = 60 }: the device validate runs on."""
    if rpc is None:
        return
    fix = 'rpc = { tracker = "127.0.0.1:9190", key = "rpi4" } (the tracker may come from MODELBUILD_RPC_TRACKER)'
    if not isinstance(rpc, dict) or not isinstance(rpc.get("key"), str) or not rpc["key"]:
        raise _fail(loaded, ("targets", name, "rpc"), "expected a table with the device's key", fix)
    unknown = set(rpc) - {"tracker", "key", "timeout"}
    if unknown:
        raise _fail(
            loaded,
            ("targets", name, "rpc", sorted(unknown)[0]),
            f"unknown rpc option {sorted(unknown)[0]!r}",
            "rpc takes tracker, key and timeout",
        )
    tracker = rpc.get("tracker", os.environ.get(RPC_TRACKER_ENV))
    host, _, port = str(tracker or "").rpartition(":")
    if not host or not port.isdigit():
        raise _fail(
            loaded, ("targets", name, "rpc", "tracker"), f"expected the tracker as host:port, found {tracker!r}", fix
        )
    timeout = rpc.get("timeout", 60)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise _fail(
            loaded,
            ("targets", name, "rpc", "timeout"),
            f"expected seconds > 0, found {timeout!r}",
            "timeout = 60: how long validate waits for a free device",
        )


def _check_mcpu(loaded: LoadedRecipe, name: str, table: dict) -> None:
    """An llvm mcpu this LLVM does not know builds silently for a generic CPU: refuse it with a suggestion."""
    mcpu = table.get("mcpu")
    if table.get("kind") != "llvm" or mcpu in (None, HOST):
        return
    arch = target_arch(table)
    cpus = known_cpus(arch)
    if cpus is not None and mcpu not in cpus:
        import difflib

        close = difflib.get_close_matches(str(mcpu), cpus, n=3)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise _fail(
            loaded,
            ("targets", name, "mcpu"),
            f"LLVM knows no {arch} CPU {mcpu!r}",
            f'{hint}mcpu = "host" builds for this machine; the list: '
            f'python -c "import modelbuild.recipe.targets as t; print(t.known_cpus({arch!r}))"',
        )


def _check_builds(loaded: LoadedRecipe) -> None:
    spec = loaded.spec
    seen: set[tuple[str, str, str | None]] = set()
    for index, build in enumerate(spec.builds):
        for j, target in enumerate(build.targets):
            if (build.model, target, build.quantization) in seen:
                what = f"{build.model}@{target}" + (
                    f" with quantization {build.quantization}" if build.quantization else ""
                )
                raise _fail(
                    loaded,
                    ("builds", index, "targets", j),
                    f"{what} is declared twice",
                    "declare each model, target and quantization in one [[builds]] entry",
                )
            seen.add((build.model, target, build.quantization))
        if build.model not in spec.models:
            raise _fail(
                loaded,
                ("builds", index, "model"),
                f"no model named {build.model!r}",
                f"use one of {', '.join(spec.models)} or declare [models.{build.model}]",
            )
        if build.quantization and build.quantization not in spec.quantization:
            raise _fail(
                loaded,
                ("builds", index, "quantization"),
                f"no quantization section named {build.quantization!r}",
                f"declare [quantization.{build.quantization}] or use one of: "
                f"{', '.join(spec.quantization) or 'none yet'}",
            )
        if build.search and build.search not in spec.search:
            raise _fail(
                loaded,
                ("builds", index, "search"),
                f"no search section named {build.search!r}",
                f"declare [search.{build.search}] or use one of: {', '.join(spec.search) or 'none yet'}",
            )
        if build.search and not build.quantization:
            raise _fail(
                loaded,
                ("builds", index, "search"),
                "a search starts from the build's quantization",
                'add quantization = "NAME" (a [quantization.NAME] section) to this build',
            )
        if build.tuning and build.tuning not in spec.tuning:
            raise _fail(
                loaded,
                ("builds", index, "tuning"),
                f"no tuning section named {build.tuning!r}",
                f"declare [tuning.{build.tuning}] or use one of: {', '.join(spec.tuning) or 'none yet'}",
            )
        for j, target in enumerate(build.targets):
            if target not in spec.targets:
                raise _fail(
                    loaded,
                    ("builds", index, "targets", j),
                    f"no target named {target!r}",
                    f"use one of {', '.join(spec.targets)} or declare [targets.{target}]",
                )
            if build.tuning and spec.targets[target].get("kind") == "llvm" and "num-cores" not in spec.targets[target]:
                raise _fail(
                    loaded,
                    ("builds", index, "tuning"),
                    f"MetaSchedule tunes for a known core count, and target {target!r} has no num-cores",
                    f"add num-cores = N (the device's physical cores) to [targets.{target}]",
                )
            if build.tuning and not _measurable(spec.targets[target]):
                raise _fail(
                    loaded,
                    ("builds", index, "tuning"),
                    f"tuning measures every candidate, and target {target!r} runs neither on this machine "
                    "nor on a device",
                    f'add rpc = {{ tracker = "host:port", key = "..." }} to '
                    f"[targets.{target}] (a board, or scripts/emulated_arm64.py for aarch64), or tune "
                    "another target",
                )


def _measurable(target: dict) -> bool:
    """Whether tuning can time this target's candidates: here (the same architecture), or over RPC."""
    return bool(target.get("rpc")) or runs_on_host(target) or target.get("kind") != "llvm"


def _validation_specs(loaded: LoadedRecipe):
    """(location, spec) of the recipe's [validation] and of every build's override."""
    yield ("validation",), loaded.spec.validation
    for index, build in enumerate(loaded.spec.builds):
        if build.validation is not None:
            yield ("builds", index, "validation"), build.validation


def _check_golden_files(loaded: LoadedRecipe) -> None:
    for loc, spec in _validation_specs(loaded):
        golden = spec.golden
        if golden.source != "generate":
            if golden.path is None:
                raise _fail(
                    loaded,
                    (*loc, "golden", "source"),
                    f"golden source {golden.source!r} needs a path",
                    'add path = "..." to the golden table',
                )
            path = loaded.root / golden.path
            if not (path.is_file() if golden.source == "npz" else path.is_dir()):
                raise _fail(
                    loaded,
                    (*loc, "golden", "path"),
                    f"golden {golden.source} {golden.path!r} not found",
                    "paths are relative to the recipe's folder",
                )
        if spec.baseline and spec.baseline.report and not (loaded.root / spec.baseline.report).is_file():
            raise _fail(
                loaded,
                (*loc, "baseline", "report"),
                f"baseline report {spec.baseline.report!r} not found",
                "point it at a report.json from an earlier build",
            )


def _check_held_out_golden(loaded: LoadedRecipe) -> None:
    """A quantized build's golden inputs must not be its calibration samples: accuracy measured on the data the
    ranges were fitted to says nothing about the inputs users will send."""
    for index, build in enumerate(loaded.spec.builds):
        if not build.quantization:
            continue
        calibration = loaded.spec.quantization[build.quantization].calibration
        golden = loaded.validation_for(build).golden
        if calibration.source == "random" or golden.source != calibration.source:
            continue
        if (loaded.root / golden.path).resolve() == (loaded.root / calibration.path).resolve():
            loc = (
                ("builds", index, "validation")
                if build.validation and "golden" in build.validation.model_fields_set
                else ("validation",)
            )
            raise _fail(
                loaded,
                (*loc, "golden", "path"),
                f"the golden inputs of {build.model}+{build.quantization} are its calibration samples "
                f"({golden.path!r})",
                "point golden.path at held-out samples the calibration never saw",
            )


def _check_int16_activations(loaded: LoadedRecipe) -> None:
    for name, spec in loaded.spec.quantization.items():
        if (spec.int16_nodes or spec.int16_most_sensitive) and spec.scheme != "symmetric":
            field = "int16_nodes" if spec.int16_nodes else "int16_most_sensitive"
            raise _fail(
                loaded,
                ("quantization", name, field),
                "int16 activations need the symmetric scheme "
                "(the integer kernels split them into bytes around zero point 0)",
                'set scheme = "symmetric", or remove int16_nodes and int16_most_sensitive',
            )
        for j, node in enumerate(spec.int16_nodes):
            if node in spec.exclude_nodes:
                raise _fail(
                    loaded,
                    ("quantization", name, "int16_nodes", j),
                    f"{node!r} is in both int16_nodes and exclude_nodes",
                    "keep it in exclude_nodes to leave it in float, or in int16_nodes to quantize it",
                )


def _check_calibration_files(loaded: LoadedRecipe) -> None:
    for name, quantization in loaded.spec.quantization.items():
        calibration = quantization.calibration
        if calibration.source == "random":
            continue
        path = loaded.root / (calibration.path or "")
        if calibration.path is None or not (path.is_file() if calibration.source == "npz" else path.is_dir()):
            raise _fail(
                loaded,
                ("quantization", name, "calibration", "path"),
                f"calibration {calibration.source} {calibration.path!r} not found",
                "point path at the samples; paths are relative to the recipe's folder",
            )


def _check_tuning_records(loaded: LoadedRecipe) -> None:
    for name, tuning in loaded.spec.tuning.items():
        if tuning.records and not (loaded.root / tuning.records).is_file():
            raise _fail(
                loaded,
                ("tuning", name, "records"),
                f"tuning records {tuning.records!r} not found",
                "make one with `modelbuild tune export FILE`; paths are relative to the recipe",
            )


def _check_model_files(loaded: LoadedRecipe) -> None:
    for name, model in loaded.spec.models.items():
        try:
            path = loaded.model_path(name)
        except (RuntimeError, OSError):  # resolve() on a symlink loop: RuntimeError up to 3.12, OSError after
            raise _fail(
                loaded,
                ("models", name, "path"),
                f"model file {model.path!r} is a symbolic link that leads back to itself",
                "point the link at the model file, or the path at the file itself",
            ) from None
        if not path.is_file():
            raise _fail(
                loaded,
                ("models", name, "path"),
                f"model file {model.path!r} not found",
                "paths are relative to the recipe's folder",
            )
