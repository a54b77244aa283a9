"""Build names: 'model@target' for a float build, 'model+quantization@target' for a quantized one, and
selecting builds by them ('cls@host', 'cls', '*@rpi4')."""

from __future__ import annotations

import fnmatch

from modelbuild.engine.plan import Plan
from modelbuild.errors import SelectionError


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
    return build.split("@", 1)[0]


def model_of(build: str) -> str:
    return variant_of(build).split("+", 1)[0]


def target_of(build: str) -> str:
    return build.split("@", 1)[1]


def quantization_of(build: str) -> str | None:
    variant = variant_of(build)
    return variant.split("+", 1)[1] if "+" in variant else None


def float_build_of(build: str) -> str | None:
    """The float build a quantized build is compared with (it may not be in the plan)."""
    return build_name(model_of(build), target_of(build)) if "+" in variant_of(build) else None
