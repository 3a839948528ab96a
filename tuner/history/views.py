"""Frozen views of what the history holds: a campaign, a trial, a measurement, a comparison.

The history hands these out instead of live ORM rows, so nothing a reader holds can change the
history behind its back or fail because its session is gone. The SQL history and the in-memory
store of the offline comparison give the same views, which is what makes them one interface.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol, TypeVar

from storetune.runners import Measurement, Status
from storetune.search_spaces import Config

V = TypeVar("V")


@dataclass(frozen=True)
class MeasurementView:
    """One run (one repeat) of a trial."""

    repeat: int
    status: str
    reason: str | None
    metrics: dict[str, Any]
    env: dict[str, Any]
    duration_s: float
    created_at: datetime | None = None
    node: str | None = None  # the machine that measured it
    series: dict[str, Any] | None = None  # the run interval by interval, as kept (runners.series.Series.to_dict)

    @classmethod
    def of_measurement(cls, repeat: int, m: Measurement) -> MeasurementView:
        return cls(repeat, m.status.value, m.reason, dict(m.metrics), dict(m.env), m.duration_s, node=m.node,
                   series=None if m.series is None else m.series.to_dict())


@dataclass(frozen=True)
class TrialView:
    """One configuration asked in one campaign, and what became of it. ``measurements`` is None
    when the trial was read without them."""

    id: int
    campaign_id: int
    number: int
    config: dict[str, Any]
    config_hash: str
    status: str
    reason: str | None
    value: float | None
    seed: int
    retry_of: int | None = None
    runs: int = 0  # measurements taken: the repeats, and any re-measurements of adaptive repeats
    short_runs: int = 0  # of them, runs stopped at a rung (multi-fidelity search): no whole run's measurement
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    measurements: tuple[MeasurementView, ...] | None = None

    @property
    def terminal(self) -> bool:
        return Status(self.status).terminal

    @property
    def whole_runs(self) -> int:
        """The runs its value is the mean of, once it succeeded (``objective.whole_runs``)."""
        return self.runs - self.short_runs


@dataclass(frozen=True)
class CampaignView:
    """One campaign: space + workload + runner + algorithm + objective + budget + seed, and its state."""

    id: int
    created_at: datetime | None
    finished_at: datetime | None
    state: str
    note: str | None
    space_name: str
    space_fingerprint: str
    space: dict[str, Any]
    runner: str
    runner_settings: dict[str, Any]
    workload_name: str
    workload_fingerprint: str
    workload: dict[str, Any]
    device: str
    algorithm: str
    algorithm_params: dict[str, Any]
    objective_metric: str
    objective_direction: str
    budget: int
    seed: int
    repeats: int
    batch_size: int
    warm_start: str
    fixed: dict[str, Any]
    comparison_id: int | None
    driver_host: str | None
    driver_pid: int | None
    origin: str = "cli"
    cancel_requested: bool = False
    max_repeats: int | None = None
    objective: dict[str, Any] | None = None  # several metrics: weighted, lexicographic or Pareto
    executor: dict[str, Any] | None = None  # where its trials are measured (``executor.kind``: local or ray)
    resolved_params: dict[str, Any] | None = None  # every hyperparameter as resolved at creation
    fidelity: dict[str, Any] | None = None  # multi-fidelity: ASHA's rungs and eta, and a device-seconds budget

    @property
    def adaptive(self) -> bool:
        """Adaptive repeats: its best is the best mean among the most-measured trials (``best_trial``)."""
        return self.max_repeats is not None


@dataclass(frozen=True)
class ComparisonView:
    id: int
    created_at: datetime | None
    finished_at: datetime | None
    state: str
    workload_name: str
    runner_settings: dict[str, Any]
    settings: dict[str, Any]
    results: dict[str, Any] | None
    note: str | None = None
    origin: str = "cli"
    cancel_requested: bool = False


def view(cls: type[V], row: Any, **extra: Any) -> V:
    """The frozen view ``cls`` of an ORM row (or any object with the same attributes). Times are
    always UTC-aware: the history writes them in UTC, and SQLite gives them back without the zone."""
    values = {n: getattr(row, n) for n in _fields(cls) if n not in extra}
    for name in _times(cls):
        value = values.get(name)
        if value is not None and value.tzinfo is None:
            values[name] = value.replace(tzinfo=timezone.utc)
    return cls(**values, **extra)


@functools.cache
def _fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


@functools.cache
def _times(cls: type) -> tuple[str, ...]:
    """The fields that hold a datetime (a report reads 10,000 trials: look them up once per class)."""
    hints = typing.get_type_hints(cls)
    return tuple(n for n in _fields(cls) if datetime in typing.get_args(hints[n]) or hints[n] is datetime)


class TrialStore(Protocol):
    """Where the campaign loop records trials: the SQL history, or memory. Both hand out views."""

    def add_trials(
        self, campaign_id: int, configs: Sequence[Config], seeds: Sequence[int], retry_of: Sequence[int | None] = ()
    ) -> list[TrialView]: ...

    def start_trials(self, trial_ids: Sequence[int]) -> None: ...

    def add_measurement(self, trial_id: int, repeat: int, m: Measurement) -> None: ...

    def finish_trial(self, trial_id: int, status: Status, value: float | None, reason: str | None) -> None: ...

    def trials(self, campaign_id: int, *, measurements: bool = False) -> list[TrialView]: ...
