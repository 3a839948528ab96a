"""The contract every search algorithm keeps, run against each registered one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import shared
from storetune.runners import Status
from storetune.runners.tables import load_table
from storetune.search_spaces import InvalidConfig, config_hash, load_space
from storetune.tuner import SEARCH_ALGORITHMS, make_tuner

SPACES = {
    "storage_v1": lambda: load_space("storage_v1"),
    "admission": lambda: load_space("admission"),
    "BDBC": lambda: load_table(shared("moot_configs/BDBC.csv")).space,
}


def toy_loss(config) -> float:
    """A deterministic loss over any configuration, for driving algorithms without a runner: the same in
    every process (``config_hash``, not Python's salted ``hash``), so that a failure can be replayed."""
    return float(np.random.default_rng(int(config_hash(config), 16)).random())


@pytest.fixture(params=list(SEARCH_ALGORITHMS))
def algorithm(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=list(SPACES))
def space(request: pytest.FixtureRequest):
    return SPACES[request.param]()


# Enough evaluations for every algorithm to pass its start (BO's 10 random points, GA's first generation,
# DQN's 16 transitions) and ask from its model; more only repeat the same asks at GP-refit cost (BO and
# auto took 490 s of the suite's 2,530 at 60/30/80 evaluations).
def drive(tuner, evaluations: int, batch: int = 1) -> list:
    asked = []
    while len(asked) < evaluations:
        configs = tuner.ask(batch)
        if not configs:
            break
        for c in configs:
            tuner.tell(c, toy_loss(c))
        asked += configs
    return asked


def test_stays_inside_the_space_and_its_conditions(algorithm, space):
    tuner = make_tuner(algorithm, space, seed=0, direction="min")
    for config in drive(tuner, 36, batch=3):
        assert space.validate(config) == config
        assert space.contains(config)


def test_the_same_seed_gives_the_same_suggestions(algorithm, space):
    first = drive(make_tuner(algorithm, space, seed=5, direction="min"), 20)
    again = drive(make_tuner(algorithm, space, seed=5, direction="min"), 20)
    other = drive(make_tuner(algorithm, space, seed=6, direction="min"), 20)
    assert first == again
    assert first != other


def test_ask_n_gives_n_distinct_new_configurations(algorithm, space):
    tuner = make_tuner(algorithm, space, seed=1, direction="min")
    seen = set()
    for _ in range(5):
        batch = tuner.ask(4)
        assert len(batch) == 4 and len(set(batch)) == 4
        assert not seen & set(batch)
        seen |= set(batch)
        for c in batch:
            tuner.tell(c, toy_loss(c))


def test_reserved_configurations_are_never_proposed(algorithm, space):
    """A resumed campaign re-runs its stale trials from a queue, asked by nobody: while they are in
    flight, the algorithm must not propose them again (the loop reserves them)."""
    first = drive(make_tuner(algorithm, space, seed=7, direction="min"), 12)
    tuner = make_tuner(algorithm, space, seed=7, direction="min")  # the same seed proposes the same first ones
    reserved = first[:6]
    tuner.reserve(reserved)
    asked = drive(tuner, 20)
    assert not set(asked) & set(reserved)


def test_failed_and_invalid_configurations_are_never_proposed_again(algorithm, space):
    tuner = make_tuner(algorithm, space, seed=2, direction="min")
    refused = set()
    for i in range(45):
        (config,) = tuner.ask(1)
        assert config not in refused
        if i % 3 == 0:
            tuner.tell(config, None, Status.INVALID if i % 2 else Status.FAILED)
            refused.add(config)
        else:
            tuner.tell(config, toy_loss(config))


def test_a_nan_value_counts_as_failed(algorithm, space):
    tuner = make_tuner(algorithm, space, seed=3, direction="max")
    (config,) = tuner.ask(1)
    tuner.tell(config, math.nan)
    assert tuner.observations[-1].status is Status.FAILED and tuner.best is None


def test_direction_is_normalised(algorithm, space):
    tuner = make_tuner(algorithm, space, seed=4, direction="max")
    a, b = tuner.ask(2)
    tuner.tell(a, 10.0)
    tuner.tell(b, 20.0)
    assert tuner.best.config == b and tuner.best.loss == -20.0


def test_telling_a_configuration_outside_the_space_raises(algorithm, space):
    tuner = make_tuner(algorithm, space, seed=0, direction="min")
    config = tuner.ask(1)[0].replace(no_such_knob=1)
    with pytest.raises(InvalidConfig):
        tuner.tell(config, 1.0)


def test_a_finite_space_is_exhausted_without_repeats(algorithm):
    space = load_table(shared("cao_atc18_subset"), {"workload_id": 4, "disk_type": 0}).space
    tuner = make_tuner(algorithm, space, seed=0, direction="min")
    asked = drive(tuner, space.cardinality() + 10, batch=16)
    assert len(asked) == len(set(asked)) == space.cardinality()
    assert tuner.ask(1) == []


def test_unknown_algorithms_and_hyperparameters_are_refused():
    space = load_space("storage_v1")
    with pytest.raises(ValueError, match="unknown algorithm 'annealing'; known: random, sa, ga, bo, dqn"):
        make_tuner("annealing", space, seed=0, direction="min")
    with pytest.raises(ValueError, match="unknown hyperparameter 'rate' for random"):
        make_tuner("random", space, seed=0, direction="min", params={"rate": "1"})


def test_a_space_that_starts_at_its_defaults_is_asked_them_first_and_once(algorithm):
    space = load_space("admission").fix({"replicas": 2})
    asked = drive(make_tuner(algorithm, space, seed=0, direction="min"), 12, batch=3)
    assert asked[0] == space.default() and asked.count(space.default()) == 1
    resumed = make_tuner(algorithm, space, seed=0, direction="min")
    resumed.tell(space.default(), 1.0)  # measured before a resume, or warm-started
    assert space.default() not in drive(resumed, 6)
    assert load_space("storage_v1").start is None  # a space that does not say so starts where it always did
