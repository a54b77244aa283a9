"""The errors modelbuild raises deep and the CLI renders once, each with its exit code."""

from __future__ import annotations

import errno
import os


class ModelbuildError(Exception):
    """A failure the user can act on; rendered as one line, never with a traceback."""

    exit_code = 2


class RecipeError(ModelbuildError):
    """The recipe or one of its inputs is wrong: names the file, line, field and the fix."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.field = field
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "") + ": "
        field = f"{self.field}: " if self.field else ""
        fix = f" (fix: {self.fix})" if self.fix else ""
        return f"{where}{field}{self.message}{fix}"


class SelectionError(ModelbuildError):
    """A command-line selector or option names nothing in the recipe."""

    exit_code = 2


class EnvironmentFailure(ModelbuildError):
    """The machine, not the recipe, is at fault: no permission, a full disk, a missing tool."""

    exit_code = 4


class Interrupted(ModelbuildError):
    """Ctrl-C (SIGINT) during a build: the running stages were killed and nothing they made was recorded."""

    exit_code = 130  # 128 + SIGINT, as a shell reports it

    def __init__(self, running: list[str]) -> None:
        where = f" while {', '.join(running)} ran" if running else ""
        super().__init__(f"interrupted{where}: those stages were stopped and nothing half-built was recorded")


class StageError(ModelbuildError):
    """A stage could not produce its outputs (an unsupported operator, a TVM error)."""

    exit_code = 3

    def __init__(self, message: str, *, log: str | None = None) -> None:
        self.message = message
        self.log = log
        super().__init__(message)

    def __reduce__(self):
        # Raised in worker processes: keep the class and the log when pickled back to the scheduler.
        return (_rebuild_stage_error, (type(self), self.message, self.log))


class InputError(StageError):
    """A stage found its inputs wrong for the model (input names, ranks, dtypes, golden data): the user's to fix."""

    exit_code = 2


class StageEnvironmentError(StageError):
    """A stage failed because of the machine (permissions, a full disk, a missing package)."""

    exit_code = 4


def _rebuild_stage_error(cls: type, message: str, log: str | None) -> StageError:
    return cls(message, log=log)


class BuildFailed(StageError):
    """Stages of a build failed (modelbuild.build from Python; the CLI prints each and exits instead).
    `failures` holds each failed stage's result, with its error and log; `report` what did build. The exit
    code is the CLI's: bad input first, then the environment, then a failed stage."""

    def __init__(self, failures: list, report) -> None:
        self.failures = failures
        self.report = report
        codes = {f.exit_code or StageError.exit_code for f in failures}
        priority = (InputError.exit_code, EnvironmentFailure.exit_code, StageError.exit_code)
        self.exit_code = next((code for code in priority if code in codes), StageError.exit_code)
        first = failures[0]
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        super().__init__(f"{first.node} failed: {first.error}{more}", log=first.log)


# What to do about each errno that means the machine is at fault, not the recipe or the code.
_ENVIRONMENT_FIXES = {
    errno.EACCES: "make it writable by this user, or pass --build-dir / --cache-dir elsewhere",
    errno.EPERM: "make it writable by this user, or pass --build-dir / --cache-dir elsewhere",
    errno.EROFS: "the filesystem is read-only: pass --build-dir / --cache-dir on a writable one",
    errno.ENOSPC: "free disk space (`modelbuild clean --all` empties the cache) or pass --cache-dir elsewhere",
    errno.EDQUOT: "free disk space under your quota or pass --cache-dir elsewhere",
    errno.ENOTDIR: "a path that should be a folder is a file: remove or rename it",
    errno.EEXIST: "a path that should be a folder is a file: remove or rename it",
    errno.EISDIR: "a path that should be a file is a folder: remove or rename it",
    errno.EMFILE: "too many open files: raise the limit (ulimit -n)",
    errno.ENOMEM: "out of memory: run fewer jobs (-j)",
}


def environment_failure(err: OSError) -> EnvironmentFailure | None:
    """The one-line failure an OSError of the machine stands for (permissions, disk full), else None."""
    fix = _ENVIRONMENT_FIXES.get(err.errno)
    if fix is None:
        return None
    where = f": {err.filename}" if err.filename else ""
    return EnvironmentFailure(f"{os.strerror(err.errno)}{where} ({errno.errorcode[err.errno]}; fix: {fix})")


def last_line(err: BaseException, limit: int = 500) -> str:
    """The last non-empty line of an exception's message: where TVM and onnx put the actual complaint. TVM
    may end it with the offending IR, whose comments ("# Metadata omitted ...") say nothing."""
    lines = [line for line in str(err).strip().splitlines() if line.strip() and not line.startswith("# ")]
    return lines[-1][:limit] if lines else type(err).__name__
