"""The rung schedule and ASHA's rule: which runs go on past a rung, and schedules that cannot be used."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from storetune.tuner.objectives.fidelity import RungError, Rungs, SuccessiveHalving


def test_a_geometric_schedule_ends_at_the_run_s_length():
    assert Rungs.geometric(30).lengths == (1, 3, 9, 30)  # 27 is too close to 30 to be worth a rung
    assert Rungs.geometric(10, eta=2, min_s=1).lengths == (1, 2, 4, 10)  # 8 is within sqrt(2) of 10
    assert Rungs.geometric(3, min_s=3).lengths == (3,)
    assert Rungs.geometric(30, min_s=2).full_s == 30


def test_a_schedule_that_cannot_fit_is_one_line_naming_the_values():
    with pytest.raises(RungError, match=r"the shortest rung \(40 s\) must be positive and at most the run's length \(30 s\)"):
        Rungs.geometric(30, min_s=40)
    with pytest.raises(RungError, match="eta must be a number above 1"):
        Rungs.geometric(30, eta=1)
    with pytest.raises(RungError, match="rungs must be positive run lengths that grow: 3, 3, 10 s"):
        Rungs((3, 3, 10))
    with pytest.raises(RungError, match=r"the last rung \(10 s\) must be the run's length \(30 s\): rungs 1, 3, 10 s"):
        Rungs((1, 3, 10)).check(30)
    with pytest.raises(RungError, match="a budget of 20 device-seconds cannot pay for one run of 30 s"):
        Rungs.geometric(30).check(30, budget_s=20)
    Rungs.geometric(30).check(30, budget_s=3600)


def test_a_run_goes_on_only_in_the_best_third_of_its_rung():
    asha = SuccessiveHalving(Rungs((1, 3, 9), eta=3))
    assert [asha.judge(0, v) for v in (10, 20, 30, 40)] == [True] * 4  # each the best so far
    assert [asha.judge(0, v) for v in (5, 6, 7)] == [False] * 3  # below what the rung has seen
    assert asha.judge(0, 35)  # among the best third of the eight
    assert not asha.judge(2, 1e9)  # the full length: nothing to go on to
    lower = SuccessiveHalving(Rungs((1, 3), eta=3), direction="min")  # a latency
    assert [lower.judge(0, v) for v in (10, 5, 20, 30)] == [True, True, False, False]
    with pytest.raises(ValueError, match="finite"):
        lower.judge(0, float("nan"))


def test_about_one_run_in_eta_goes_on_when_values_come_in_random_order():
    rng = np.random.default_rng(0)
    for eta in (2, 3, 4):
        asha = SuccessiveHalving(Rungs((1, 10), eta=eta))
        share = np.mean([asha.judge(0, v) for v in rng.normal(size=3000)])
        assert share == pytest.approx(1 / eta, abs=0.03), (eta, share)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=60), st.sampled_from([2.0, 3.0, 4.0]))
def test_the_best_so_far_always_goes_on_and_a_strictly_worst_never_does(values, eta):
    asha = SuccessiveHalving(Rungs((1, 2), eta=eta))
    for i, v in enumerate(values):
        seen = values[:i]
        went_on = asha.judge(0, v)
        if all(v >= s for s in seen):
            assert went_on
        if seen and all(v < s for s in seen):
            assert not went_on
