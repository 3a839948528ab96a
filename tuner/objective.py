"""What a campaign optimises: one metric and the direction that is better."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from runners import Direction, Measurement, Status, guess_direction
from search_spaces.status import better


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: Direction

    @classmethod
    def resolve(
        cls, reported: Mapping[str, Direction | None], metric: str | None, direction: str | None
    ) -> Objective:
        """The objective from what the runner reports and what the user asked for.

        ``reported`` is empty for runners whose metrics are only known after a run (a command).
        """
        if metric is None:
            if not reported:
                raise ValueError("name the metric to optimise with --metric (this runner's metrics come from its output)")
            metric = next(iter(reported))
        elif reported and metric not in reported:
            raise ValueError(f"unknown metric {metric!r}; this runner reports: {', '.join(reported)}")
        if direction is None:
            direction = reported.get(metric) or guess_direction(metric)
        if direction not in ("min", "max"):
            raise ValueError(f"say whether to minimise or maximise {metric!r}: --direction min or --direction max")
        return cls(metric, direction)  # type: ignore[arg-type]

    def outcome(self, measurements: Sequence[Measurement]) -> tuple[Status, float | None, str | None]:
        """A trial's status, value (the mean over its repeats) and reason, from its measurements."""
        if not measurements:
            return Status.FAILED, None, "no measurement was taken"
        last = measurements[-1]
        if last.status is not Status.SUCCEEDED:
            return last.status, None, last.reason
        missing = [m for m in measurements if self.metric not in m.metrics]
        if missing:
            reported = ", ".join(missing[0].metrics) or "nothing"
            return Status.FAILED, None, f"the runner reported no {self.metric!r}; it reported: {reported}"
        values = [m.metrics[self.metric] for m in measurements]
        if not all(isinstance(v, (int, float)) and np.isfinite(v) for v in values):
            shown = ", ".join(map(str, values))
            return Status.FAILED, None, f"the runner reported {self.metric} = {shown}: a value must be a finite number"
        return Status.SUCCEEDED, float(np.mean(values)), None

    def better(self, a: float, b: float) -> bool:
        """Is ``a`` strictly better than ``b``?"""
        return better(a, b, self.direction)

    def to_dict(self) -> dict[str, str]:
        return {"metric": self.metric, "direction": self.direction}
