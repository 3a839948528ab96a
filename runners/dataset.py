"""Replays an exhaustive table: a configuration's measurement is one of its recorded repeats."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from runners.base import Direction, Measurement, Status, Workload
from runners.tables import Table, load_table
from search_spaces import Config, InvalidConfig


class DatasetRunner:
    """The fast, offline environment: each evaluation draws one repeat of the configuration with
    the given seed, which models measurement noise; the mean of the repeats is the ground truth."""

    name: ClassVar[str] = "dataset"

    def __init__(
        self,
        dataset: str | Path | Sequence[str | Path],
        context: Mapping[str, Any] | None = None,
        metric: str | None = None,
    ):
        self.table: Table = load_table(dataset, context, metric)
        self._metric = metric
        self.space = self.table.space
        self.workload: Workload = self.table.workload

    def metrics(self) -> dict[str, Direction | None]:
        return dict(self.table.metrics)

    def settings(self) -> dict[str, Any]:
        return {
            "dataset": [str(p.resolve()) for p in self.table.sources],
            "context": {k: v for k, v in self.table.context.items()},
            "metric": self._metric,
        }

    def close(self) -> None:
        """Nothing to release."""

    def run(self, config: Config, workload: Workload, *, seed: int) -> Measurement:
        if workload.fingerprint() != self.workload.fingerprint():
            return Measurement.failed(Status.FAILED, f"this runner replays {self.workload.name}, not {workload.name}")
        try:
            config = self.space.validate(config)
        except InvalidConfig as e:
            return Measurement.failed(Status.INVALID, str(e))
        env = {"engine": "dataset", "dataset": self.table.name, "sha256": self.table.sha256, "seed": seed}
        if config in self.table.outcomes:
            status, reason = self.table.outcomes[config]
            return Measurement.failed(status, reason or f"recorded as {status.value} in {self.table.name}", env=env)
        rows = self.table.repeats.get(config)
        if rows is None:
            return Measurement.failed(
                Status.INVALID,
                f"configuration not present in {self.table.name} ({len(self.table.repeats)} configurations)",
                env=env,
            )
        i = int(np.random.default_rng(seed).integers(len(rows)))
        metrics = {m: float(v) for m, v in zip(self.table.metrics, rows[i]) if not np.isnan(v)}
        return Measurement(Status.SUCCEEDED, metrics, env={**env, "repeat": i, "repeats": len(rows)})
