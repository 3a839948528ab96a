"""The campaign loop: ask the algorithm, measure, tell it the results, record everything.

A campaign survives its driver: every state change is committed as it happens, so after a crash
or a SIGKILL, ``Campaign.resume`` marks the trials that were RUNNING as STALE, re-runs their
configurations, replays the finished trials into a fresh algorithm, and finishes the budget.
Only finished trials (SUCCEEDED, FAILED, INVALID, TIMEOUT) count towards the budget.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runners import Direction, Runner, Status, make_runner
from search_spaces import Config, config_hash
from tuner.analysis import CampaignSummary
from tuner.executor import Executor, Job, LocalExecutor, repeat_seeds
from tuner.history import History
from tuner.models import CampaignRecord, TrialRecord
from tuner.objective import Objective
from tuner.registry import make_tuner

STALE_REASON = "its driver stopped before the trial finished; the configuration is re-run"


@dataclass(frozen=True)
class CampaignSpec:
    """Everything that defines a new campaign. Validated before anything is written."""

    runner: str
    runner_settings: Mapping[str, Any]
    algorithm: str = "random"
    algorithm_params: Mapping[str, Any] = field(default_factory=dict)
    metric: str | None = None
    direction: Direction | None = None
    budget: int = 50
    seed: int = 0
    repeats: int = 1
    batch_size: int = 1  # configurations asked and measured at once


@dataclass(frozen=True)
class TrialResult:
    """One finished trial, as progress displays see it."""

    number: int
    config: Config
    status: Status
    value: float | None
    reason: str | None
    duration_s: float
    evaluated: int
    budget: int
    best_value: float | None


def trial_seed(campaign_seed: int, config: Config) -> int:
    """The seed a configuration is measured with in a campaign: campaigns with the same seed draw the
    same noise for the same configuration (common random numbers), which makes comparisons fairer."""
    return int(np.random.SeedSequence([campaign_seed, int(config_hash(config), 16)]).generate_state(1)[0])


class Campaign:
    def __init__(
        self,
        history: History,
        record: CampaignRecord,
        runner: Runner,
        objective: Objective,
        executor: Executor | None = None,
    ):
        self.history = history
        self.record = record
        self.runner = runner
        self.objective = objective
        self.executor = executor or LocalExecutor()
        self.tuner = make_tuner(
            record.algorithm,
            runner.space,
            seed=record.seed,
            direction=objective.direction,
            params=record.algorithm_params,
        )

    @property
    def id(self) -> int:
        return self.record.id

    # --- creating and resuming ------------------------------------------------------------------------
    @classmethod
    def create(cls, history: History, spec: CampaignSpec, runner: Runner | None = None) -> Campaign:
        """A new campaign. Bad input (unknown algorithm or hyperparameter, a budget the space cannot
        fill, an unknown metric) raises ValueError before anything is written to the history."""
        runner = runner or make_runner(spec.runner, **spec.runner_settings)
        objective = Objective.resolve(runner.metrics(), spec.metric, spec.direction)
        for name, value in (("budget", spec.budget), ("repeats", spec.repeats), ("batch size", spec.batch_size)):
            if value < 1:
                raise ValueError(f"the {name} must be at least 1, not {value}")
        size = runner.space.cardinality() if runner.space.finite else None
        if size is not None and spec.budget > size:
            raise ValueError(
                f"a budget of {spec.budget} is more than the {size} configurations of {runner.space.name}; "
                f"use --budget {size} or less"
            )
        make_tuner(spec.algorithm, runner.space, seed=spec.seed, direction=objective.direction, params=spec.algorithm_params)
        record = history.create_campaign(
            space_name=runner.space.name,
            space_fingerprint=runner.space.fingerprint(),
            space=runner.space.to_dict(),
            runner=runner.name,
            runner_settings=runner.settings(),
            workload_name=runner.workload.name,
            workload_fingerprint=runner.workload.fingerprint(),
            workload=runner.workload.to_dict(),
            device=getattr(runner, "device", runner.name),
            algorithm=spec.algorithm,
            algorithm_params=dict(spec.algorithm_params),
            objective_metric=objective.metric,
            objective_direction=objective.direction,
            budget=spec.budget,
            seed=spec.seed,
            repeats=spec.repeats,
            batch_size=spec.batch_size,
        )
        return cls(history, record, runner, objective)

    @classmethod
    def resume(cls, history: History, campaign_id: int) -> Campaign:
        """The campaign ``campaign_id``, ready to finish its budget."""
        record = history.campaign(campaign_id)
        _refuse_if_driven_elsewhere(record)
        runner = make_runner(record.runner, **record.runner_settings)
        if runner.workload.fingerprint() != record.workload_fingerprint:
            raise ValueError(f"campaign {campaign_id}: its workload {record.workload_name} changed since it started")
        if runner.space.fingerprint() != record.space_fingerprint:
            raise ValueError(f"campaign {campaign_id}: the search space {record.space_name} changed since it started")
        objective = Objective(record.objective_metric, record.objective_direction)  # type: ignore[arg-type]
        return cls(history, record, runner, objective)

    # --- the loop -------------------------------------------------------------------------------------
    def run(self, on_trial: Callable[[TrialResult], None] | None = None) -> CampaignSummary:
        """Run until the budget is spent or the space is exhausted; returns the summary."""
        rec, history = self.record, self.history
        history.claim(rec.id, socket.gethostname(), os.getpid())
        history.mark_stale(rec.id, STALE_REASON)
        trials = history.trials(rec.id)
        retried = {t.retry_of for t in trials if t.retry_of is not None}
        stale = [t for t in trials if t.status == Status.STALE.value and t.id not in retried]
        for t in trials:
            if Status(t.status).terminal:
                self.tuner.tell(Config(t.config), t.value, Status(t.status))
        evaluated = sum(1 for t in trials if Status(t.status).terminal)
        best = self.tuner.best
        queue = [t for t in trials if t.status == Status.PENDING.value]
        if stale:
            configs = [Config(t.config) for t in stale]
            queue += self._add(configs, retry_of=[t.id for t in stale])
        note = None
        try:
            while evaluated < rec.budget:
                if not queue:
                    configs = self.tuner.ask(min(rec.batch_size, rec.budget - evaluated))
                    if not configs:
                        note = f"the search space was exhausted after {evaluated} trials"
                        break
                    queue = self._add(configs)
                batch, queue = queue[: rec.batch_size], queue[rec.batch_size :]
                history.start_trials([t.id for t in batch])
                jobs = [Job(t.id, Config(t.config), repeat_seeds(t.seed, rec.repeats)) for t in batch]
                numbers = {t.id: t.number for t in batch}
                for job, measurements in self.executor.run(self.runner, self.runner.workload, jobs, self._record):
                    status, value, reason = self.objective.outcome(measurements)
                    history.finish_trial(job.trial_id, status, value, reason)
                    self.tuner.tell(job.config, value, status)
                    evaluated += 1
                    best = self.tuner.best
                    if on_trial is not None:
                        best_value = None if best is None else self._value(best.loss)
                        duration = sum(m.duration_s for m in measurements)
                        on_trial(
                            TrialResult(
                                numbers[job.trial_id], job.config, status, value, reason, duration,
                                evaluated, rec.budget, best_value,
                            )
                        )
        except KeyboardInterrupt:
            history.mark_stale(rec.id, STALE_REASON)
            history.finish_campaign(rec.id, "interrupted", f"interrupted; resume with --resume {rec.id}")
            raise
        history.finish_campaign(rec.id, "finished", note)
        return self.summary()

    def summary(self) -> CampaignSummary:
        record = self.history.campaign(self.id)
        return CampaignSummary.of(record, self.history.trials(self.id), self.history.url)

    def _add(self, configs: list[Config], retry_of: list[int] | None = None) -> list[TrialRecord]:
        seeds = [trial_seed(self.record.seed, c) for c in configs]
        return self.history.add_trials(self.id, configs, seeds, retry_of or ())

    def _record(self, job: Job, repeat: int, measurement: Any) -> None:
        self.history.add_measurement(job.trial_id, repeat, measurement)

    def _value(self, loss: float | None) -> float | None:
        if loss is None:
            return None
        return loss if self.objective.direction == "min" else -loss


def _refuse_if_driven_elsewhere(record: CampaignRecord) -> None:
    """Two drivers on one campaign would count trials twice."""
    if record.state != "running" or record.driver_pid is None or record.driver_pid == os.getpid():
        return
    if record.driver_host == socket.gethostname() and _alive(record.driver_pid):
        raise ValueError(f"campaign {record.id} is still being run by process {record.driver_pid}; stop it first")


def _alive(pid: int) -> bool:
    """Is ``pid`` a live StoreTune process? (A reused pid or a zombie is not.)"""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: err on the side of not driving one campaign twice
    return b"storetune" in cmdline or b"tuner" in cmdline
