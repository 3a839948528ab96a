"""Replays an exhaustive table: a configuration's measurement is one of its recorded repeats."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from storetune.runners.base import Direction, GoOn, Measurement, RunnerBase, Status, Workload
from storetune.runners.settings import DatasetSettings
from storetune.runners.tables import Table, load_table
from storetune.search_spaces import Config


class DatasetRunner(RunnerBase):
    """The fast, offline environment: each evaluation draws one repeat of the configuration with
    the given seed, which models measurement noise; the mean of the repeats is the ground truth."""

    name: ClassVar[str] = "dataset"
    replays: ClassVar[bool] = True

    def __init__(self, settings: DatasetSettings):
        super().__init__(settings)
        self.table: Table = load_table(settings.dataset, settings.context, settings.metric, drop=settings.drop)
        self._metric = settings.metric
        self.space = self.table.space
        self.workload: Workload = self.table.workload

    def metrics(self) -> dict[str, Direction | None]:
        return dict(self.table.metrics)

    def settings(self) -> dict[str, Any]:
        return {
            "dataset": [str(p.resolve()) for p in self.table.sources],
            "context": {k: v for k, v in self.table.context.items()},
            "metric": self._metric,
            "drop": list(self.table.dropped),
        }

    def notes(self) -> tuple[str, ...]:
        return self.table.notes

    def label(self) -> str:
        """A dataset folder's name (``loop-storage-v3``), not its table file's (``measurements``); a table's
        name otherwise. Its space keeps the table's name: campaigns' fingerprints do not change."""
        folders = {p.parent for p in self.table.sources}
        if len(folders) == 1 and (next(iter(folders)) / "manifest.json").is_file():
            return next(iter(folders)).name
        return self.space.name

    def workload_fingerprint(self) -> dict[str, Any] | None:
        """The pinned workload's fingerprint, where the dataset ships one: ``fingerprints.json`` beside
        its table, measured with it (see the dataset's manifest)."""
        from storetune.runners.fingerprint import dataset_fingerprint

        return dataset_fingerprint(self.table.sources[0].parent, self.workload.name)

    def measure(self, config: Config, workload: Workload, *, seed: int) -> Measurement:
        if workload.fingerprint() != self.workload.fingerprint():
            return Measurement.failed(Status.FAILED, f"this runner replays {self.workload.name}, not {workload.name}")
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
        series = self.table.series.get(config, (None,) * len(rows))[i]
        # a repeat with a series replays a run that long: its device-seconds (a replay takes no time of its own)
        return Measurement(Status.SUCCEEDED, metrics, env={**env, "repeat": i, "repeats": len(rows)},
                           duration_s=0.0 if series is None else series.seconds, series=series)

    def full_length_s(self) -> float:
        """The shortest series the table keeps: every repeat can be replayed that long (0: a repeat keeps no series,
        and could only be replayed whole)."""
        runs = [s for repeats in self.table.series.values() for s in repeats]
        if not runs or any(s is None for s in runs):
            return 0.0
        return min(s.seconds for s in runs)

    def interval_s(self) -> float:
        """The coarsest interval of the table's series (1 s for fio's logs)."""
        return max((s.interval_s for repeats in self.table.series.values() for s in repeats if s is not None),
                   default=1.0)

    def watched_metrics(self) -> tuple[str, ...]:
        """The metrics every repeat's series holds."""
        runs = [set(s.values) for repeats in self.table.series.values() for s in repeats if s is not None]
        return tuple(sorted(set.intersection(*runs))) if runs else ()

    def run_watched(self, config: Config, workload: Workload, *, seed: int, rungs: Sequence[float],
                    go_on: GoOn) -> Measurement:
        """The drawn repeat replayed rung by rung (``measure_at`` at each length): it stops where ``go_on`` says,
        with what it measured up to there; a run that reaches the last rung is the whole run's measurement
        (its metrics as recorded, latency percentiles too)."""
        done: Measurement | None = None
        for k, seconds in enumerate(rungs):
            last = k == len(rungs) - 1
            done = self.run(config, workload, seed=seed) if last else \
                self.measure_at(config, workload, seed=seed, seconds=seconds)
            if done.status is not Status.SUCCEEDED:
                return done
            if last:
                return replace(done, env={**done.env, "run_length_s": seconds}, duration_s=seconds)
            if not go_on(k, done.metrics):
                return replace(done, env={**done.env, "stopped_at_rung": k})
        raise ValueError("run_watched needs at least one rung")

    def measure_at(self, config: Config, workload: Workload, *, seed: int, seconds: float,
                   skip_s: float = 0.0) -> Measurement:
        """What a run of ``seconds`` after ``skip_s`` of warm-up would have said: the mean of those intervals of
        the drawn repeat's series, for the metrics the series has (a shorter run reports no latency
        percentiles here). A repeat without a series cannot answer: FAILED, with the reason."""
        m = self.run(config, workload, seed=seed)
        if m.status is not Status.SUCCEEDED:
            return m
        if m.series is None:
            return Measurement.failed(Status.FAILED, f"{self.table.name} keeps no per-interval series for this "
                                      "repeat: it can be replayed at its full length only", env=m.env)
        try:
            metrics = {k: m.series.mean(k, seconds, skip_s) for k in m.series.values}
        except ValueError as e:
            return Measurement.failed(Status.FAILED, str(e), env=m.env)
        return Measurement(Status.SUCCEEDED, metrics, env={**m.env, "run_length_s": seconds, "skip_s": skip_s},
                           duration_s=seconds, series=m.series.head(skip_s + seconds))
