"""The vocabulary every layer shares: a trial's Status and the Direction that is better.

It lives at the bottom layer so that search spaces, runners, the tuner and the API all import one
definition; ``better`` and ``loss`` are the one place that decides what "better" means.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

Direction = Literal["min", "max"]
DIRECTIONS: tuple[Direction, ...] = ("min", "max")


class Status(str, Enum):
    """The state of a trial, and the outcome of one measurement (the terminal ones)."""

    PENDING = "PENDING"  # asked, not started
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"  # the benchmark or the tools crashed
    INVALID = "INVALID"  # the configuration is refused: outside the space, not in the table, rejected by mkfs
    TIMEOUT = "TIMEOUT"
    STALE = "STALE"  # was RUNNING when its driver died; re-run on resume, never counted
    STOPPED = "STOPPED"  # measured short and stopped at a rung by multi-fidelity search (ASHA): counted, never a best

    @property
    def terminal(self) -> bool:
        """A finished evaluation, which counts towards the budget."""
        return self in (Status.SUCCEEDED, Status.FAILED, Status.INVALID, Status.TIMEOUT, Status.STOPPED)


def check_direction(direction: str) -> Direction:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'min' or 'max', not {direction!r}")
    return direction  # type: ignore[return-value]


def loss(value: float, direction: str) -> float:
    """``value`` turned so that lower is better."""
    return float(value) if check_direction(direction) == "min" else -float(value)


def better(a: float, b: float, direction: str) -> bool:
    """Is ``a`` strictly better than ``b``?"""
    return loss(a, direction) < loss(b, direction)


def best_of(values: list[float], direction: str) -> float:
    """The best of ``values`` (which must not be empty)."""
    return min(values) if check_direction(direction) == "min" else max(values)


def within_of_best(value: float, best: float, direction: str, within: float) -> bool:
    """Is ``value`` near-optimal: at least ``within`` x ``best`` (max), at most ``best`` / ``within`` (min)?
    Measured from ``best`` by its magnitude, so that it holds for negative values too (a ratio to a
    negative best would put the best itself outside); for a positive best it is exactly the ratio."""
    if check_direction(direction) == "max":
        return value >= best - (1 - within) * abs(best)
    return value <= best + (1 / within - 1) * abs(best)
