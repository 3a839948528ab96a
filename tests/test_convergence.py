"""Near-optimal sets, success curves and random search's exact curve."""

from __future__ import annotations

import numpy as np
import pytest

from storetune.search_spaces import Config
from storetune.tuner.analysis.convergence import (
    EvaluationsToTarget, evaluations_to_hit, near_optimal, random_success_curve, success_curve, within_for_share,
)


def test_near_optimal_in_both_directions():
    means = {Config(a=i): v for i, v in enumerate([100.0, 99.5, 98.0, 50.0])}
    assert near_optimal(means, "max", 0.99) == {Config(a=0), Config(a=1)}
    means = {Config(a=i): v for i, v in enumerate([1.0, 1.01, 1.02, 2.0])}
    assert near_optimal(means, "min", 0.99) == {Config(a=0), Config(a=1)}  # <= 1 / 0.99 = 1.0101
    with pytest.raises(ValueError, match=r"`within` must be in \(0, 1\]"):
        near_optimal(means, "min", 1.5)


@pytest.mark.parametrize("direction", ["min", "max"])
def test_the_threshold_is_chosen_so_that_a_tenth_to_one_percent_is_near_optimal(direction):
    rng = np.random.default_rng(3)
    sign = 1 if direction == "min" else -1
    crowded = {Config(a=i): 100 + sign * v for i, v in enumerate(rng.random(2000))}  # 1% of the best: ~50%
    within = within_for_share(crowded, direction)
    assert within > 0.99 and len(near_optimal(crowded, direction, within)) == 20  # 1% of 2000
    sparse = {Config(a=i): 100 + sign * v for i, v in enumerate(10_000 * rng.random(2000))}  # 1%: ~0.2 configs
    within = within_for_share(sparse, direction)
    assert within < 0.99 and len(near_optimal(sparse, direction, within)) == 2  # 0.1% of 2000
    # the threshold is a short decimal that, printed and read back, admits the same configurations
    assert float(f"{within:.15g}") == within and len(repr(within)) <= 10, within
    assert len(near_optimal(sparse, direction, float(repr(within)))) == 2
    # where 1% of the best already admits 0.1% to 1%, the threshold stays there
    fine = {Config(a=i): 100 + sign * (0 if i < 10 else 5) for i in range(2000)}
    assert within_for_share(fine, direction) == 0.99


def test_success_curve_and_censoring():
    hits = [1, 3, None, 3]
    assert success_curve(hits, 4) == [0.25, 0.25, 0.75, 0.75]
    e = EvaluationsToTarget.of(hits, budget=4)
    assert e.censored == 1 and e.median == 3.0  # the censored run counts as 5
    assert evaluations_to_hit([Config(a=2), Config(a=7)], {Config(a=7)}) == 2


def test_random_curve_matches_the_hypergeometric_formula_and_a_simulation():
    size, targets, budget = 50, 3, 30
    exact = random_success_curve(size, targets, budget)
    from math import comb

    assert exact[9] == pytest.approx(1 - comb(size - targets, 10) / comb(size, 10))
    rng = np.random.default_rng(0)
    hits = []
    for _ in range(4000):  # draws without replacement: the first target's position in a permutation
        order = rng.permutation(size)
        hits.append(int(np.flatnonzero(order < targets)[0]) + 1)
    simulated = success_curve([h if h <= budget else None for h in hits], budget)
    assert np.max(np.abs(np.array(simulated) - exact)) < 0.03


def test_near_optimal_holds_for_negative_values():
    """A ratio to a negative best put the table's own optimum outside its near-optimal set."""
    means = {Config(a=i): v for i, v in enumerate([-2100.0, -2110.0, -2000.0, 50.0])}
    assert near_optimal(means, "min", within=0.99) == {Config(a=0), Config(a=1)}
    assert near_optimal(means, "max", within=0.99) == {Config(a=3)}
    assert near_optimal({Config(a=0): -100.0, Config(a=1): -100.5, Config(a=2): -102.0}, "max", 0.99) == {
        Config(a=0), Config(a=1)}


def test_a_conditional_real_parameter_is_a_number_axis_with_n_a_apart_and_shown_rounded():
    """The admission space's decision threshold applies to classifiers only: with None where it does not
    apply, its column was drawn as labels, one tick per distinct real value, unreadable; and a move's
    arithmetic (0.45500000000000007) showed in every table."""
    from types import SimpleNamespace

    from storetune.api.report.page import _parallel_lines, _parcoords
    from storetune.search_spaces import format_config
    from storetune.tuner.analysis.importance import common_values
    from storetune.tuner.analysis.report import _parallel

    trials = [SimpleNamespace(config={"model_kind": "classifier", "decision_threshold": 0.1 + 0.35 + i / 100},
                              value=10.0 + i) for i in range(5)]
    trials += [SimpleNamespace(config={"model_kind": "regressor"}, value=20.0 + i) for i in range(3)]
    (kind, threshold) = _parallel(trials, ["model_kind", "decision_threshold"], 0, "min")["dimensions"]
    assert "labels" in kind and "labels" not in threshold
    assert threshold["values"][5:] == [None] * 3 and threshold["values"][0] == 0.1 + 0.35
    par = _parallel(trials, ["model_kind", "decision_threshold"], 0, "min")
    text = _parallel_lines(par, "latency", False, "t").data[-1].text  # the axes' tick labels
    assert "n/a" in text and "0.45" in text and len(text) < 20
    webgl = _parcoords(par, "latency", "t").data[0].dimensions[1]  # the interactive view: n/a has its tick
    assert webgl.ticktext[0] == "n/a" and webgl.tickvals[0] < min(v for v in threshold["values"] if v is not None)
    assert format_config({"decision_threshold": 0.1 + 0.35 + 0.005}) == "decision_threshold=0.455"
    assert 0.1 + 0.35 + 0.005 != 0.455  # the value the table showed before
    rows = common_values([t.config for t in trials[:1]], [t.config for t in trials], ["decision_threshold"])
    assert {r["value"] for r in rows["decision_threshold"]} >= {"0.45", "n/a"}


def test_number_axes_of_parallel_coordinates_label_sizes_shortly():
    """Byte sizes read 2.621e+05 and ran into the next axis's labels ("2.621e+053.277e+04single")."""
    from types import SimpleNamespace

    from storetune.api.report.page import _parallel_lines, _ticks
    from storetune.tuner.analysis.report import _parallel

    assert _ticks([262144.0000000001, 32768, 4096]) == ["256K", "32K", "4K"]  # as a log axis gives them back
    assert _ticks([1000, 1024]) == ["1000", "1024"]  # a suffix only where every number is a size
    assert _ticks([0, 2048, 8192], sizes=False) == ["0", "2048", "8192"]  # the value axis: not a size
    assert _ticks([1e20, 2**62]) == ["1e+20", "4.612e+18"] and _ticks([0.455, 6777.2]) == ["0.455", "6777"]
    trials = [SimpleNamespace(config={"journal_size": size}, value=float(i))
              for i, size in enumerate((32768, 65536, 131072, 262144))]
    par = _parallel(trials, ["journal_size"], 0, "min")
    text = _parallel_lines(par, "ops", False, "t").data[-1].text
    assert {"32K", "64K", "128K", "256K"} <= set(text) and not any("e+" in t for t in text)
