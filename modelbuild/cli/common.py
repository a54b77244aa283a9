"""Helpers every command shares: the project a command works on, paths as a person reads them,
one-line messages on stderr, and the exit codes."""

from __future__ import annotations

import sys
from pathlib import Path

# the exit codes README.md documents; a failed stage's own code (usage, environment) wins over these
EXIT_OK, EXIT_GATE_FAILED, EXIT_USAGE, EXIT_STAGE_FAILED, EXIT_ENVIRONMENT = 0, 1, 2, 3, 4
EXIT_STALE = 1


def project_of(args):
    from modelbuild.pipeline.project import open_project

    return open_project(
        args.file,
        cache_dir=args.cache_dir,
        build_dir=args.build_dir,
        cache_mode=args.cache_mode,
        baseline=args.baseline,
        executor=getattr(args, "executor", None),
    )


def relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def say_error(message: str, prefix: str = "error: ") -> None:
    from modelbuild.cli.console import make_console

    make_console(sys.stderr).print(prefix + message, markup=False)
