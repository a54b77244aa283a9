"""A recipe with its store and build folder: what every CLI command starts from."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from modelbuild.engine.events import Reporter, silent
from modelbuild.engine.executors import EXECUTOR_ENV, LOCAL, ExecutorChoice, choose_executor
from modelbuild.engine.plan import Plan
from modelbuild.engine.remote import configured
from modelbuild.engine.scheduler import Options, RunResult, Scheduler
from modelbuild.engine.store import Store
from modelbuild.errors import ModelbuildError
from modelbuild.pipeline.graph import build_plan
from modelbuild.pipeline.names import select
from modelbuild.recipe import LoadedRecipe, load_recipe
from modelbuild.recipe.targets import resolve_target


@dataclass
class Project:
    recipe: LoadedRecipe
    store: Store
    build_dir: Path
    executor: ExecutorChoice = LOCAL

    @cached_property
    def plan(self) -> Plan:
        memo = self.store.root / "host-cpu.json"
        return build_plan(self.recipe, lambda table: resolve_target(table, memo), tuning_root=self.tuning_root)

    @property
    def tuning_root(self) -> Path:
        return self.store.root / "tuning"

    def run(self, selectors: list[str], options: Options, reporter: Reporter = silent, doubt=None) -> RunResult:
        """`doubt`: see Scheduler. A cluster is asked for nothing by a dry run, nor by a build with nothing
        to run (it connects when a stage must run)."""
        cluster = None
        if self.executor.on_cluster and not options.dry_run:
            from modelbuild.engine.cluster import Cluster  # Ray, and what talks to it, only for cluster builds

            cluster = Cluster(self.executor, self.store)
        plan = select(self.plan, selectors)
        try:
            return Scheduler(plan, self.store, self.build_dir, reporter, doubt, cluster).run(options)
        finally:
            if cluster is not None:
                cluster.close()


def open_project(
    recipe_path: Path,
    *,
    cache_dir: Path | None = None,
    build_dir: Path | None = None,
    cache_mode: str | None = None,
    baseline: Path | None = None,
    executor: str | None = None,
) -> Project:
    """Load the recipe; the store and build folder default to .cache/ and build/ beside it, the remote cache
    to the recipe's [cache] section unless the environment or `cache_mode` says otherwise, and the baseline
    report to the recipe's unless `baseline` is given, and the executor to `executor`, else MODELBUILD_EXECUTOR,
    else the recipe's [executor]."""
    recipe_path = Path(recipe_path).resolve()
    cache = Path(cache_dir) if cache_dir else recipe_path.parent / ".cache"
    recipe = load_recipe(recipe_path, snapshots=cache / "recipes")
    if baseline is not None:
        if not Path(baseline).is_file():
            raise ModelbuildError(f"--baseline {baseline}: no such report; pass the report.json of an earlier build")
        recipe = replace(recipe, baseline=Path(baseline).resolve())
    remote = configured(recipe.spec.cache.remote, recipe.spec.cache.mode, cache_mode)
    spec = recipe.spec.executor
    choice = choose_executor(executor, os.environ.get(EXECUTOR_ENV), spec.kind, spec.address)
    return Project(
        recipe=recipe,
        store=Store(cache, remote=remote),
        build_dir=build_dir or recipe.root / "build",
        executor=choice,
    )
