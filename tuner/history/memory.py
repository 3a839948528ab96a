"""Trials kept in memory, for loops whose history is written in one go at the end (the offline comparison's
seeds), or nowhere (a dry run). It hands out the same views as the SQL history (``TrialStore``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from storetune.runners import Measurement, Status
from storetune.search_spaces import Config, config_hash
from storetune.tuner.history.views import MeasurementView, TrialView


@dataclass
class _MemoryTrial:
    view: TrialView
    measurements: list[MeasurementView] = field(default_factory=list)


class MemoryStore:
    """Trials kept in memory, for loops whose history is written in one go at the end (the
    offline comparison's seeds). It hands out the same views as the SQL history."""

    def __init__(self) -> None:
        self._trials: list[_MemoryTrial] = []

    def add_trials(self, campaign_id: int, configs: Sequence[Config], seeds: Sequence[int],
                   retry_of: Sequence[int | None] = ()) -> list[TrialView]:
        retries = list(retry_of) or [None] * len(configs)
        start = len(self._trials)
        new = [
            TrialView(id=start + i + 1, campaign_id=campaign_id, number=start + i, config=c.to_dict(),
                      config_hash=config_hash(c), status=Status.PENDING.value, reason=None, value=None, seed=s,
                      retry_of=r)
            for i, (c, s, r) in enumerate(zip(configs, seeds, retries))
        ]
        self._trials += [_MemoryTrial(v) for v in new]
        return new

    def _update(self, trial_id: int, **values: Any) -> None:
        t = self._trials[trial_id - 1]
        t.view = dataclasses.replace(t.view, **values)

    def start_trials(self, trial_ids: Sequence[int]) -> None:
        for i in trial_ids:
            self._update(i, status=Status.RUNNING.value)

    def add_measurement(self, trial_id: int, repeat: int, m: Measurement) -> None:
        t = self._trials[trial_id - 1]
        t.measurements.append(MeasurementView.of_measurement(repeat, m))
        t.view = dataclasses.replace(t.view, runs=t.view.runs + 1,
                                     short_runs=t.view.short_runs + (m.status is Status.STOPPED))

    def finish_trial(self, trial_id: int, status: Status, value: float | None, reason: str | None) -> None:
        self._update(trial_id, status=status.value, value=value, reason=reason)

    def trials(self, campaign_id: int = 0, *, measurements: bool = False) -> list[TrialView]:
        return [dataclasses.replace(t.view, measurements=tuple(t.measurements) if measurements else None)
                for t in self._trials]
