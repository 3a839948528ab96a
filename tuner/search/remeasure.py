"""What the loop may measure again, and the record it chooses from: the runs that multi-fidelity search stopped short
(``Shortened``: promoted whole once nothing new is asked) and the races of adaptive repeats (``Races``: a challenger,
then the finalists). The loop (``loop.run_loop``) decides when; these say which."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from storetune.runners import Measurement, Status
from storetune.runners.series import Series
from storetune.search_spaces import Config
from storetune.tuner.history.views import TrialView
from storetune.tuner.objectives.fidelity import Rungs, SuccessiveHalving, told_value
from storetune.tuner.objectives.intensify import Standing, incumbent, next_finalist, next_remeasure
from storetune.tuner.objectives.objective import MultiObjective, Objective, whole_runs


def stored_measurements(t: TrialView) -> list[Measurement]:
    """A trial's measurements as the store keeps them (read with them), as the runner returned them."""
    return [Measurement(Status(m.status), m.metrics, m.reason, m.env, m.duration_s, m.node,
                        None if m.series is None else Series.from_dict(m.series)) for m in t.measurements or ()]


class Shortened:
    """The loop's side of multi-fidelity search: the runs measured whole and the runs stopped short so far, and what
    the algorithm is told of each stopped one: its value at its rung, capped at the worst whole run so far
    (``told_value``), told again whenever that worst falls. Rebuilt from a resumed campaign's finished trials, with
    the rung record its runs were judged on (each measurement's ``judged``): a resume judges and tells as the first
    run did.

    Once the algorithm has nothing new to propose (the space is exhausted), the stopped runs are measured whole, the
    most promising first (``promote``): the furthest rung reached, then the best standing in that rung's record; the
    races of adaptive repeats (``Races``) go before them, its finalists after them. This is ASHA's promoting form,
    and what a rung got wrong is put right while budget is left: on varmail (datasets/loop-storage-ts) every
    configuration the rungs cost a search was the best one, stopped early. A device run cannot be resumed where it
    was stopped, so a promoted run is a new whole run, and costs one."""

    def __init__(self, rungs: Rungs, objective: Objective, finished: Sequence[TrialView] = ()):
        self.rungs, self.metric, self.direction = rungs, objective.metric, objective.direction
        self.whole: list[float] = []
        self.short: dict[Config, float] = {}  # each stopped run's value at its rung, as measured
        self.recorded: list[list[float]] = [[] for _ in rungs.lengths]
        self.wholes: list[tuple[list[float], float]] = []  # each whole run's values at its rungs, and its own
        self.stopped: dict[int, tuple[TrialView, list[Measurement]]] = {}  # the stopped trials, to promote
        for t in finished:
            measurements = stored_measurements(t)
            if whole := self.whole_run(Status(t.status), measurements):
                self.wholes.append(whole)
            self.finished(Config(t.config), Status(t.status), t.value, measurements, t)

    def halving(self) -> SuccessiveHalving:
        return SuccessiveHalving(self.rungs, self.direction, self.recorded, self.wholes)  # type: ignore[arg-type]

    def whole_run(self, status: Status, measurements: Sequence[Measurement], first_repeat: int = 0
                  ) -> tuple[list[float], float] | None:
        """A trial's first whole run, as the board learns it, where it is among the runs from ``first_repeat`` on:
        the first run's value at each rung it was judged at (a promoted run's: where it was stopped), and the whole
        run's own (a finalist's later runs, adaptive repeats, are whole runs no rung judged)."""
        if status is not Status.SUCCEEDED or not measurements:
            return None
        first = next((k for k, m in enumerate(measurements) if m.status is Status.SUCCEEDED), None)
        if first is None or first < first_repeat or self.metric not in measurements[first].metrics:
            return None
        value = float(measurements[first].metrics[self.metric])
        if not np.isfinite(value):
            return None
        return [float(v) for v in measurements[0].env.get("judged", ())][:len(self.rungs.lengths) - 1], value

    def told(self, config: Config) -> float | None:
        """What the algorithm is told now of a stopped configuration (None: it is not one)."""
        value = self.short.get(config)
        return None if value is None else told_value(value, self.whole, self.direction)

    def finished(self, config: Config, status: Status, value: float | None, measurements: Sequence[Measurement],
                 trial: TrialView | None = None) -> tuple[float | None, Status, list[tuple[Config, float]]]:
        """What to tell of a finished trial (value and status), and the stopped configurations to tell again."""
        for m in measurements:
            for k, v in enumerate(m.env.get("judged", ())[:len(self.recorded)]):
                self.recorded[k].append(float(v))
        if status is Status.STOPPED:
            runs = [m.metrics[self.metric] for m in measurements if self.metric in m.metrics]
            if not runs or not np.isfinite(np.mean(runs)):
                return value, status, []
            self.short[config] = float(np.mean(runs))
            if trial is not None:
                self.stopped[trial.id] = (trial, list(measurements))
            return self.told(config), Status.SUCCEEDED, []
        if status is not Status.SUCCEEDED or value is None:
            return value, status, []
        return value, status, self._whole(float(value))

    def _whole(self, value: float) -> list[tuple[Config, float]]:
        """A new whole run's value: the stopped configurations whose told value it lowers, and to what."""
        before = {c: self.told(c) for c in self.short}
        self.whole.append(value)
        return [(c, now) for c in self.short if (now := self.told(c)) != before[c]]

    def promote(self, busy: set[int]) -> TrialView | None:
        """The stopped trial to measure whole next (None: there is none): the one that reached the furthest rung,
        then the one standing best in that rung's record (the share of it that did better)."""
        def promise(item: tuple[TrialView, list[Measurement]]) -> tuple[int, float]:
            m = item[1][-1]
            rung = int(m.env.get("stopped_at_rung", 0))
            values = self.recorded[rung] if rung < len(self.recorded) else []
            value = float(m.metrics.get(self.metric, np.nan))
            ahead = sum(1 for v in values if (v > value if self.direction == "max" else v < value))
            return -rung, ahead / max(len(values), 1)

        waiting = [item for trial_id, item in self.stopped.items() if trial_id not in busy]
        return min(waiting, key=promise)[0] if waiting else None

    def runs(self, trial_id: int) -> int:
        """The runs a stopped trial has (a promoted one's whole run comes after them)."""
        return len(self.stopped[trial_id][1])

    def earlier(self, trial_id: int) -> list[Measurement]:
        """A promoted trial's runs before its whole one."""
        return list(self.stopped[trial_id][1])

    def promoted(self, trial_id: int, status: Status, value: float | None) -> list[tuple[Config, float]]:
        """A stopped trial measured whole: it is no longer a stopped one; the configurations to tell again."""
        trial, _ = self.stopped.pop(trial_id)
        self.short.pop(Config(trial.config), None)
        if status is not Status.SUCCEEDED or value is None:
            return []
        return self._whole(float(value))


class Races:
    """The loop's side of adaptive repeats: every finished trial's measurements and standing, and the
    intensifier's choice of what to measure again. ``finished`` are settled already (``settle``)."""

    def __init__(self, objective: Objective | MultiObjective, max_repeats: int, finished: Sequence[TrialView]):
        self.objective, self.max_repeats = objective, max_repeats
        self._trials: dict[int, TrialView] = {}
        self._measurements: dict[int, list[Measurement]] = {}
        self._standings: dict[int, Standing] = {}
        for t in finished:
            if Status(t.status).terminal and t.measurements is not None:
                self._trials[t.id], self._measurements[t.id] = t, stored_measurements(t)
                self.finish(t.id, t.value if t.status == Status.SUCCEEDED.value else None)

    def known(self, trial_id: int) -> bool:
        return trial_id in self._measurements

    def runs(self, trial_id: int) -> int:
        return len(self._measurements.get(trial_id, ()))

    def add(self, trial: TrialView, measurements: Sequence[Measurement]) -> list[Measurement]:
        """All of the trial's measurements, with the ones just taken."""
        self._trials[trial.id] = trial
        self._measurements[trial.id] = self._measurements.get(trial.id, []) + list(measurements)
        return self._measurements[trial.id]

    def finish(self, trial_id: int, value: float | None) -> None:
        """A trial's standing: its whole runs (a promoted trial's run stopped at a rung is not one) and its value."""
        self._standings[trial_id] = Standing(trial_id, len(whole_runs(self._measurements.get(trial_id, ()))), value)

    def incumbent(self) -> Standing | None:
        return incumbent(self._standings.values(), self.objective.direction)

    def next(self, busy: set[int]) -> TrialView | None:
        chosen = next_remeasure(self._standings.values(), self.objective.direction, self.max_repeats, busy)
        return None if chosen is None else self._trials[chosen]

    def finalist(self, busy: set[int]) -> TrialView | None:
        """Once nothing new can be asked: a configuration within noise of the incumbent, measured once more."""
        chosen = next_finalist(self._standings.values(), self.objective.direction, self.max_repeats, self.run_sd(),
                               busy)
        return None if chosen is None else self._trials[chosen]

    def run_sd(self) -> float | None:
        """One whole run's standard deviation, pooled over the configurations measured more than once (None: none
        is, or the objective weighs several metrics, whose runs have no one scale)."""
        if not isinstance(self.objective, Objective):
            return None
        squares, free = 0.0, 0
        for trial_id, standing in self._standings.items():
            runs = [m.metrics[self.objective.metric] for m in whole_runs(self._measurements[trial_id])
                    if self.objective.metric in m.metrics]
            if standing.value is not None and len(runs) > 1:
                squares += float(np.var(runs, ddof=1)) * (len(runs) - 1)
                free += len(runs) - 1
        return (squares / free) ** 0.5 if free else None
