"""How fast searches reach near-optimal configurations, judged on an exhaustive table's means.

A configuration is near-optimal when its mean is at least ``within`` x the best mean (maximising),
or at most the best mean / ``within`` (minimising): the definition of the ATC'18 study.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from storetune.search_spaces import Config
from storetune.search_spaces.status import best_of, within_of_best


def near_optimal(means: Mapping[Config, float], direction: str, within: float = 0.99) -> set[Config]:
    """The configurations whose table mean is within ``within`` of the best one."""
    if not 0 < within <= 1:
        raise ValueError(f"`within` must be in (0, 1], not {within}")
    best = best_of(list(means.values()), direction)
    return {c for c, v in means.items() if within_of_best(v, best, direction, within)}


def within_for_share(means: Mapping[Config, float], direction: str, low: float = 0.001, high: float = 0.01,
                     preferred: float = 0.99) -> float:
    """A near-optimal threshold under which ``low`` to ``high`` of the table's configurations are
    near-optimal: ``preferred`` when it already does, else the threshold that admits the k best, with
    k the nearest count inside the range (at least 1). Search only matters on a table where few
    configurations are good: at 1% of BDBC's best 0.16% are, at 1% of PostgreSQL's best 50%."""
    if not 0 < low <= high < 1:
        raise ValueError(f"the near-optimal share must satisfy 0 < low <= high < 1, not {low}, {high}")
    values = np.array(list(means.values()), dtype=float)
    n = len(values)
    share = len(near_optimal(means, direction, preferred)) / n
    if low <= share <= high:
        return preferred
    k = max(1, int(np.floor(high * n))) if share > high else max(1, int(np.ceil(low * n)))
    ordered = np.sort(values) if direction == "min" else np.sort(values)[::-1]
    best, kth = float(ordered[0]), float(ordered[min(k, n) - 1])
    if best == 0:
        return preferred
    # the inverse of within_of_best at the k-th best value, rounded outwards so that it stays admitted
    gap = abs(kth - best) / abs(best) * (1 + 1e-9)
    within = 1 - gap if direction == "max" else 1 / (1 + gap)
    if within <= 0:
        return preferred
    # the shortest decimal at or below it that admits the same configurations, so that the printed
    # threshold, passed back as `--within`, reproduces the count (7z: 0.97121 admitted 68 of the 69)
    admitted = len(near_optimal(means, direction, within))
    for digits in range(3, 16):
        short = math.floor(within * 10**digits) / 10**digits
        if short > 0 and len(near_optimal(means, direction, short)) == admitted:
            return short
    return float(within)


def near_optimal_share(means: Mapping[Config, float], direction: str) -> tuple[float, set[Config]]:
    """``within_for_share``'s threshold on a table's means, and the configurations it makes near-optimal."""
    within = within_for_share(means, direction)
    return within, near_optimal(means, direction, within)


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
    from scipy.stats import hypergeom  # here, not at the top: scipy.stats costs every CLI command half a second

    k = np.arange(1, budget + 1)
    return (1.0 - hypergeom.pmf(0, size, targets, k)).tolist()


def median_in_words(median: float, budget: int, censored: int, seeds: int,
                    fmt: Callable[[float], str] = "{:g}".format) -> str:
    """A median of evaluations to near-optimal where a seed that never got there counts as budget + 1: beyond the
    budget it is "more than" the budget; with exactly half the seeds there it averages a find with that stand-in,
    so the true median is "at least" it."""
    if median > budget:
        return f"more than {budget}"
    if seeds and censored * 2 == seeds:
        return f"at least {fmt(median)}"
    return fmt(median)


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
