"""The search's walk over candidate configurations: pure, so it is tested without building anything.

A configuration raises the k layers the sensitivity ranking puts first to a higher precision (int16 inputs or
float), with some weight rounding and calibration. The walk assumes what the ranking is for: raising more of
the ranking's head never loses accuracy, and every raised layer costs time. So for each precision it looks
for the smallest passing k, doubling k until one passes and then bisecting, instead of trying every subset
(2^n of them): about 2 log2(n) candidates per precision. The settings that cost no speed (weight rounding,
calibration) are tried at k = 0 first; the best of them is the walk's, and each other one is given the
chance to pass with fewer raised layers than the walk needed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Settings:
    """What a candidate sets that costs no speed."""

    weight_rounding: str
    calibration_method: str
    calibration_samples: int

    def describe(self) -> str:
        return f"{self.weight_rounding} rounding, {self.calibration_method} on {self.calibration_samples} samples"


@dataclass(frozen=True)
class Candidate:
    """One configuration: `raised` (the ranking's head) computed in `precision`, the others in int8."""

    settings: Settings
    raised: tuple[str, ...] = ()
    precision: str = "int8"  # "int16" or "float" when any layer is raised

    def describe(self) -> str:
        layers = f"{self.precision}: {', '.join(self.raised)}" if self.raised else "all int8"
        return f"{layers} ({self.settings.describe()})"


@dataclass(frozen=True)
class Outcome:
    """What a candidate's build gave."""

    passed: bool  # every stage built and every applicable accuracy gate passed
    objective: float | None  # lower is better (ms or bytes); None where nothing was measured
    margin: float  # the worst accuracy gate's distance past its limit, relative to the limit; >= 0 passes
    accuracy: float | None = None  # the worst output's cosine against fp32, for the frontier
    ranking: tuple[str, ...] = ()  # quantized layers, largest share of the output error first
    why: str = ""  # why it was rejected
    vs_float: float | None = None  # its median latency over the float library's, the two timed in turns


@dataclass(frozen=True)
class Space:
    """The candidates a [search.NAME] section allows: its precisions and every combination of its settings,
    the quantization section's own settings first."""

    precisions: tuple[str, ...]
    settings: tuple[Settings, ...]

    @classmethod
    def of(cls, precisions, roundings, methods, samples) -> Space:
        combos = tuple(Settings(*combo) for combo in itertools.product(roundings, methods, samples))
        return cls(tuple(precisions), combos)


class OutOfBudget(Exception):
    """No more candidates may be built."""


@dataclass
class Walk:
    """The candidates tried, in order, each built once."""

    evaluate: Callable[[Candidate], Outcome]
    may_continue: Callable[[int], bool]  # given the candidates built so far
    tried: dict[Candidate, Outcome] = field(default_factory=dict)

    def outcome(self, candidate: Candidate) -> Outcome:
        if candidate not in self.tried:
            if not self.may_continue(len(self.tried)):
                raise OutOfBudget
            self.tried[candidate] = self.evaluate(candidate)
        return self.tried[candidate]

    def passes(self, candidate: Candidate) -> bool:
        return self.outcome(candidate).passed


def walk(space: Space, evaluate: Callable[[Candidate], Outcome], may_continue: Callable[[int], bool]) -> Walk:
    """Try candidates until the fastest passing configuration of `space` is known or the budget ends."""
    tried = Walk(evaluate, may_continue)
    try:
        first = tried.outcome(Candidate(space.settings[0]))
        ranking = first.ranking
        plain = [Candidate(settings) for settings in space.settings]
        for candidate in plain:
            tried.outcome(candidate)
        if any(tried.passes(c) for c in plain) or not ranking:
            return tried  # nothing raised is fastest; the settings that pass are equally fast
        best = max(plain, key=lambda c: tried.outcome(c).margin).settings
        for precision in space.precisions:
            needed = fewest_raised(tried, ranking, precision, best, len(ranking))
            if needed is None:
                continue
            for other in space.settings:
                if other != best:
                    fewest_raised(tried, ranking, precision, other, needed - 1)
    except OutOfBudget:
        pass
    return tried


def fewest_raised(tried: Walk, ranking: tuple[str, ...], precision: str, settings: Settings, most: int) -> int | None:
    """The smallest k <= most whose candidate passes, by doubling k from 1 and then bisecting; None when even
    k = most fails (or most < 1)."""

    def passes(k: int) -> bool:
        return tried.passes(Candidate(settings, ranking[:k], precision))

    low, high = 0, None  # k = low fails (k = 0 was tried first), k = high passes
    k = 1
    while k <= most:
        if passes(k):
            high = k
            break
        low, k = k, (most if k < most < 2 * k else 2 * k)
    if high is None:
        return None
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if passes(middle) else (middle, high)
    return high


def chosen(trials: dict[Candidate, Outcome], noise: float = 0.0) -> tuple[Candidate, Outcome] | None:
    """The passing candidate lowest in the objective. Candidates within `noise` (a fraction) of the lowest
    are taken as equal, and of those the one with fewest raised layers wins: each candidate is timed in a
    process of its own, and every raised layer costs time however the timing fell. Between equally fast ones
    with as many raised layers (settings that cost no speed), the widest accuracy margin wins: inputs the
    gates never saw are likelier to pass there."""
    passing = [(c, o) for c, o in trials.items() if o.passed and o.objective is not None]
    if not passing:
        return None
    speed = speed_of([o for _, o in passing])
    lowest = min(speed(o) for _, o in passing)
    equal = [(c, o) for c, o in passing if speed(o) <= lowest * (1 + noise)]
    return min(equal, key=lambda co: (len(co[0].raised), -co[1].margin, speed(co[1])))


def paired(outcomes: list[Outcome]) -> bool:
    """Whether every one was timed in turns with the float library: their ratios to it then cancel what moves
    a library's latency from one process to the next."""
    return bool(outcomes) and all(o.vs_float is not None for o in outcomes)


def speed_of(outcomes: list[Outcome]) -> Callable[[Outcome], float]:
    """How these outcomes compare in speed: by their ratios to the float library where paired, else by the
    objective."""
    return (lambda o: o.vs_float) if paired(outcomes) else (lambda o: o.objective)


def frontier(trials: dict[Candidate, Outcome]) -> list[Candidate]:
    """The candidates no other beats in both speed (speed_of) and accuracy (higher worst cosine), fastest
    first."""
    measured = [(c, o) for c, o in trials.items() if o.objective is not None and o.accuracy is not None]
    speed = speed_of([o for _, o in measured])
    front = [
        c
        for c, o in measured
        if not any(
            speed(p) <= speed(o) and p.accuracy >= o.accuracy and (speed(p), p.accuracy) != (speed(o), o.accuracy)
            for _, p in measured
        )
    ]
    return sorted(front, key=lambda c: speed(trials[c]))
