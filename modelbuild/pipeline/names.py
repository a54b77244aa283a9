"""Build names: 'model@target' for a float build, 'model+quantization@target' for a quantized one, and
selecting builds by them ('cls@host', 'cls', '*@rpi4')."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from modelbuild.engine.plan import Plan
from modelbuild.errors import SelectionError


@dataclass(frozen=True)
class BuildId:
    """One build of a recipe: a model for a target, quantized or not. Its name (str) is what users select
    by and what the plan's nodes carry."""

    model: str
    target: str
    quantization: str | None = None

    def __str__(self) -> str:
        return build_name(self.model, self.target, self.quantization)

    @property
    def variant(self) -> str:
        """The folder it publishes under: 'model' or 'model+quantization'."""
        return f"{self.model}+{self.quantization}" if self.quantization else self.model

    @property
    def float_build(self) -> BuildId:
        """The float build a quantized build is compared with (itself for a float build)."""
        return BuildId(self.model, self.target)

    @classmethod
    def parse(cls, name: str) -> BuildId:
        variant, _, target = name.partition("@")
        model, _, quantization = variant.partition("+")
        return cls(model, target, quantization or None)


def select(plan: Plan, selectors: list[str]) -> Plan:
    """The sub-plan for builds matching any selector, dependencies included; every selector must match."""
    if not selectors:
        return plan
    unmatched = [s for s in selectors if not any(_matches(b, s) for b in plan.builds)]
    if unmatched:
        raise SelectionError(f"no build matches {unmatched[0]!r}; builds: {', '.join(plan.builds)}")
    return plan.subset([b for b in plan.builds if any(_matches(b, s) for s in selectors)])


def _matches(build: str, selector: str) -> bool:
    return fnmatch.fnmatchcase(build, selector) or selector in (model_of(build), variant_of(build))


def build_name(model: str, target: str, quantization: str | None = None) -> str:
    """'model@target' for a float build, 'model+quantization@target' for a quantized one, so one recipe can
    build both and compare them ('+' is not allowed in recipe names)."""
    return f"{model}+{quantization}@{target}" if quantization else f"{model}@{target}"


def variant_of(build: str) -> str:
    """The folder a build publishes under: 'model' or 'model+quantization'."""
    return BuildId.parse(build).variant


def model_of(build: str) -> str:
    return BuildId.parse(build).model


def target_of(build: str) -> str:
    return BuildId.parse(build).target


def quantization_of(build: str) -> str | None:
    return BuildId.parse(build).quantization


def float_build_of(build: str) -> str | None:
    """The float build a quantized build is compared with (it may not be in the plan)."""
    parsed = BuildId.parse(build)
    return str(parsed.float_build) if parsed.quantization else None
