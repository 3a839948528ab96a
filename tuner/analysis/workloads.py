"""Workloads the history has seen: which are nearest to a new one, and what worked for them.

A workload's fingerprint (``runners.fingerprint``) is recorded in the history beside the campaigns
that ran it (joined by the workload's key, ``Workload.fingerprint()``). ``recommend`` standardises
the compared features over the known workloads and the new one, ranks the known ones by distance,
and gives each one's near-optimal configurations from what its campaigns measured, with an honest
confidence: the distance, and how often a workload's best stayed near-optimal on its own nearest
neighbour, wherever the history measured that configuration on both.

It also keys the workloads that campaigns cannot name themselves: a trace by its content
(``trace_workload``), and a device workload by a short traced run (``device_fingerprint``), for the
CLI and the service alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from storetune.runners import Workload
from storetune.runners.fingerprint import DISTANCE_FEATURES, distance, scales, vector
from storetune.search_spaces import SearchSpace
from storetune.search_spaces.status import best_of, within_of_best
from storetune.tuner.history.store import History

NEAR_OPTIMAL_SHOWN = 10  # near-optimal configurations listed per neighbour


class NoHistory(LookupError):
    """Nothing to recommend from: no fingerprinted workload with measured configurations."""


@dataclass(frozen=True)
class Neighbour:
    workload_name: str
    workload_fingerprint: str
    distance: float
    source: str  # how its fingerprint was measured: trace, blktrace, fio-log
    metric: str
    direction: str
    best: dict[str, Any]  # {"config": ..., "value": ...}
    near_optimal: list[dict[str, Any]]  # best first, at most NEAR_OPTIMAL_SHOWN
    near_optimal_count: int
    configurations: int  # distinct configurations its campaigns measured
    campaigns: list[int]


@dataclass(frozen=True)
class Recommendation:
    neighbours: list[Neighbour]
    metric: str
    within: float
    features: list[str]  # the standardised features the distance compares
    scale: dict[str, float]  # each one's spread over these workloads, at least runners.fingerprint.MIN_SCALE
    # how often the nearest known workload's best was near-optimal on a workload, where both were measured
    transfer: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Known:
    name: str
    key: str
    source: str
    features: Mapping[str, Any]
    metric: str = ""
    direction: str = "max"
    means: dict[str, float] = field(default_factory=dict)  # config hash -> mean value
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    campaigns: set[int] = field(default_factory=set)

    def best_hash(self) -> str:
        return min(self.means, key=lambda h: -self.means[h] if self.direction == "max" else self.means[h])


def _same_parameters(campaign_space: Mapping[str, Any], space: SearchSpace) -> bool:
    names = {p["name"] for p in campaign_space.get("parameters", ())}
    return names == {p.name for p in space.parameters}


def known_workloads(history: History, space: SearchSpace | None = None, metric: str | None = None,
                    exclude: Sequence[str] = ()) -> tuple[list[_Known], str]:
    """The fingerprinted workloads whose campaigns measured configurations of ``space`` (the same
    parameters: a table's inferred space and its YAML space agree) on ``metric`` (default: the metric
    most of those campaigns optimised), with their mean value per configuration."""
    prints = {k: v for k, v in history.fingerprints().items() if k not in set(exclude)}
    rows = [r for r in history.workload_trials(list(prints))
            if r[0].objective is None and (space is None or _same_parameters(r[0].space, space))]
    if metric is None and rows:
        counts: dict[str, int] = {}
        for campaign, *_ in rows:
            counts[campaign.objective_metric] = counts.get(campaign.objective_metric, 0) + 1
        metric = max(counts, key=counts.__getitem__)
    sums: dict[str, dict[str, list[float]]] = {}
    known: dict[str, _Known] = {}
    for campaign, key, config, value in rows:
        if campaign.objective_metric != metric or (space is not None and not space.contains(config)):
            continue
        fp = prints[campaign.workload_fingerprint]
        k = known.setdefault(campaign.workload_fingerprint, _Known(fp["workload_name"], campaign.workload_fingerprint,
                                                                    fp["source"], fp["features"], metric,
                                                                    campaign.objective_direction))
        k.campaigns.add(campaign.id)
        k.configs.setdefault(key, config)
        sums.setdefault(k.key, {}).setdefault(key, []).append(value)
    for k in known.values():
        k.means = {h: float(np.mean(v)) for h, v in sums[k.key].items()}
    return list(known.values()), metric or ""


def recommend(history: History, features: Mapping[str, Any], space: SearchSpace | None = None, *, k: int = 3,
              within: float = 0.95, metric: str | None = None, exclude: Sequence[str] = ()) -> Recommendation:
    """The ``k`` known workloads nearest to ``features`` and their near-optimal configurations
    (within ``within`` of each one's best); ``exclude`` leaves workloads out by their key."""
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    if not 0 < within <= 1:
        raise ValueError(f"within must be in (0, 1], not {within}")
    known, metric = known_workloads(history, space, metric, exclude)
    where = f" on the parameters of {space.name}" if space is not None else ""
    if not known and metric:  # there may be some, tuned for another metric: say so, not "measure some first"
        others, usual = known_workloads(history, space, None, exclude)
        if others:
            raise NoHistory(f"no fingerprinted workload in the history at {history.url} was tuned for {metric}{where}; "
                            f"{len(others)} were, for {usual}: give `metric` {usual}, or leave `metric` out")
    if not known:
        raise NoHistory(f"the history at {history.url} has no fingerprinted workload with measured configurations"
                        f"{where}: measure some first (storetune sweep on a device, or storetune tune on a dataset "
                        "whose workloads are fingerprinted, e.g. `dataset` datasets/loop-storage-v3), and fingerprint "
                        "their workloads (storetune fingerprint ... --db)")
    rows = np.array([vector(w.features) for w in known])
    query = vector(features)
    scale = scales(np.vstack([rows, query[None, :]]))
    ranked = sorted(((distance(query, row, scale), w) for row, w in zip(rows, known)), key=lambda p: p[0])
    neighbours = [_neighbour(w, d, within) for d, w in ranked[:k]]
    return Recommendation(neighbours, metric, within, list(DISTANCE_FEATURES),
                          {n: round(float(s), 4) for n, s in zip(DISTANCE_FEATURES, scale)},
                          _transfer(known, rows, scale, within))


def _near(w: _Known, within: float) -> list[str]:
    best = best_of(list(w.means.values()), w.direction)
    near = [h for h, v in w.means.items() if within_of_best(v, best, w.direction, within)]
    return sorted(near, key=lambda h: w.means[h], reverse=w.direction == "max")


def _neighbour(w: _Known, d: float, within: float) -> Neighbour:
    near = _near(w, within)
    top = near[0]
    return Neighbour(
        workload_name=w.name, workload_fingerprint=w.key, distance=round(d, 4), source=w.source, metric=w.metric,
        direction=w.direction, best={"config": w.configs[top], "value": w.means[top]},
        near_optimal=[{"config": w.configs[h], "value": w.means[h]} for h in near[:NEAR_OPTIMAL_SHOWN]],
        near_optimal_count=len(near), configurations=len(w.means), campaigns=sorted(w.campaigns))


def _transfer(known: list[_Known], rows: np.ndarray, scale: np.ndarray, within: float) -> dict[str, Any]:
    """For each known workload, was its nearest other workload's best near-optimal on it? Counted where the
    history measured that configuration on both (checked), as the share that stayed near-optimal."""
    checked, kept, pairs = 0, 0, []
    for i, target in enumerate(known):
        others = [(distance(rows[i], rows[j], scale), j) for j in range(len(known)) if j != i]
        if not others:
            continue
        d, j = min(others)
        source = known[j]
        top = source.best_hash()
        if top not in target.means:
            continue
        best = best_of(list(target.means.values()), target.direction)
        hit = within_of_best(target.means[top], best, target.direction, within)
        checked += 1
        kept += hit
        pairs.append({"workload": target.name, "nearest": source.name, "distance": round(d, 4),
                      "near_optimal": bool(hit), "value": target.means[top], "best": best})
    return {"checked": checked, "near_optimal": kept, "share": kept / checked if checked else None, "pairs": pairs}


def similar_configs(recommendation: Recommendation, space: SearchSpace, limit: int) -> list[dict[str, Any]]:
    """The configurations a ``--warm-start similar`` campaign measures first: the neighbours' near-optimal
    configurations, nearest workload first and each one's best first, taken in turn, without repeats."""
    out: list[dict[str, Any]] = []
    seen: set[Any] = set()
    lists = [n.near_optimal for n in recommendation.neighbours]
    for rank in range(max((len(x) for x in lists), default=0)):
        for near in lists:
            if rank < len(near) and len(out) < limit:
                config = space.validate(near[rank]["config"])
                if config not in seen:
                    seen.add(config)
                    out.append(config)
    return out


def trace_workload(path: Path) -> Workload:
    """A trace's workload: its name and content, so one trace is one workload wherever it lies."""
    sha = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return Workload("trace", path.name.split(".trace")[0], {"sha256": sha})


def device_fingerprint(settings: Any, seconds: float, tracer: str,
                       fallback: bool) -> tuple[Workload, dict[str, Any], Any]:
    """A short traced run of a device workload (``runners.device.blktrace``), keyed by the workload as a
    campaign of these settings runs it (its runtime, fileset, engine), so that campaigns find it. The CLI's
    and the service's; a refusal or a failed run is a ValueError of one line."""
    from storetune.runners import make_runner
    from storetune.runners.device.blktrace import traced_run
    from storetune.runners.fingerprint import features

    workload = make_runner("device", settings, dry_run=True, echo=lambda _line: None).workload
    if seconds <= 0:
        raise ValueError(f"the traced run's seconds must be above 0, not {seconds}")
    try:
        run = traced_run(settings, runtime_s=seconds, fallback=fallback, tracer=tracer)
    except RuntimeError as e:  # the traced run failed (a full device, a refused mkfs): its reason, one line
        raise ValueError(str(e)) from None
    found = {"source": run.source, "ios": len(run.trace), "features": features(run.trace), "meta": dict(run.meta)}
    return workload, found, run.trace
