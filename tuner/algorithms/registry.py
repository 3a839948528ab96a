"""Algorithm names and their classes, imported only when asked for, so that ``import tuner``
never loads torch, skopt or Ray (the pattern of optuna's ``_imports.py``).

Other packages (and the benchmarks' peers) add algorithms with ``register``; what travels to
worker processes is the ``module:Class`` target, so workers need no registration of their own.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from storetune.runners import Direction
from storetune.search_spaces import SearchSpace
from storetune.tuner.algorithms.base import Tuner

ALGORITHMS: dict[str, str] = {
    "random": "storetune.tuner.algorithms.random_search:RandomSearch",
    "sa": "storetune.tuner.algorithms.annealing:SimulatedAnnealing",
    "ga": "storetune.tuner.algorithms.genetic:GeneticAlgorithm",
    "bo": "storetune.tuner.algorithms.bayes:BayesianOptimization",
    "dqn": "storetune.tuner.algorithms.dqn:DeepQNetwork",
    "auto": "storetune.tuner.algorithms.portfolio:Portfolio",  # a bandit over bo, ga and sa
    "grid": "storetune.tuner.algorithms.grid:GridSearch",  # a fixed stratified sample, for sweeps
    "nsga2": "storetune.tuner.algorithms.nsga2:NSGA2",  # multi-objective: the Pareto set of a pareto objective
}


# The search algorithms (the contract suite and `compare` default to these; a grid does not search).
SEARCH_ALGORITHMS = ("random", "sa", "ga", "bo", "dqn", "auto")

# What `tune` (and the service) searches with when no algorithm is named.
DEFAULT_ALGORITHM = "auto"  # bench/compare_algorithms.py: the best or near the best on every table

# What can search a Pareto objective: a multi-objective algorithm, and random search (which needs no
# loss). The others learn from one scalar per trial; a scalarisation that changes per ask (ParEGO) does
# not fit their tell-once model, so they are refused rather than fed a fixed compromise.
PARETO_ALGORITHMS = ("nsga2", "random")
DEFAULT_PARETO_ALGORITHM = "nsga2"


def default_algorithm(objective_kind: str | None = None) -> str:
    """What a campaign searches with when no algorithm is named: nsga2 for a Pareto objective."""
    return DEFAULT_PARETO_ALGORITHM if objective_kind == "pareto" else DEFAULT_ALGORITHM


def check_pareto_algorithm(name: str) -> None:
    if name not in PARETO_ALGORITHMS:
        raise ValueError(f"{name} searches for one value and cannot search a Pareto set: use "
                         f"{' or '.join(PARETO_ALGORITHMS)} (or a weighted or rank `objective`)")


def register(name: str, target: str) -> None:
    """Make ``name`` stand for the Tuner subclass at ``target`` ("package.module:Class")."""
    ALGORITHMS[name] = target


def algorithm_target(name: str) -> str:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}") from None


# the algorithms whose libraries are an extra of their own (pyproject.toml)
EXTRAS = {"storetune.tuner.algorithms.dqn": "rl"}


def load_target(target: str) -> type[Tuner]:
    module, cls = target.split(":")
    if module in EXTRAS:
        from storetune.extras import need

        return getattr(need(module, EXTRAS[module]), cls)
    return getattr(importlib.import_module(module), cls)


def algorithm_class(name: str) -> type[Tuner]:
    return load_target(algorithm_target(name))


def make_tuner(
    name: str,
    space: SearchSpace,
    *,
    seed: int,
    direction: Direction,
    params: Mapping[str, Any] | None = None,
    target: str | None = None,
) -> Tuner:
    """The algorithm ``name`` (or the class at ``target``) on ``space``; unknown names and
    hyperparameters raise ValueError."""
    cls = load_target(target) if target else algorithm_class(name)
    return cls(space, seed=seed, direction=direction, params=params)
