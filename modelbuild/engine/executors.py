"""Which executor runs a build's stages: this machine's process pool, or a Ray cluster.

Chosen by --executor, then MODELBUILD_EXECUTOR, then the recipe's [executor] table. Never part of a key: the
cluster runs the same stage code on the same inputs, so where a stage ran never changes what it made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from modelbuild.errors import ModelbuildError

EXECUTOR_ENV = "MODELBUILD_EXECUTOR"
_RAY_ADDRESS = re.compile(r"^ray://[^/:]+:[0-9]+$")


@dataclass(frozen=True)
class ExecutorChoice:
    kind: str  # "local" or "ray"
    address: str | None = None  # ray://HOST:PORT
    fallback: bool = False  # where the cluster does not answer: build here, with a note, instead of failing

    @property
    def on_cluster(self) -> bool:
        return self.kind == "ray"


LOCAL = ExecutorChoice("local")


def choose_executor(
    chosen: str | None, env: str | None, recipe_kind: str = "local", recipe_address: str | None = None
) -> ExecutorChoice:
    """The command line's choice, else the environment's, else the recipe's. `auto` takes the cluster the
    recipe names, and builds here where it names none."""
    if chosen:
        return _parse(chosen, recipe_address, "--executor")
    if env:
        return _parse(env, recipe_address, EXECUTOR_ENV)
    if recipe_kind == "local":
        return LOCAL
    return ExecutorChoice("ray", recipe_address, fallback=recipe_kind == "auto") if recipe_address else LOCAL


def _parse(text: str, recipe_address: str | None, source: str) -> ExecutorChoice:
    if text == "local":
        return LOCAL
    if text == "auto":
        return ExecutorChoice("ray", recipe_address, fallback=True) if recipe_address else LOCAL
    if _RAY_ADDRESS.match(text):
        return ExecutorChoice("ray", text)
    raise ModelbuildError(
        f"{source} {text!r} is not an executor (fix: local, auto, or ray://HOST:PORT, a Ray cluster's head)"
    )
