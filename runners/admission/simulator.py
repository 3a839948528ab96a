"""The failover simulator of ML-MittOS section 4.1, vectorised with numpy.

Each read of the test list is sent to a first server. If its prediction says EBUSY, the request
fails over to a replica, paying the failover cost f, and is served there as a random other request
of the list; this repeats up to r - 1 times, and the last replica always serves. End-to-end latency
is the served request's latency plus the failover costs. The random jumps are drawn up front, so a
seed fixes everything, and ``reference_simulate`` (a plain loop) must agree exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Outcome:
    latency_us: np.ndarray  # end-to-end, per request
    failovers: np.ndarray  # per request

    def summary(self) -> dict[str, float]:
        lat = self.latency_us
        p50, p95, p99, p999 = np.percentile(lat, [50, 95, 99, 99.9])
        return {
            "mean_latency_us": float(lat.mean()), "p50_latency_us": float(p50), "p95_latency_us": float(p95),
            "p99_latency_us": float(p99), "p999_latency_us": float(p999),
            "failover_rate": float(np.mean(self.failovers > 0)), "failovers_per_request": float(self.failovers.mean()),
        }


def jumps(n: int, replicas: int, rng: np.random.Generator) -> np.ndarray:
    """For each failover step and request, the index of the random other request that serves it."""
    if replicas < 1:
        raise ValueError(f"replicas must be at least 1, not {replicas}")
    if n < 2:
        raise ValueError("the simulator needs at least two requests")
    draws = rng.integers(0, n - 1, size=(replicas - 1, n))
    return draws


def simulate(latency: np.ndarray, busy: np.ndarray, replicas: int, failover_cost_us: float,
             rng: np.random.Generator | None = None, jump: np.ndarray | None = None,
             brt: bool = False) -> Outcome:
    """End-to-end latency of every request under admission with failover.

    ``brt``: IODA's busy remaining time (IOD2). A request whose every replica said busy is served by
    the visited replica that is free first (the least latency among them), not by the last one."""
    n = len(latency)
    jump = jumps(n, replicas, rng or np.random.default_rng(0)) if jump is None else jump
    current = np.arange(n)
    total = np.zeros(n)
    failovers = np.zeros(n, dtype=np.int64)
    active = np.ones(n, dtype=bool)
    soonest = latency.copy()  # the least latency among the replicas visited so far
    for step in range(replicas - 1):
        active &= busy[current]
        if not active.any():
            break
        moved = np.flatnonzero(active)
        target = jump[step, moved]
        current[moved] = target + (target >= current[moved])  # a random *other* request
        total[moved] += failover_cost_us
        failovers[moved] += 1
        soonest[moved] = np.minimum(soonest[moved], latency[current[moved]])
    served = latency[current]
    if brt:  # every replica said busy: the one free first serves
        exhausted = active & busy[current] if replicas > 1 else busy.copy()
        served = np.where(exhausted, soonest, served)
    return Outcome(total + served, failovers)


def time_windows(latency: np.ndarray, busy: np.ndarray, replicas: int, failover_cost_us: float,
                 rng: np.random.Generator) -> Outcome:
    """IODA's time windows (IOD3): the replicas take turns to do their internal work, so at most one
    is busy at a time and a failover always lands on a free one. A read flagged busy fails over once
    and is served as a random request that was not busy. Needs r >= 2 and device support."""
    if replicas < 2:
        raise ValueError("time windows need at least two replicas")
    free = np.flatnonzero(~busy)
    if not len(free):
        raise ValueError("time windows need some request that is not busy")
    served = latency.copy()
    flagged = np.flatnonzero(busy)
    served[flagged] = failover_cost_us + latency[free[rng.integers(0, len(free), len(flagged))]]
    return Outcome(served, busy.astype(np.int64))


PERFECT_PERCENTILES = np.arange(1.0, 100.0, 0.5)


def perfect(latency: np.ndarray, on_test: Any) -> dict[str, float]:
    """The perfect predictor: it fails over exactly the reads slower than a threshold, at the
    threshold that serves the test part best (a percentile of its own latencies, 1 to 99.5, or none:
    an infinite threshold, when no failover pays). What failover could buy with any predictor of slow
    reads: the ceiling the others are judged against. Ties go to the higher threshold (fewer failovers)."""
    thresholds = [np.inf, *np.unique(np.percentile(latency, PERFECT_PERCENTILES))[::-1]]  # highest first
    results = [{**on_test(latency > t), "threshold_us": float(t)} for t in thresholds]
    return min(results, key=lambda r: r["mean_latency_us"])  # min keeps the first of equals: the highest


def reference_simulate(latency: np.ndarray, busy: np.ndarray, replicas: int, failover_cost_us: float,
                       jump: np.ndarray) -> Outcome:
    """The simulation as ML-MittOS describes it, one request at a time (for tests)."""
    n = len(latency)
    total = np.zeros(n)
    failovers = np.zeros(n, dtype=np.int64)
    for i in range(n):
        current, spent = i, 0.0
        for step in range(replicas - 1):
            if not busy[current]:
                break
            target = int(jump[step, i])
            current = target + (target >= current)
            spent += failover_cost_us
            failovers[i] += 1
        total[i] = spent + latency[current]
    return Outcome(total, failovers)


def fan_out(latency_us: np.ndarray, width: int, rng: np.random.Generator) -> np.ndarray:
    """Tail at scale (HEIMDALL section 6.3): a user request is ``width`` parallel sub-requests and
    completes with the slowest. Returns one latency per user request."""
    if width < 1:
        raise ValueError("the fan-out must be at least 1")
    usable = len(latency_us) // width * width
    shuffled = rng.permutation(latency_us)[:usable]
    return shuffled.reshape(-1, width).max(axis=1)
