"""ML-MittOS chapter 3: the expected latency of admission with failover, and the formulas and
strategies that choose a failover threshold or a loss bias.

With r replicas, failover cost f, EBUSY probability p, mean latency t of all requests and t_n of
those not EBUSY, the expected latency follows the recurrence (Eq. 3.2)
    mu(1) = t,   mu(r) = (1 - p) t_n + p (mu(r - 1) + f),
whose closed form is Eq. 3.3 (with the limit t + (r - 1) f at p = 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

GREEDY_SKIP_SHARE = 0.04  # greedy-skip ignores a candidate that changes fewer than 4% of predictions


def expected_latency_recurrence(p: float, t_n: float, t: float, f: float, r: int) -> float:
    """Eq. 3.2, computed step by step."""
    mu = t
    for _ in range(r - 1):
        mu = (1 - p) * t_n + p * (mu + f)
    return mu


def expected_latency(p: float, t_n: float, t: float, f: float, r: int) -> float:
    """Eq. 3.3, the closed form of the recurrence."""
    if r < 1:
        raise ValueError(f"replicas must be at least 1, not {r}")
    if math.isclose(p, 1.0):
        return t + (r - 1) * f
    return ((f - t_n + t) * p**r + (t_n - t) * p ** (r - 1) + (t_n - f) * p - t_n) / (p - 1)


def expected_latency_of(predicted: np.ndarray, actual: np.ndarray, threshold: float, f: float, r: int) -> float:
    """Eq. 3.3 with p and t_n measured on data: EBUSY is a predicted latency above the threshold."""
    busy = predicted > threshold
    p = float(busy.mean())
    t = float(actual.mean())
    t_n = float(actual[~busy].mean()) if (~busy).any() else t
    return expected_latency(p, t_n, t, f, r)


def threshold_equation(predicted: np.ndarray, actual: np.ndarray, f: float, r: int) -> float:
    """Section 3.5.1: the threshold minimising Eq. 3.3 on the training data, searched by SciPy's
    bounded minimize_scalar between the smallest and largest training latency."""
    low, high = float(actual.min()), float(actual.max())
    result = minimize_scalar(lambda th: expected_latency_of(predicted, actual, th, f, r), bounds=(low, high),
                             method="bounded", options={"xatol": max(1e-3, (high - low) * 1e-5)})
    return float(result.x)


def bias_shift(b: float, mean_latency: float) -> float:
    """Eq. 3.5: the average rise of a regressor's predictions under AMSE bias b."""
    if not 0 <= b < 1:
        raise ValueError(f"the regressor's loss bias must be in [0, 1), not {b}")
    return -math.log(1 - b) * mean_latency


def bias_equation(predicted: np.ndarray, actual: np.ndarray, threshold: float, f: float, r: int) -> float:
    """Section 3.5.2: the bias minimising Eq. 3.3 when predictions rise by Eq. 3.5 (regressor only;
    the thesis shows it chooses poorly, and StoreTune keeps it as a baseline)."""
    t = float(actual.mean())
    result = minimize_scalar(
        lambda b: expected_latency_of(predicted + bias_shift(b, t), actual, threshold, f, r),
        bounds=(0.0, 0.99), method="bounded")
    return float(result.x)


@dataclass(frozen=True)
class Candidate:
    """One setting (a bias value or a threshold) with its decisions on the training and test data."""

    value: float
    train_busy: np.ndarray
    test_busy: np.ndarray


def choose(strategy: str, candidates: Sequence[Candidate], train_cost: Callable[[Candidate], float],
           test_cost: Callable[[Candidate], float]) -> Candidate:
    """Section 3.6. Candidates come in increasing order of aggressiveness (bias or threshold).
    bias_hindsight (ML-MittOS's "oracle"): best on the test data, known only in hindsight (an upper bound
    over the candidates, not a perfect predictor); global: best on the training data; greedy: increase
    while the training latency improves; greedy_skip: likewise, skipping candidates whose training
    decisions differ from the first candidate's in fewer than 4% of requests."""
    if strategy == "bias_hindsight":
        return min(candidates, key=test_cost)
    if strategy == "global":
        return min(candidates, key=train_cost)
    if strategy not in ("greedy", "greedy_skip"):
        raise ValueError(f"unknown strategy {strategy!r}")
    base = candidates[0]
    best, best_cost = base, train_cost(base)
    for c in candidates[1:]:
        if strategy == "greedy_skip" and np.mean(c.train_busy != base.train_busy) < GREEDY_SKIP_SHARE:
            continue
        cost = train_cost(c)
        if cost > best_cost:
            break
        best, best_cost = c, cost
    return best
