"""What a history says: a campaign's trials by status and its best configuration."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runners import Status
from search_spaces.status import best_of, better
from search_spaces.status import loss as to_loss
from tuner.views import CampaignView, TrialView


def trials_by_status(trials: Sequence[TrialView]) -> dict[str, int]:
    """Status -> count, in the order of the Status enum, listing only statuses that occur."""
    counts = Counter(t.status for t in trials)
    return {s.value: counts[s.value] for s in Status if counts[s.value]}


def best_trial(trials: Sequence[TrialView], direction: str) -> TrialView | None:
    """The succeeded trial with the best value; ties go to the earliest."""
    scored = [t for t in trials if t.status == Status.SUCCEEDED.value and t.value is not None]
    if not scored:
        return None
    return min(scored, key=lambda t: (to_loss(t.value, direction), t.number))


@dataclass(frozen=True)
class CampaignSummary:
    """What ``storetune tune --json`` prints. Keys are added over time, never renamed."""

    campaign: int
    algorithm: str
    seed: int
    trials_by_status: dict[str, int]
    best_config: dict[str, Any] | None
    best_value: float | None
    objective: dict[str, str]
    budget: int
    evaluated: int  # trials that count towards the budget
    state: str
    note: str | None
    space: str
    workload: str
    database: str
    test_value: float | None = None  # the best configuration on data the search never saw, if any

    @classmethod
    def of(cls, record: CampaignView, trials: Sequence[TrialView], database: str) -> CampaignSummary:
        best = best_trial(trials, record.objective_direction)
        return cls(
            campaign=record.id,
            algorithm=record.algorithm,
            seed=record.seed,
            trials_by_status=trials_by_status(trials),
            best_config=best.config if best else None,
            best_value=best.value if best else None,
            objective={"metric": record.objective_metric, "direction": record.objective_direction},
            budget=record.budget,
            evaluated=sum(1 for t in trials if Status(t.status).terminal),
            state=record.state,
            note=record.note,
            space=record.space_name,
            workload=record.workload_name,
            database=database,
            test_value=_held_out(best, record.objective_metric),
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _held_out(trial: TrialView | None, metric: str) -> float | None:
    """The mean of the ``test_<metric>`` the runner recorded beside the objective (admission does)."""
    if trial is None or trial.measurements is None:  # a summary of trials read without them
        return None
    values = [m.metrics[f"test_{metric}"] for m in trial.measurements if f"test_{metric}" in m.metrics]
    return sum(values) / len(values) if values else None


@dataclass(frozen=True)
class TableRank:
    """Where a configuration stands in an exhaustive table, by the table's mean per configuration."""

    mean: float
    rank: int  # 1 is the best configuration of the table
    configurations: int
    table_best: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def table_rank(config: Mapping[str, Any], means: Mapping[Any, float], direction: str) -> TableRank | None:
    """The rank of ``config`` among the table's configurations; None if the table lacks it."""
    mine = means.get(config)
    if mine is None:
        return None
    values = list(means.values())
    ahead = sum(1 for v in values if better(v, mine, direction))
    return TableRank(mine, ahead + 1, len(values), best_of(values, direction))
