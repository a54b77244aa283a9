"""The errors modelbuild raises deep and the CLI renders once, each with its exit code."""

from __future__ import annotations


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


class StageError(ModelbuildError):
    """A stage could not produce its outputs (an unsupported operator, a TVM error)."""

    exit_code = 3

    def __init__(self, message: str, *, log: str | None = None) -> None:
        self.message = message
        self.log = log
        super().__init__(message)

    def __reduce__(self):
        # Raised in worker processes: keep the log when pickled back to the scheduler.
        return (_rebuild_stage_error, (self.message, self.log))


def _rebuild_stage_error(message: str, log: str | None) -> StageError:
    return StageError(message, log=log)


def last_line(err: BaseException, limit: int = 500) -> str:
    """The last non-empty line of an exception's message: where TVM and onnx put the actual complaint."""
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return lines[-1][:limit] if lines else type(err).__name__
