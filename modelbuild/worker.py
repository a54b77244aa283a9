"""Runs one stage in a worker process, with its stdout and stderr (TVM's C++ logs too) sent to a log file."""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path

from modelbuild.errors import StageError, last_line
from modelbuild.progress import ENV


def execute(entry: str, inputs: dict[str, str], params: dict, out: str, log: str, progress: str) -> None:
    """Call the stage function `entry` ('module:function'); any failure becomes a StageError with the log.

    The stage's progress reports go to the file `progress`, which the scheduler reads while it runs."""
    os.environ[ENV] = progress
    with open(log, "ab") as log_file:
        saved = os.dup(1), os.dup(2)
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(log_file.fileno(), 1), os.dup2(log_file.fileno(), 2)
        try:
            _call(entry, {k: Path(v) for k, v in inputs.items()}, params, Path(out))
        except StageError as err:
            traceback.print_exc()
            raise StageError(err.message, log=log) from None
        except Exception as err:  # a bug or a TVM crash in Python: keep the traceback in the log
            traceback.print_exc()
            raise StageError(f"{type(err).__name__}: {last_line(err)}", log=log) from None
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])


def _call(entry: str, inputs: dict[str, Path], params: dict, out: Path) -> None:
    module_name, _, function = entry.partition(":")
    getattr(importlib.import_module(module_name), function)(inputs=inputs, params=params, out=out)
