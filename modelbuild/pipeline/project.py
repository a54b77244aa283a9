"""A recipe with its store and build folder: what every CLI command starts from."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from modelbuild.engine.events import Reporter, silent
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

    @cached_property
    def plan(self) -> Plan:
        memo = self.store.root / "host-cpu.json"
        return build_plan(self.recipe, lambda table: resolve_target(table, memo), tuning_root=self.tuning_root)

    @property
    def tuning_root(self) -> Path:
        return self.store.root / "tuning"

    def run(self, selectors: list[str], options: Options, reporter: Reporter = silent, doubt=None) -> RunResult:
        """`doubt`: see Scheduler."""
        return Scheduler(select(self.plan, selectors), self.store, self.build_dir, reporter, doubt).run(options)


def open_project(
    recipe_path: Path,
    *,
    cache_dir: Path | None = None,
    build_dir: Path | None = None,
    cache_mode: str | None = None,
    baseline: Path | None = None,
) -> Project:
    """Load the recipe; the store and build folder default to .cache/ and build/ beside it, the remote cache
    to the recipe's [cache] section unless the environment or `cache_mode` says otherwise, and the baseline
    report to the recipe's unless `baseline` is given."""
    recipe_path = Path(recipe_path).resolve()
    cache = Path(cache_dir) if cache_dir else recipe_path.parent / ".cache"
    recipe = load_recipe(recipe_path, snapshots=cache / "recipes")
    if baseline is not None:
        if not Path(baseline).is_file():
            raise ModelbuildError(f"--baseline {baseline}: no such report; pass the report.json of an earlier build")
        recipe = replace(recipe, baseline=Path(baseline).resolve())
    remote = configured(recipe.spec.cache.remote, recipe.spec.cache.mode, cache_mode)
    return Project(recipe=recipe, store=Store(cache, remote=remote), build_dir=build_dir or recipe.root / "build")
