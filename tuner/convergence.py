"""How fast searches reach near-optimal configurations, judged on an exhaustive table's means.

A configuration is near-optimal when its mean is at least ``within`` x the best mean (maximising),
or at most the best mean / ``within`` (minimising): the definition of the ATC'18 study.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import hypergeom

from search_spaces import Config
from search_spaces.status import best_of, within_of_best


def near_optimal(means: Mapping[Config, float], direction: str, within: float = 0.99) -> set[Config]:
    """The configurations whose table mean is within ``within`` of the best one."""
    if not 0 < within <= 1:
        raise ValueError(f"--within must be in (0, 1], not {within}")
    best = best_of(list(means.values()), direction)
    return {c for c, v in means.items() if within_of_best(v, best, direction, within)}


def evaluations_to_hit(evaluated: Sequence[Config], targets: set[Config]) -> int | None:
    """The 1-based evaluation at which a target was first measured, or None."""
    for k, config in enumerate(evaluated, start=1):
        if config in targets:
            return k
    return None


def success_curve(hits: Sequence[int | None], budget: int) -> list[float]:
    """For k = 1..budget, the share of runs that had measured a target within k evaluations."""
    reached = np.array([h for h in hits if h is not None], dtype=int)
    counts = np.bincount(reached, minlength=budget + 1)[1 : budget + 1]
    return (np.cumsum(counts) / max(len(hits), 1)).tolist()


def random_success_curve(size: int, targets: int, budget: int) -> list[float]:
    """Random search without replacement, exactly: 1 - P(no target among k draws), hypergeometric."""
    k = np.arange(1, budget + 1)
    return (1.0 - hypergeom.pmf(0, size, targets, k)).tolist()


@dataclass(frozen=True)
class EvaluationsToTarget:
    """The median evaluations to near-optimal over seeds, a run that never hits counting as budget+1."""

    median: float
    p25: float
    p75: float
    censored: int  # runs that never hit within the budget

    @classmethod
    def of(cls, hits: Sequence[int | None], budget: int) -> EvaluationsToTarget:
        values = np.array([budget + 1 if h is None else h for h in hits], dtype=float)
        p25, median, p75 = np.percentile(values, [25, 50, 75])
        return cls(float(median), float(p25), float(p75), sum(h is None for h in hits))
