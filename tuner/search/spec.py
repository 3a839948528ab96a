"""What defines a campaign, and the checks on it that need no history: ``CampaignSpec``, the ``InvalidSpec`` error
naming the field that was wrong, and the budget and multi-fidelity rules a spec must fit."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from storetune.runners import Direction, Runner, WatchedRunner
from storetune.tuner.algorithms.base import Tuner
from storetune.tuner.objectives.fidelity import BURN_IN, FIDELITIES, GUARD, schedule
from storetune.tuner.objectives.intensify import check_race
from storetune.tuner.objectives.objective import MultiObjective, Objective

WARM_STARTS = ("none", "same", "similar")


@dataclass(frozen=True)
class CampaignSpec:
    """Everything that defines a new campaign. Validated before anything is written."""

    runner: str
    runner_settings: Mapping[str, Any]
    algorithm: str | None = "random"  # None: the default for the objective (nsga2 for a Pareto objective, else auto)
    algorithm_params: Mapping[str, Any] = field(default_factory=dict)
    metric: str | None = None
    direction: Direction | None = None
    objective: str | None = None  # several metrics: "a:3,b:2", "rank:a,b;tol=0.05" or "pareto:a,b" (not with metric)
    budget: int = 50
    seed: int = 0
    repeats: int = 1
    max_repeats: int | None = None  # adaptive repeats: re-measure challengers up to this many runs
    batch_size: int = 1  # configurations asked and measured at once
    # "same": learn from the trials of the same space, workload and device; "similar": that, and first measure
    # the near-optimal configurations of the nearest fingerprinted workloads (tuner.workloads)
    warm_start: str = "none"
    fixed: Mapping[str, Any] = field(default_factory=dict)  # parameters pinned to one value (--fix)
    # multi-fidelity search: "asha" judges each run at rungs min_run_s, min_run_s * eta, ... up to its full length
    # and stops those not in the best 1/eta there (tuner/objectives/fidelity.py); "none" runs every benchmark whole
    fidelity: str = "none"
    eta: float = 3.0
    min_run_s: float = 1.0
    burn_in: int = BURN_IN  # whole runs before a rung stops any (fidelity asha; 0 with guard 0: plain ASHA)
    guard: int = GUARD  # a rung stops runs only while the best this many whole runs would pass it
    budget_s: float | None = None  # stop starting trials once the runs took this many device-seconds
    race: str = "none"  # "wilcoxon": a configuration's repeats race the incumbent's, and stop when they lose


class InvalidSpec(ValueError):
    """A campaign's specification is wrong; ``field`` names the part (budget, fix, metric, ...)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


UNBOUNDED_EVALUATIONS = 1_000_000  # a device-seconds budget alone: the device time limits, or the space's size
SEED_LIMIT = 2**63  # seeds are stored as signed 64-bit integers (SQLite, PostgreSQL's bigint)


def checked(field: str, check: Callable[[], Any]) -> Any:
    """``check()``, with a ValueError or LookupError it raises turned into InvalidSpec(field): the clear
    error a campaign's or a comparison's specification gets, naming the field that was wrong."""
    try:
        return check()
    except InvalidSpec:
        raise
    except (ValueError, LookupError) as e:
        raise InvalidSpec(field, e.args[0] if isinstance(e, LookupError) and e.args else str(e)) from None


def capped_budget(spec: CampaignSpec, runner: Runner, tuner: Tuner) -> int:
    """The evaluations of a campaign given device-seconds: at most what the space (or the algorithm's grid) holds."""
    budget = spec.budget
    if spec.budget_s is not None:
        if runner.space.finite:
            budget = min(budget, runner.space.cardinality() * evaluations_each(spec))
        if (capacity := tuner.capacity()) is not None:
            budget = min(budget, capacity[0] * evaluations_each(spec))
    return budget


def evaluations_each(spec: CampaignSpec) -> int:
    """The most evaluations one configuration can take: its first, the adaptive re-measurements up to
    ``max_repeats``, and with ASHA the whole run of a stopped one, promoted once the space is exhausted."""
    return 1 + max(0, (spec.max_repeats or spec.repeats) - spec.repeats) + (spec.fidelity == "asha")


def fidelity_record(spec: CampaignSpec, runner: Runner, objective: Objective | MultiObjective) -> dict[str, Any] | None:
    """The campaign's multi-fidelity schedule as recorded, after the checks: a runner that can stop a run at a rung
    (its run length), a schedule that fits it and a device-seconds budget that pays for one whole run."""
    if spec.budget_s is not None and not spec.budget_s > 0:
        raise ValueError(f"a budget of {spec.budget_s:g} device-seconds: it must be above 0")
    if spec.fidelity not in FIDELITIES:
        raise ValueError(f"fidelity {spec.fidelity!r}: choose {' or '.join(FIDELITIES)}")
    check_race(spec.race, spec.repeats)
    if spec.race != "none" and (isinstance(objective, MultiObjective) or spec.max_repeats is not None
                                or spec.fidelity != "none"):
        raise ValueError("race wilcoxon judges one metric over fixed repeats: it does not combine with an objective "
                         "over several metrics, adaptive repeats (max_repeats) or fidelity asha")
    if spec.fidelity == "none":
        if spec.budget_s is not None and runner.replays and not (
                isinstance(runner, WatchedRunner) and runner.full_length_s()):
            raise ValueError(f"a budget of {spec.budget_s:g} device-seconds on {runner.label()}: its table keeps no "
                             "per-interval series, so a replayed run takes no device time; give a budget of evaluations")
        if spec.race != "none":
            return {"kind": "none", "budget_s": spec.budget_s, "race": spec.race}
        return None if spec.budget_s is None else {"kind": "none", "budget_s": spec.budget_s}
    if isinstance(objective, MultiObjective) or spec.repeats != 1:
        raise ValueError("fidelity asha judges each run by one metric, one run per configuration (max_repeats measures "
                         "the finalists again): it does not combine with an objective over several metrics or repeats")
    rungs = schedule(runner, spec.eta, spec.min_run_s, spec.budget_s, spec.burn_in, spec.guard)
    watched = runner.watched_metrics()  # type: ignore[attr-defined]  # schedule refused any other runner
    if objective.metric not in watched:
        raise ValueError(f"fidelity asha judges runs by {objective.metric} as they go, and the {runner.name} runner "
                         f"reports only {', '.join(watched) or 'nothing'} while a run goes: choose one of those as "
                         "the metric")
    return {"kind": "asha", "rungs": list(rungs.lengths), "eta": rungs.eta, "burn_in": rungs.burn_in,
            "guard": rungs.guard, "budget_s": spec.budget_s}
