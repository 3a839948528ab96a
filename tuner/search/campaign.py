"""The campaign loop: ask the algorithm, measure, tell it the results, record everything.

A campaign survives its driver: every state change is committed as it happens, so after a crash
or a SIGKILL, ``Campaign.resume`` marks the trials that were RUNNING as STALE, re-runs their
configurations, replays the finished trials into a fresh algorithm, and finishes the budget.
Only finished trials (SUCCEEDED, FAILED, INVALID, TIMEOUT) count towards the budget.
"""

from __future__ import annotations


import copy
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from storetune.runners import HostUnavailable, Runner, Status, inspected_runner, make_runner
from storetune.search_spaces import Config, SearchSpace
from storetune.tuner.analysis.summary import CampaignSummary, evaluations
from storetune.tuner.execution.jobs import Executor, ExecutorLost
from storetune.tuner.execution.local import LocalExecutor
from storetune.tuner.history.store import History
from storetune.tuner.objectives.fidelity import RungError, Rungs, watchable
from storetune.tuner.objectives.intensify import RepeatRace, check_max_repeats
from storetune.tuner.history.memory import MemoryStore
from storetune.tuner.search.loop import TrialResult, run_loop, run_seconds, settle, trial_seed
from storetune.tuner.search.remeasure import Shortened, stored_measurements
from storetune.tuner.history.views import CampaignView, TrialView
from storetune.tuner.objectives.objective import MultiObjective, Objective, campaign_objective, resolve_objective
from storetune.tuner.algorithms.base import Tuner
from storetune.tuner.algorithms.registry import check_pareto_algorithm, default_algorithm, make_tuner
from storetune.tuner.search.spec import (
    SEED_LIMIT, WARM_STARTS, CampaignSpec, InvalidSpec, capped_budget, checked, evaluations_each, fidelity_record,
)

SIMILAR_WORKLOADS = 3  # --warm-start similar: the nearest known workloads whose near-optimal configurations go first
SIMILAR_WITHIN = 0.95  # ... within 5% of each one's best


def similar_first(budget: int) -> int:
    """How many of the similar workloads' configurations a campaign measures first: a fifth of its budget,
    between 1 and 10, so that the algorithm's own search keeps most of it."""
    return max(1, min(10, budget // 5))

STALE_REASON = "its driver stopped before the trial finished; the configuration is re-run"


class Campaign:
    def __init__(
        self,
        history: History,
        record: CampaignView,
        runner: Runner,
        objective: Objective | MultiObjective,
        executor: Executor | None = None,
    ):
        self.history = history
        self.record = record
        self.runner = runner
        self.objective = objective
        if isinstance(objective, MultiObjective):  # the reference of the scores, recorded once it is known
            objective.on_reference = lambda spec: history.set_objective(record.id, spec)
        self.executor = executor or LocalExecutor()
        self._tuner: Tuner | None = None

    @property
    def tuner(self) -> Tuner:
        """The algorithm, built when the campaign first needs it (a queued campaign never does): with the
        hyperparameters it was created with, resolved then, so a resume runs what it started with."""
        if self._tuner is None:
            record = self.record
            self._tuner = make_tuner(record.algorithm, self.runner.space, seed=record.seed,
                                     direction=self.objective.direction,
                                     params=record.resolved_params or record.algorithm_params)
        return self._tuner

    @property
    def id(self) -> int:
        return self.record.id

    # --- creating and resuming ------------------------------------------------------------------------
    @classmethod
    def prepare(cls, spec: CampaignSpec, runner: Runner | None = None, executor: Executor | None = None,
                remote: bool = False) -> tuple[Runner, Objective | MultiObjective]:
        """The runner (with the pinned parameters) and objective of ``spec``, after every check a new
        campaign makes: an unknown algorithm or hyperparameter, a budget the space cannot fill or an
        unknown metric raise ValueError. Nothing is written."""
        runner, objective, _ = cls._checked(spec, runner, executor, remote)
        return runner, objective

    @classmethod
    def _checked(cls, spec: CampaignSpec, runner: Runner | None, executor: Executor | None,
                 remote: bool) -> tuple[Runner, Objective | MultiObjective, Tuner]:
        """``prepare``'s checks, with the algorithm they built (a new campaign keeps it: one build)."""
        runner = runner or checked("runner_settings", lambda: _driver_runner(spec.runner, spec.runner_settings,
                                                                             executor))
        runner.space = checked("fix", lambda: runner.space.fix(spec.fixed, strict=True))  # an unknown parameter or value
        checked("fix", lambda: runner.check_pins({name: runner.space[name].canonical(value)
                                                  for name, value in spec.fixed.items()}))
        checked("parallel", lambda: _refuse_parallel_if_exclusive(runner, executor, spec.batch_size, remote))
        objective = checked("objective" if spec.objective is not None else "metric", lambda: resolve_objective(
            runner.metrics(), spec.metric, spec.direction, spec.objective))
        algorithm = spec.algorithm or default_algorithm(objective.kind)
        if objective.kind == "pareto":
            checked("algorithm", lambda: check_pareto_algorithm(algorithm))
        if isinstance(objective, MultiObjective) and spec.warm_start != "none":
            raise InvalidSpec("warm_start", f"`warm_start` {spec.warm_start} needs a single `metric`: the scores of an "
                                            "`objective` are relative to each campaign's first trial")
        if spec.warm_start not in WARM_STARTS:
            raise InvalidSpec("warm_start", f"`warm_start` {spec.warm_start!r}: choose {' or '.join(WARM_STARTS)}")
        if not 0 <= spec.seed < SEED_LIMIT:  # the history stores it as a signed 64-bit integer
            raise InvalidSpec("seed", f"the seed must be from 0 to 2^63 - 1, not {spec.seed}")
        for name, field, value in (("budget", "budget", spec.budget), ("repeats", "repeats", spec.repeats),
                                   ("batch size", "parallel", spec.batch_size)):
            if value < 1:
                raise InvalidSpec(field, f"the {name} must be at least 1, not {value}")
        checked("max_repeats", lambda: check_max_repeats(spec.max_repeats, spec.repeats))
        size = runner.space.cardinality() if runner.space.finite else None
        each = evaluations_each(spec)
        if size is not None and spec.budget > size * each and spec.budget_s is None:  # device-seconds: capped at create
            pins = f" with {', '.join(f'{k}={v}' for k, v in spec.fixed.items())}" if spec.fixed else ""
            most = f"{size} configurations of {runner.space.name}{pins}"
            raise InvalidSpec("budget", f"a budget of {spec.budget} is more than the {most}"
                                        + (f" can take ({each} evaluations each)" if each > 1 else "")
                                        + f"; use a budget of {size * each} or less")
        tuner = checked("algorithm_params", lambda: make_tuner(algorithm, runner.space, seed=spec.seed,
                                                               direction=objective.direction,
                                                               params=spec.algorithm_params))
        if (capacity := tuner.capacity()) is not None:  # a fixed set of configurations (grid)
            held, why = capacity
            if spec.budget > held * evaluations_each(spec) and spec.budget_s is None:  # device-seconds: capped
                raise InvalidSpec("budget", f"a budget of {spec.budget} is more than the {held} configurations of "
                                            f"the {algorithm} here ({why}); use a budget of {held} or less, or raise "
                                            "its hyperparameter per_stratum")
        checked("fidelity", lambda: fidelity_record(spec, runner, objective))
        return runner, objective, tuner

    @classmethod
    def create(cls, history: History, spec: CampaignSpec, runner: Runner | None = None,
               executor: Executor | None = None, *, origin: str = "cli", state: str = "running",
               executor_kind: str | None = None, remote: bool = False) -> Campaign:
        """A new campaign, recorded once ``prepare`` found nothing wrong with it. ``executor_kind`` is where a
        queued campaign is to be measured (its driver, not its creator, makes the executor), and ``remote``
        whether that executor places measurements by their resources elsewhere (a cluster)."""
        runner, objective, tuner = cls._checked(spec, runner, executor, remote)
        algorithm = spec.algorithm or default_algorithm(objective.kind)
        features = record_fingerprint(history, runner)
        if spec.warm_start == "similar":
            checked("warm_start", lambda: _similar(history, runner, objective.metric, features, spec.budget))
        record = history.create_campaign(
            space_name=runner.label(),
            space_fingerprint=runner.space.fingerprint(),
            space=runner.space.to_dict(),
            runner=runner.name,
            runner_settings=runner.settings(),
            workload_name=runner.workload.name,
            workload_fingerprint=runner.workload.fingerprint(),
            workload=runner.workload.to_dict(),
            device=runner.device,
            algorithm=algorithm,
            algorithm_params=dict(spec.algorithm_params),
            resolved_params=tuner.resolved_params(),
            objective_metric=objective.metric,
            objective_direction=objective.direction,
            objective=objective.spec() if isinstance(objective, MultiObjective) else None,
            budget=capped_budget(spec, runner, tuner),
            seed=spec.seed,
            repeats=spec.repeats,
            max_repeats=spec.max_repeats,
            batch_size=spec.batch_size,
            warm_start=spec.warm_start,
            fixed={k: runner.space[k].default for k in spec.fixed},
            fidelity=fidelity_record(spec, runner, objective),
            origin=origin,
            state=state,
            executor={"kind": executor_kind or (executor.kind if executor is not None else "local")},
            # a campaign created running is driven by its creator (the CLI); a queued one by nobody yet
            driver_host=socket.gethostname() if state == "running" else None,
            driver_pid=os.getpid() if state == "running" else None,
        )
        campaign = cls(history, record, runner, objective, executor)
        campaign._tuner = tuner  # built once, by the checks: the same seed and hyperparameters
        return campaign

    @classmethod
    def resume(cls, history: History, campaign_id: int, executor: Executor | None = None,
               handed_by: int | None = None) -> Campaign:
        """The campaign ``campaign_id``, ready to finish its budget. A campaign another live process
        drives is refused, unless that process is ``handed_by`` (the service that claimed it for this
        worker). Resuming a campaign that was cancelled withdraws the cancel."""
        record = history.campaign(campaign_id)
        _refuse_if_driven_elsewhere(record, handed_by)
        if record.cancel_requested and record.state != "running":
            history.transition(campaign_id, [record.state], cancel_requested=False)
        runner = _driver_runner(record.runner, record.runner_settings, executor)
        runner.space = runner.space.fix(record.fixed)
        _refuse_parallel_if_exclusive(runner, executor)
        if runner.workload.fingerprint() != record.workload_fingerprint:
            raise ValueError(f"campaign {campaign_id}: its workload {record.workload_name} changed since it started")
        if (runner.space.fingerprint() != record.space_fingerprint
                and _labelled_twice(runner.space, record.fixed) != record.space_fingerprint):  # hashed only then
            raise ValueError(f"campaign {campaign_id}: the search space {record.space_name} changed since it started")
        if record.fidelity and record.fidelity.get("kind") == "asha":  # a table that changed may no longer fit
            try:
                watchable(runner, Rungs.recorded(record.fidelity))
            except RungError as e:
                raise ValueError(f"campaign {campaign_id}: its rungs no longer fit its runner: {e}") from None
        return cls(history, record, runner, campaign_objective(record), executor)

    # --- the loop -------------------------------------------------------------------------------------
    def run(self, on_trial: Callable[[TrialResult], None] | None = None) -> CampaignSummary:
        """Run until the budget is spent, the space is exhausted, or a cancel is requested (from the
        REST API, through the history): then the running trials finish and are recorded, and the
        campaign is ``cancelled``. Returns the summary."""
        rec, history = self.record, self.history
        history.claim(rec.id, socket.gethostname(), os.getpid())
        history.mark_stale(rec.id, STALE_REASON)
        similar = None
        if rec.warm_start in ("same", "similar"):
            # with the twice-labelled fingerprint `tune --fix` recorded until 2026-11-27: the same space
            self.tuner.warm_start(history.prior_observations(rec, [_labelled_twice(self.runner.space, rec.fixed)]))
        if rec.warm_start == "similar":
            features = history.fingerprints().get(rec.workload_fingerprint, {}).get("features")
            similar = _similar(history, self.runner, rec.objective_metric, features, rec.budget,
                               exclude=rec.workload_fingerprint)
            self.tuner.measure_first(similar["first"])
        adaptive = rec.adaptive
        pareto = self.objective.kind == "pareto"
        trials = history.trials(rec.id, measurements=adaptive or pareto or bool(rec.fidelity))
        if adaptive:
            trials = settle(trials, self.objective, history)
        rungs = None if not rec.fidelity or rec.fidelity["kind"] != "asha" else \
            Rungs.recorded(rec.fidelity)
        finished = [t for t in trials if Status(t.status).terminal]
        # multi-fidelity: a stopped run is told as the loop tells it, its rung value capped at the worst whole run
        short = None if rungs is None else Shortened(rungs, self.objective, finished)  # type: ignore[arg-type]
        for t in finished:  # what this campaign measured already (after a crash or an interrupt)
            if short is not None and (told := short.told(Config(t.config))) is not None:
                self.tuner.tell(Config(t.config), told)
                continue
            vector = self.objective.vector(stored_measurements(t)) if pareto and t.status == "SUCCEEDED" else None
            self.tuner.tell(Config(t.config), t.value, Status(t.status), vector)
        retried = {t.retry_of for t in trials if t.retry_of is not None}
        stale = [t for t in trials if t.status == Status.STALE.value and t.id not in retried]
        queue: list[TrialView] = [t for t in trials if t.status == Status.PENDING.value]
        if stale:
            configs = [Config(t.config) for t in stale]
            queue += history.add_trials(rec.id, configs, [trial_seed(rec.seed, c) for c in configs], [t.id for t in stale])
        try:
            self.executor.start()
            self.executor.fit(self.runner)  # caps what runs at once to what the cluster holds, with a note
            self._record_executor()
            outcome = run_loop(
                campaign_id=rec.id,
                tuner=self.tuner,
                runner=self.runner,
                objective=self.objective,
                store=history,
                budget=rec.budget,
                repeats=rec.repeats,
                batch_size=rec.batch_size,
                seed=rec.seed,
                evaluated=evaluations(trials, rec.repeats),
                queue=queue,
                executor=self.executor,
                on_trial=on_trial,
                stop=lambda: history.cancel_requested(rec.id),
                max_repeats=rec.max_repeats,
                finished=finished if adaptive or rec.fidelity else (),
                fidelity=rungs,
                budget_s=(rec.fidelity or {}).get("budget_s"),
                device_s=run_seconds([m for t in trials for m in stored_measurements(t)]) if rec.fidelity else 0.0,
                race=RepeatRace(rec.objective_direction, rec.repeats)
                if (rec.fidelity or {}).get("race", "none") != "none" else None,
            )
        except KeyboardInterrupt:
            history.mark_stale(rec.id, STALE_REASON)
            history.finish_campaign(rec.id, "interrupted", f"interrupted; resume with --resume {rec.id}")
            raise
        except ExecutorLost as e:  # the cluster went away: no configuration's fault either
            history.mark_stale(rec.id, f"{e}; the configuration is re-run")
            history.finish_campaign(rec.id, "interrupted", f"{e}. Its finished trials are kept; resume it with "
                                                           f"--resume {rec.id} when the cluster is back")
            raise
        except HostUnavailable as e:  # no configuration's fault: none is condemned, the running ones are re-run
            history.mark_stale(rec.id, f"the host could not measure it ({e}); the configuration is re-run")
            note = (f"stopped: {e}. Its finished trials are kept and its running ones are measured again when it "
                    f"is resumed (--resume {rec.id}; a sweep: the same command again)")
            history.finish_campaign(rec.id, "failed", note)
            raise HostUnavailable(f"campaign {rec.id} {note}") from e
        finally:
            self.runner.close()
            self.executor.close()
        self._record_executor()  # with the nodes its trials ran on
        history.finish_campaign(rec.id, "cancelled" if outcome.stopped else "finished", outcome.note)
        summary = self.summary()
        if rec.warm_start == "none":
            return summary
        return replace(summary, warm_started=self.tuner.warm_started, similar=similar)

    def _record_executor(self) -> None:
        """Where the trials are measured, as the executor found it: its kind, the cluster, the workers in
        flight (and why fewer than asked), and what each measurement holds of a node."""
        self.history.set_executor(self.id, {**(self.record.executor or {}), **self.executor.describe(),
                                            "per_task": self.runner.resources()})

    def summary(self) -> CampaignSummary:
        record = self.history.campaign(self.id)
        return CampaignSummary.of(record, self.history.trials(self.id, measurements=True), self.history.url)


def record_fingerprint(history: History, runner: Runner) -> dict[str, Any] | None:
    """The features of the runner's workload: the newest in the history, else those the runner can tell
    (a trace it replays, a dataset that ships its workloads' fingerprints), recorded then."""
    key = runner.workload.fingerprint()
    known = history.fingerprints().get(key)
    if known is not None:
        return known["features"]
    told = runner.workload_fingerprint()
    if told is None:
        return None
    history.add_fingerprint(workload_name=runner.workload.name, workload_fingerprint=key,
                            workload=runner.workload.to_dict(), **told)
    return told["features"]


def _similar(history: History, runner: Runner, metric: str, features: Mapping[str, Any] | None, budget: int,
             exclude: str | None = None) -> dict[str, Any]:
    """What `warm_start` similar measures first, and why: the nearest other workloads and their
    near-optimal configurations (``tuner.workloads.recommend``)."""
    from storetune.tuner.analysis.workloads import recommend, similar_configs

    if features is None and runner.name == "dataset":  # a table's workload cannot be traced after the fact
        raise ValueError(f"`warm_start` similar needs the fingerprint of workload {runner.workload.name}, and this "
                         "table ships none (a dataset brings its workloads' fingerprints in a fingerprints.json "
                         "beside its table, as datasets/loop-storage-v3 does): use `warm_start` same")
    if features is None:
        raise ValueError(f"`warm_start` similar needs the fingerprint of workload {runner.workload.name}, and the "
                         "history has none: record it with storetune fingerprint (--trace, or --workload on a device) "
                         "and --db, or use `warm_start` same")
    found = recommend(history, features, runner.space, k=SIMILAR_WORKLOADS, within=SIMILAR_WITHIN, metric=metric,
                      exclude=[exclude or runner.workload.fingerprint()])
    first = similar_configs(found, runner.space, similar_first(budget))
    return {"neighbours": [{"workload": n.workload_name, "distance": n.distance, "best": n.best}
                           for n in found.neighbours],
            "first": [dict(c) for c in first], "metric": found.metric}


def _driver_runner(name: str, settings: Any, executor: Executor | None) -> Runner:
    """The runner the driver holds. When the executor measures elsewhere (Ray), a runner that sets a
    device up is built as a dry run: the driver needs its space, workload and settings, not a disk."""
    return inspected_runner(name, settings) if executor is not None and executor.remote else make_runner(name, settings)


def _refuse_parallel_if_exclusive(runner: Runner, executor: Executor | None, batch_size: int = 1,
                                  remote: bool = False) -> None:
    if remote or (executor is not None and executor.remote):
        return  # a cluster places a disk's measurements by their resources: one per loop slot or disk
    if runner.exclusive and max(executor.workers if executor is not None else 1, batch_size) > 1:
        raise ValueError(f"the {runner.name} runner measures one configuration at a time: parallel workers "
                         "would share one disk and disturb each other's measurements")


def _refuse_if_driven_elsewhere(record: CampaignView, handed_by: int | None = None) -> None:
    """Two drivers on one campaign would count trials twice."""
    if record.state != "running" or record.driver_pid in (os.getpid(), handed_by):
        return
    if driver_alive(record.driver_host, record.driver_pid):
        who = f"process {record.driver_pid} on {record.driver_host}" if record.driver_pid else "a service"
        raise ValueError(f"campaign {record.id} is still being run by {who}; stop it first")


# What every StoreTune driver's command line holds, whoever started it: the package's own name (the `storetune`
# script, `python -m storetune.api.cli.main`, a service's `-m storetune.api.service.worker`). A caller that
# starts drivers otherwise passes marks of its own.
DRIVER_MARKS = (b"storetune",)


def driver_alive(host: str | None, pid: int | None, marks: tuple[bytes, ...] = DRIVER_MARKS) -> bool:
    """Is the driver recorded for a running campaign alive? The one liveness rule of the CLI and the
    service. A driver on another host cannot be judged from here, so it counts as alive; a running
    campaign with no driver recorded is being handed to one (alive too). A live process is a driver if its
    command line holds one of ``marks`` (a reused pid, or a zombie, is not)."""
    if pid is None or host != socket.gethostname():
        return True
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: err on the side of not driving one campaign twice
    return any(mark in cmdline for mark in marks)


def _labelled_twice(space: SearchSpace, fixed: dict[str, Any]) -> str | None:
    """The fingerprint ``space`` had when ``storetune tune --fix`` pinned it twice, each time labelling its
    description (until 2026-11-27): the campaigns it stopped can still be resumed. None if nothing is fixed."""
    if not fixed:
        return None
    label = ", ".join(f"{k}={space[k].canonical(v)}" for k, v in fixed.items())
    twice = copy.copy(space)  # the description is only a label: the same parameters, forbidden rules and rows
    twice.description = f"{space.description} ({label} fixed)"
    return twice.fingerprint()


def dry_run(spec: CampaignSpec, runner: Runner, evaluations: int,
            on_start: Callable[[int, Config], None] | None = None) -> int:
    """What the first ``evaluations`` of the campaign ``spec`` would do, through the same checks and
    loop as a real campaign (pinned parameters, repeats, batches), measured by ``runner`` (built
    with ``dry_run``: it prints its commands and touches nothing) and recorded nowhere. Returns how
    many evaluations were shown; the caller closes the runner."""
    runner, objective = Campaign.prepare(spec, runner)
    tuner = make_tuner(spec.algorithm or default_algorithm(objective.kind), runner.space, seed=spec.seed, direction=objective.direction,
                       params=spec.algorithm_params)
    budget = min(evaluations, spec.budget)
    run_loop(campaign_id=0, tuner=tuner, runner=runner, objective=objective, store=MemoryStore(),
             budget=budget, repeats=spec.repeats, batch_size=spec.batch_size, seed=spec.seed, on_start=on_start,
             max_repeats=spec.max_repeats)
    return budget
