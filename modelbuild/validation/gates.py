"""Gates: what "good enough" means, checked against a build's metrics. Pure, cheap, never cached, so editing
a gate reruns nothing but this check."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from modelbuild.validation.measured import Measured

if TYPE_CHECKING:  # a validation table: pydantic's, or a snapshot's (recipe/snapshot.py)
    from modelbuild.recipe.schema import ValidationSpec


@dataclass(frozen=True)
class GateResult:
    name: str
    value: float | None
    limit: float | None
    passed: bool
    detail: str = ""
    # False where the figure does not exist for this model (top-1 with no [batch, classes] output): the gate
    # neither passes on merit nor fails, and the report says "not applicable"
    applicable: bool = True

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def verdict(self) -> str:
        """'pass', 'FAIL', or 'n/a' where the gate does not apply, as report tables show it."""
        return "n/a" if not self.applicable else "pass" if self.passed else "FAIL"

    def describe(self) -> str:
        """'max_p99_ms: 4.45 > 0.001' for a person reading a failure."""
        if not self.applicable:
            return f"{self.name}: not applicable ({self.detail})"
        if self.value is None:
            return f"{self.name}: {self.detail}"
        sign = "<=" if self.passed else ">"
        if self.name.startswith("min"):
            sign = ">=" if self.passed else "<"
        return f"{self.name}: {_num(self.value)} {sign} {_num(self.limit)}" + (
            f" ({self.detail})" if self.detail else ""
        )


def _num(x) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def _worst(metrics: Measured, field: str, pick) -> tuple[float | None, str]:
    values = [(out[field], name) for name, out in (metrics.accuracy or {}).items() if field in out]
    if not values:
        return None, NOT_APPLICABLE.get(field, f"no output has {field}")
    value, name = pick(values)
    return value, (f"worst output {name}" if len(values) > 1 else "")


# why an accuracy figure can be missing from every output of a model
NOT_APPLICABLE = {
    "top1_agreement": "no output is [batch, classes] scores: top-1 is measured on classifiers' scores only (not "
    "on maps, boxes or an embedding's features)",
    "top5_agreement": "no output is [batch, classes] with at least 5 classes",
}
ACCURACY_GATES = ("max_abs_error", "max_rel_error", "min_cosine", "min_sqnr_db", "min_top1_agreement")

# gate name -> (how to read its value from metrics, how a value passes against the limit)
Reader = Callable[[Measured], tuple[float | None, str]]
GATES: dict[str, tuple[Reader, Callable[[float, float], bool]]] = {
    "max_abs_error": (lambda m: _worst(m, "max_abs", max), operator.le),
    "max_rel_error": (lambda m: _worst(m, "max_rel", max), operator.le),
    "min_cosine": (lambda m: _worst(m, "cosine", min), operator.ge),
    "min_sqnr_db": (lambda m: _worst(m, "sqnr_db", min), operator.ge),
    "min_top1_agreement": (lambda m: _worst(m, "top1_agreement", min), operator.ge),
    "max_p50_ms": (lambda m: (m.latency_ms["median"], busy(m)), operator.le),
    "max_p99_ms": (lambda m: (m.latency_ms["p99"], busy(m)), operator.le),
    "min_throughput": (lambda m: (m.latency_ms["throughput"], busy(m)), operator.ge),
}
BUSY_SHARE = 0.25  # other processes' share of the CPUs above which a latency is flagged (quiet: a few %)
THROTTLED_SHARE = 0.01  # throttled at all, in effect: each throttled period stalls every thread for its rest


def busy(metrics: Measured) -> str:
    """Why a latency may be the machine's more than the library's: other processes kept its CPUs busy while
    it was timed (metrics.others_share), or a CPU quota held it back (metrics.throttled_share)."""
    causes = []
    if (metrics.others_cpu or 0.0) > BUSY_SHARE:
        causes.append(f"other processes used {metrics.others_cpu:.0%} of the CPUs")
    if (metrics.throttled or 0.0) > THROTTLED_SHARE:
        causes.append(f"a CPU quota withheld {metrics.throttled:.0%} of its CPUs' time")
    return f"timed while {' and '.join(causes)}" if causes else ""


# baseline gate -> (statistic, the change as the gate states it (from current / baseline), a regression when)
BASELINE_GATES = {
    "max_p50_increase": ("median", lambda ratio: ratio - 1, operator.gt),
    "max_p99_increase": ("p99", lambda ratio: ratio - 1, operator.gt),
    "min_throughput_ratio": ("throughput", lambda ratio: ratio, operator.lt),
}


# the gates a timing decides: a machine's figure as much as a library's (busy, throttled, noisy), so a build
# whose cached figures fail one times it again rather than failing from the cache (reports/remeasure.py)
TIMING_GATES = ("max_p50_ms", "max_p99_ms", "min_throughput", *BASELINE_GATES)


# baseline accuracy gate -> the per-output figure whose drop from the baseline it bounds
ACCURACY_DROPS = {"max_cosine_drop": "cosine", "max_sqnr_drop_db": "sqnr_db"}
COMPARED = ("cosine", "sqnr_db", "max_abs")  # the per-output figures set side by side with the baseline's


def evaluate(spec: ValidationSpec, metrics: Measured | None, baseline: dict | None = None) -> list[GateResult]:
    """Every configured gate's value, limit and verdict for one build's metrics."""
    if metrics is None:
        return []
    if not metrics.ran:
        passed = spec.not_run_here == "pass"
        return [GateResult("runs_here", None, None, passed, f"not run here: {metrics.reason}")]
    results = []
    for name, limit in spec.gates.model_dump().items():
        if limit is None:
            continue
        if name not in ACCURACY_GATES and emulated(metrics):  # the others are latency gates
            results.append(_not_timed_on_hardware(name, limit, metrics))
            continue
        read, ok = GATES[name]
        value, detail = read(metrics)
        if value is None and name in ACCURACY_GATES and metrics.accuracy:
            results.append(GateResult(name, None, limit, True, detail, applicable=False))
            continue
        results.append(GateResult(name, value, limit, value is not None and ok(value, limit), detail))
    return results + _baseline_gates(spec, metrics, baseline)


def emulated(metrics: Measured) -> str | None:
    """The emulator where the device that ran the library is one (its own word, measurement/device.py)."""
    return (metrics.machine or {}).get("emulated")


def _not_timed_on_hardware(name: str, limit: float, metrics: Measured) -> GateResult:
    # an emulator's speed says nothing about the board's: such a gate would pass or fail at random
    return GateResult(name, None, limit, True, f"timed on an emulated device ({emulated(metrics)})", applicable=False)


def _baseline_gates(spec: ValidationSpec, metrics: Measured, baseline: dict | None) -> list[GateResult]:
    """Against an earlier report. Latency: with raw samples on both sides, a gate fails only when the
    bootstrap interval of the change lies wholly past its limit (validation/regression.py); where the
    baseline's library was timed together with this one, against those paired runs; a baseline written
    before samples were kept is compared by its point estimates. Accuracy: output by output."""
    if spec.baseline is None or baseline is None:  # no baseline report this time: nothing to compare with
        return []
    results = []
    paired = metrics.baseline_latency_ms is not None
    base = metrics.baseline_latency_ms if paired else baseline.get("latency_ms") or {}
    for name, limit in spec.baseline.model_dump(exclude={"report", "timed_together"}).items():
        if limit is None:
            continue
        if name in ACCURACY_DROPS:
            results.append(_accuracy_drop(name, limit, accuracy_changes(metrics.accuracy, baseline.get("accuracy"))))
            continue
        if emulated(metrics):
            results.append(_not_timed_on_hardware(name, limit, metrics))
            continue
        stat, form, regressed = BASELINE_GATES[name]
        if stat not in base:
            results.append(GateResult(name, None, limit, False, "the baseline report has no timing for this build"))
            continue
        now_samples, base_samples = metrics.latency_ms.get("samples_ms"), base.get("samples_ms")
        if not (now_samples and base_samples):
            value = form(metrics.latency_ms[stat] / base[stat])
            results.append(
                GateResult(
                    name,
                    value,
                    limit,
                    not regressed(value, limit),
                    f"baseline {stat} {base[stat]:.4g}; point estimates (no samples to bootstrap)",
                )
            )
            continue
        from modelbuild.validation.regression import change  # numpy: only builds with a baseline pay for it

        c = change(
            now_samples,
            base_samples,
            stat,
            now_blocks=metrics.latency_ms.get("blocks"),
            base_blocks=base.get("blocks"),
            paired=paired,
        )
        low, high = form(c.low), form(c.high)
        best, worst = (low, high) if regressed is operator.gt else (high, low)
        failed = regressed(best, limit)  # even the most favourable end of the interval is past the limit
        verdict = "a regression" if failed else "within noise" if regressed(worst, limit) else "within the limit"
        where = "its library timed in turns with this one" if paired else "from its report"
        results.append(
            GateResult(
                name,
                form(c.ratio),
                limit,
                not failed,
                f"baseline {stat} {base[stat]:.4g} ({where}); 95% interval {_signed(low, stat)} .. "
                f"{_signed(high, stat)}: {verdict}",
            )
        )
    return results


def accuracy_changes(now: dict | None, base: dict | None) -> dict[str, dict[str, list[float]]]:
    """For each output both builds have: each compared figure as [baseline, now]."""
    if not now or not base:
        return {}
    return {
        output: {
            k: [base[output][k], figures[k]]
            for k in COMPARED
            if figures.get(k) is not None and base[output].get(k) is not None
        }
        for output, figures in now.items()
        if output in base
    }


def _accuracy_drop(name: str, limit: float, changes: dict[str, dict[str, list[float]]]) -> GateResult:
    figure = ACCURACY_DROPS[name]
    drops = {output: _drop(*c[figure]) for output, c in changes.items() if figure in c}
    if not drops:
        return GateResult(name, None, limit, False, f"the baseline report has no {figure} for this build's outputs")
    worst = max(drops, key=drops.get)
    before, after = changes[worst][figure]
    return GateResult(
        name,
        drops[worst],
        limit,
        drops[worst] <= limit,
        f"worst output {worst!r}: {before:.6g} in the baseline, {after:.6g} now",
    )


def _drop(before: float, after: float) -> float:
    return 0.0 if before == after else before - after  # inf == inf (an exact SQNR on both sides) is no drop


def _signed(value: float, stat: str) -> str:
    return f"{value:.3g}x" if stat == "throughput" else f"{value:+.1%}"
