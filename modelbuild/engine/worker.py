"""Runs one stage in a worker process, with its stdout and stderr (TVM's C++ logs too) sent to a log file."""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from modelbuild.errors import StageEnvironmentError, StageError, environment_failure, last_line
from modelbuild.progress import ENV
from modelbuild.ray_connection import CLUSTER_ENV, FALLBACK_ENV

WHERE = (CLUSTER_ENV, FALLBACK_ENV)  # the variables `environment` may set, cleared for each stage


def execute(
    entry: str,
    inputs: dict[str, str],
    params: dict,
    out: str,
    log: str,
    progress: str,
    environment: dict[str, str] | None = None,
) -> float:
    """Call the stage function `entry` ('module:function'); any failure becomes a StageError with the log.

    Returns the seconds the stage itself ran, which exclude waiting for a worker. The stage's progress
    reports go to the file `progress`, which the scheduler reads while it runs. `environment` is what the
    build tells its stages of where they run (a worker process runs many stages: each gets its own)."""
    started = time.perf_counter()
    os.environ[ENV] = progress
    for name in WHERE:
        os.environ.pop(name, None)
    os.environ.update(environment or {})
    with open(log, "ab") as log_file:
        saved = os.dup(1), os.dup(2)
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(log_file.fileno(), 1), os.dup2(log_file.fileno(), 2)
        try:
            _call(entry, {k: Path(v) for k, v in inputs.items()}, params, Path(out))
        except StageError as err:
            traceback.print_exc()
            raise type(err)(err.message, log=log) from None
        except (OSError, MemoryError, ModuleNotFoundError) as err:
            traceback.print_exc()
            raise _environment_error(err, log) or StageError(
                f"{type(err).__name__}: {last_line(err)}", log=log
            ) from None
        except Exception as err:  # a bug or a TVM crash in Python: keep the traceback in the log
            traceback.print_exc()
            raise StageError(f"{type(err).__name__}: {last_line(err)}", log=log) from None
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    return time.perf_counter() - started


def die_with_parent(parent: int) -> None:
    """A worker's initializer: end this process when the build that started it dies, however it dies (an OOM
    killer's SIGKILL runs no handler in the parent), instead of finishing a stage nobody will record."""
    try:
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: a worker then ends when its task's pipe closes
        return
    if os.getppid() != parent:  # the parent died before the signal was asked for
        os._exit(1)


def _environment_error(err: BaseException, log: str) -> StageEnvironmentError | None:
    """The machine's fault (disk full, no permission, no memory, a package not installed), or None."""
    if isinstance(err, ModuleNotFoundError):
        return StageEnvironmentError(
            f"missing Python package {err.name!r}: reinstall modelbuild "
            f"(pip install -e .) so its dependencies are installed",
            log=log,
        )
    if isinstance(err, MemoryError):
        return StageEnvironmentError("out of memory: run fewer jobs at once (-j)", log=log)
    failure = environment_failure(err) if isinstance(err, OSError) else None
    return StageEnvironmentError(str(failure), log=log) if failure else None


def _call(entry: str, inputs: dict[str, Path], params: dict, out: Path) -> None:
    module_name, _, function = entry.partition(":")
    getattr(importlib.import_module(module_name), function)(inputs=inputs, params=params, out=out)
