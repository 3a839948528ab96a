"""Algorithm names and their classes, imported only when asked for, so that ``import tuner``
never loads torch, skopt or Ray (the pattern of optuna's ``_imports.py``)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from runners import Direction
from search_spaces import SearchSpace
from tuner.base import Tuner

ALGORITHMS: dict[str, str] = {
    "random": "tuner.random_search:RandomSearch",
}


def algorithm_class(name: str) -> type[Tuner]:
    try:
        module, cls = ALGORITHMS[name].split(":")
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}") from None
    return getattr(importlib.import_module(module), cls)


def make_tuner(
    name: str,
    space: SearchSpace,
    *,
    seed: int,
    direction: Direction,
    params: Mapping[str, Any] | None = None,
) -> Tuner:
    """The algorithm ``name`` on ``space``; unknown names and hyperparameters raise ValueError."""
    return algorithm_class(name)(space, seed=seed, direction=direction, params=params)
