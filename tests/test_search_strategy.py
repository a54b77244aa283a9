"""The search's walk, on models of accuracy and cost whose answer is known: it must find what trying every
candidate of the same space finds, in fewer candidates, and stop at its budget."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

from modelbuild.search.strategy import Candidate, Outcome, Settings, Space, Walk, chosen, fewest_raised, frontier, walk

LAYERS = tuple(f"conv{i}" for i in range(12))
NEAREST = Settings("nearest", "minmax", 32)
GPTQ = Settings("gptq", "minmax", 32)
COST = {"int8": 0.0, "int16": 1.0, "float": 1.6}  # ms each raised layer adds


def model(needed: dict[tuple[str, Settings], int], *, int8_passes: frozenset[Settings] = frozenset()):
    """An evaluate function: a candidate passes when it raises at least needed[(precision, settings)] layers
    of the ranking's head (never, where absent), or its settings are in `int8_passes`; its latency is 10 ms
    plus each raised layer's cost."""

    def evaluate(candidate: Candidate) -> Outcome:
        k = len(candidate.raised)
        passed = candidate.settings in int8_passes or (
            k > 0 and k >= needed.get((candidate.precision, candidate.settings), math.inf)
        )
        return Outcome(
            passed,
            10 + COST[candidate.precision] * k,
            margin=0.1 if passed else -1 + k / 100,
            accuracy=0.999 if passed else 0.98 + k / 1000,
            ranking=LAYERS,
        )

    return evaluate


def brute_force(space: Space, evaluate) -> tuple[Candidate, Outcome] | None:
    """Every candidate of the space: each setting with nothing raised, and each prefix of the ranking in each
    precision."""
    trials = {}
    for settings in space.settings:
        trials[Candidate(settings)] = evaluate(Candidate(settings))
        for precision, k in itertools.product(space.precisions, range(1, len(LAYERS) + 1)):
            candidate = Candidate(settings, LAYERS[:k], precision)
            trials[candidate] = evaluate(candidate)
    return chosen(trials)


@pytest.mark.parametrize("needed", range(1, len(LAYERS) + 1))
def test_the_walk_finds_the_fewest_raised_layers_that_pass_in_a_few_candidates(needed):
    space = Space(("int16",), (NEAREST,))
    evaluate = model({("int16", NEAREST): needed})
    tried = walk(space, evaluate, lambda built: True)
    best = chosen(tried.tried)
    assert best == brute_force(space, evaluate)
    assert best[0].raised == LAYERS[:needed]
    # 1 + doubling up to 12 (1, 2, 4, 8, 12) + bisection: under half of the 13 candidates of the space
    assert len(tried.tried) <= 1 + 2 * math.ceil(math.log2(len(LAYERS)))


def test_each_precision_is_walked_and_the_objective_chooses_between_them():
    space = Space(("int16", "float"), (NEAREST,))
    evaluate = model({("int16", NEAREST): 5, ("float", NEAREST): 2})  # 5 ms against 3.2 ms
    tried = walk(space, evaluate, lambda built: True)
    assert chosen(tried.tried)[0] == Candidate(NEAREST, LAYERS[:2], "float")
    assert chosen(tried.tried) == brute_force(space, evaluate)
    assert len(tried.tried) < (1 + 2 * len(LAYERS)) / 2


def test_a_setting_that_passes_with_fewer_raised_layers_is_found():
    space = Space(("int16",), (NEAREST, GPTQ))
    evaluate = model({("int16", NEAREST): 6, ("int16", GPTQ): 3})
    tried = walk(space, evaluate, lambda built: True)
    assert chosen(tried.tried)[0] == Candidate(GPTQ, LAYERS[:3], "int16")
    assert chosen(tried.tried) == brute_force(space, evaluate)


def test_when_everything_passes_in_int8_nothing_is_raised():
    space = Space(("int16", "float"), (NEAREST, GPTQ))
    evaluate = model({}, int8_passes=frozenset({GPTQ}))
    tried = walk(space, evaluate, lambda built: True)
    assert list(tried.tried) == [Candidate(NEAREST), Candidate(GPTQ)]
    assert chosen(tried.tried)[0] == Candidate(GPTQ)


def test_nothing_passes_and_the_walk_says_so():
    tried = walk(Space(("int16",), (NEAREST,)), model({}), lambda built: True)
    assert chosen(tried.tried) is None
    assert Candidate(NEAREST, LAYERS, "int16") in tried.tried  # it went as far as raising every layer


def test_the_walk_stops_at_its_budget():
    evaluate = model({("int16", NEAREST): 9})
    tried = walk(Space(("int16",), (NEAREST,)), evaluate, lambda built: built < 3)
    assert len(tried.tried) == 3 and chosen(tried.tried) is None


def test_a_candidate_is_built_once():
    calls = []

    def evaluate(candidate):
        calls.append(candidate)
        return model({("int16", NEAREST): 4})(candidate)

    tried = Walk(evaluate, lambda built: True)
    assert fewest_raised(tried, LAYERS, "int16", NEAREST, len(LAYERS)) == 4
    assert fewest_raised(tried, LAYERS, "int16", NEAREST, len(LAYERS)) == 4
    assert len(calls) == len(set(calls)) == len(tried.tried)


def test_the_fewest_raised_layers_below_a_cap():
    tried = Walk(model({("int16", NEAREST): 4}), lambda built: True)
    assert fewest_raised(tried, LAYERS, "int16", NEAREST, 3) is None
    assert fewest_raised(tried, LAYERS, "int16", NEAREST, 0) is None
    assert fewest_raised(tried, LAYERS, "int16", NEAREST, 6) == 4


def test_equal_objectives_choose_fewer_raised_layers_and_the_frontier_drops_dominated_candidates():
    a, b, c, d = (Candidate(NEAREST, LAYERS[:k], "int16") for k in range(4))
    trials = {
        a: Outcome(False, 10.0, -1, accuracy=0.95),
        b: Outcome(True, 11.0, 0.1, accuracy=0.995),
        c: Outcome(True, 11.0, 0.2, accuracy=0.999),
        d: Outcome(True, 12.0, 0.1, accuracy=0.997),
    }
    assert chosen(trials)[0] == b
    assert frontier(trials) == [a, c]  # b and d: c is as fast or faster and more accurate


def test_the_space_has_every_combination_of_settings_the_sections_first():
    space = Space.of(["float"], ["nearest", "gptq"], ["minmax"], [32, 64])
    assert space.settings[0] == NEAREST and len(space.settings) == 4
    assert Settings("gptq", "minmax", 64) in space.settings


def test_candidates_within_the_timing_noise_are_equal_and_fewer_raised_layers_win():
    a, b, c = (Candidate(NEAREST, LAYERS[:k], "int16") for k in (1, 3, 4))
    trials = {a: Outcome(True, 10.5, 0.1), b: Outcome(True, 10.0, 0.1), c: Outcome(True, 8.0, 0.1)}
    assert chosen(trials)[0] == c and chosen(trials, noise=0.1)[0] == c  # 8.0 is faster beyond the noise
    trials[c] = Outcome(True, 9.8, 0.1)
    assert chosen(trials)[0] == c and chosen(trials, noise=0.1)[0] == a


def test_of_equally_fast_settings_the_widest_accuracy_margin_wins():
    nearest, gptq = Candidate(NEAREST), Candidate(GPTQ)
    trials = {nearest: Outcome(True, 8.03, margin=0.0006), gptq: Outcome(True, 8.02, margin=0.0001)}
    assert chosen(trials, noise=0.1)[0] == nearest
    assert chosen(trials)[0] == gptq  # without the noise, 8.02 is faster


def test_ratios_to_the_float_library_timed_beside_each_candidate_choose_where_every_candidate_has_one():
    nearest, gptq = Candidate(NEAREST), Candidate(GPTQ)
    # gptq's process ran slow (9.0 ms), but beside the float library it is the faster: 0.40x against 0.46x
    trials = {nearest: Outcome(True, 8.0, 0.1, vs_float=0.46), gptq: Outcome(True, 9.0, 0.1, vs_float=0.40)}
    assert chosen(trials, noise=0.1)[0] == gptq
    trials[gptq] = Outcome(True, 9.0, 0.1)  # one without: the latencies decide
    assert chosen(trials, noise=0.1)[0] == nearest


def test_the_frontier_compares_paired_ratios_where_every_candidate_has_one():
    nearest, gptq = Candidate(NEAREST), Candidate(GPTQ)
    trials = {
        nearest: Outcome(True, 8.0, 0.1, accuracy=0.995, vs_float=0.46),
        gptq: Outcome(True, 9.0, 0.1, accuracy=0.996, vs_float=0.40),
    }
    assert frontier(trials) == [gptq]  # faster beside the float library, and more accurate
    unpaired = {c: replace(o, vs_float=None) for c, o in trials.items()}
    assert frontier(unpaired) == [nearest, gptq]
