"""The Pareto set of a campaign and its hypervolume, computed from the history.

The history keeps every metric of every measurement, so the set is read from the trials' measurements
(each trial's mean per metric), never from what an algorithm was told. Points are handled as losses
(lower is better in every dimension); what is shown is in the metrics' own units and directions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from storetune.tuner.objectives.objective import MultiObjective, trial_means
from storetune.tuner.history.views import TrialView


def format_point(point: dict[str, float] | None) -> str:
    """A point of metric values (a trial's, or a hypervolume's reference), as every report prints it."""
    return ", ".join(f"{m} = {v:.6g}" for m, v in (point or {}).items())


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """Is loss vector ``a`` at least as good as ``b`` everywhere and better somewhere?"""
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def non_dominated(points: Sequence[Sequence[float]]) -> list[int]:
    """The indices of the points no other point dominates (equal points are all kept), in order."""
    array = np.asarray(points, dtype=float)
    keep = []
    for i, p in enumerate(array):
        dominated = np.all(array <= p, axis=1) & np.any(array < p, axis=1)
        if not dominated.any():
            keep.append(i)
    return keep


def hypervolume(points: Sequence[Sequence[float]], reference: Sequence[float]) -> float:
    """The volume dominated by ``points`` (losses) and bounded by ``reference``, exactly: a sweep in two
    dimensions, slices along the last dimension above that (fine for the few dozen points of a front).
    Points not strictly better than the reference in every dimension add nothing."""
    ref = np.asarray(reference, dtype=float)
    array = np.asarray([p for p in points if np.all(np.asarray(p, dtype=float) < ref)], dtype=float)
    if len(array) == 0:
        return 0.0
    array = array[non_dominated(array)]
    return _hv(array, ref)


def _hv(points: np.ndarray, ref: np.ndarray) -> float:
    if points.shape[1] == 1:
        return float(ref[0] - points[:, 0].min())
    if points.shape[1] == 2:
        order = np.lexsort((points[:, 1], points[:, 0]))  # by the first loss, then the second
        volume, best_second = 0.0, ref[1]
        for x, y in points[order]:
            if y < best_second:
                volume += (ref[0] - x) * (best_second - y)
                best_second = y
        return float(volume)
    order = np.argsort(points[:, -1])
    levels = points[order, -1]
    volume = 0.0
    for k in range(len(order)):
        top = levels[k + 1] if k + 1 < len(order) else ref[-1]
        if top > levels[k]:
            volume += (top - levels[k]) * _hv(points[order[: k + 1], :-1], ref[:-1])
    return float(volume)


def pareto_set(trials: Sequence[TrialView], objective: MultiObjective) -> dict[str, Any]:
    """A Pareto campaign's set from its trials (read with their measurements): every succeeded trial's
    mean per metric, the non-dominated ones (in the order they were asked), and their hypervolume
    against the reference point stated beside it: the worst value of each metric over the campaign's
    succeeded trials (a point worst in one metric adds no volume)."""
    measured = []
    for t in trials:
        if t.status != "SUCCEEDED":
            continue
        means = trial_means(t, objective.metrics)
        if means is not None:
            measured.append((t, means))
    if not measured:
        return {"pareto": [], "hypervolume": None, "reference_point": None}
    losses = [objective.losses(m) for _, m in measured]
    front = non_dominated(losses)
    worst = np.max(np.asarray(losses), axis=0)
    reference = {m: float(w if d == "min" else -w) for m, d, w in zip(objective.metrics, objective.directions, worst)}
    return {
        "pareto": [{"trial": measured[i][0].number, "config": measured[i][0].config, "values": measured[i][1]}
                   for i in front],
        "hypervolume": hypervolume([losses[i] for i in front], worst),
        "reference_point": reference,
    }
