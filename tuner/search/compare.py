"""The offline comparison of search algorithms on an exhaustive table, as the ATC'18 study ran it.

Every algorithm variant runs one campaign per seed, through the same loop as any campaign, on the
dataset runner. The seeds run in worker processes (the executor seam); the driver, the history's
only writer, records each campaign as it completes, tagged with the comparison.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from storetune.runners import Runner, Status, make_runner
from storetune.runners.tables import TableWarning
from storetune.search_spaces import Config
from storetune.tuner.analysis.summary import best_trial, json_safe, judge_means
from storetune.tuner.search.spec import InvalidSpec, checked
from storetune.tuner.analysis.convergence import (
    EvaluationsToTarget, evaluations_to_hit, near_optimal, random_success_curve, success_curve,
)
from storetune.tuner.execution.jobs import Executor, ExecutorLost, worker_runner
from storetune.tuner.execution.local import LocalExecutor
from storetune.tuner.history.store import History
from storetune.tuner.history.memory import MemoryStore
from storetune.tuner.search.loop import TrialResult, run_loop
from storetune.tuner.history.models import utcnow
from storetune.tuner.objectives.objective import Objective
from storetune.tuner.history.views import TrialView
from storetune.tuner.algorithms.registry import algorithm_target, make_tuner

FIRST_SEED_LIMIT = 2**62  # the seeds after it stay within the history's signed 64-bit integers
OVERHEAD_WINDOW = 10  # evaluations averaged for "ask+tell at the budget's end"


@dataclass(frozen=True)
class Variant:
    """An algorithm with hyperparameters, written ``ga`` or ``ga:mutation_rate=0.05:population_size=30``."""

    algorithm: str
    params: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        if not self.params:
            return self.algorithm
        return f"{self.algorithm}[{','.join(f'{k}={v}' for k, v in self.params)}]"

    @classmethod
    def parse_list(cls, text: str) -> list[Variant]:
        variants = []
        for item in filter(None, (x.strip() for x in text.split(","))):
            name, *assignments = item.split(":")
            params = []
            for a in assignments:
                key, sep, value = a.partition("=")
                if not sep or not key:
                    raise ValueError(f"`algorithms` {item!r}: write hyperparameters as {name}:name=value")
                params.append((key, value))
            variants.append(cls(name, tuple(params)))
        labels = [v.label for v in variants]
        if not variants:
            raise ValueError("`algorithms` names no algorithm")
        if len(set(labels)) != len(labels):
            raise ValueError(f"`algorithms` lists a variant twice: {', '.join(labels)}")
        return variants


class ComparisonCancelled(Exception):
    """A cancel was asked (``POST /comparisons/{id}/cancel``): the comparison stopped, its seeds kept."""


@dataclass(frozen=True)
class CompareSpec:
    runner_settings: Mapping[str, Any]  # of the dataset runner
    variants: tuple[Variant, ...]
    seeds: int = 100
    budget: int = 200
    within: float = 0.99
    repeats: int = 1
    metric: str | None = None
    direction: str | None = None
    first_seed: int = 0
    # each seed stops at its first near-optimal configuration: evaluations to near-optimal and the
    # success curve stay exact (a later evaluation cannot change the first hit), the figures that need
    # the whole budget (best mean at budget, instantaneous values, ask+tell at the budget's end) are None
    stop_at_near_optimal: bool = False
    # another table of the same configurations whose means judge near-optimality and the quality figures, while
    # the searches see the table's repeats: a generated table's noiseless truth (bench/synthetic_tables.py), where
    # noisy repeats make the table's own best means lucky draws rather than the best configurations
    judge: tuple[str, ...] | None = None


def judged_means(runner: Runner, objective: Objective, judge: Sequence[str] | None) -> dict[Config, float]:
    """Each configuration's mean that near-optimality is judged on: the table's, or its judge's (any error
    reading the judge is placed on ``judge``)."""
    if not judge:
        return runner.table.means(objective.metric)
    return checked("judge", lambda: judge_means(runner, judge, objective.metric))


@dataclass(frozen=True)
class Prepared:
    """What ``Comparison.prepare`` checked and read: the table's runner, the objective, and the means
    near-optimality is judged on (read once: a judge is a table of its own)."""

    runner: Runner
    objective: Objective
    means: dict[Config, float]

    def digest(self) -> str:
        """The table's content and the means near-optimality is judged on: what a recorded comparison must share
        with this one to be the same measurement (``Comparison.find``)."""
        judged = hashlib.sha256(repr(sorted((repr(sorted(c.items())), m) for c, m in self.means.items())).encode())
        return f"{self.runner.table.sha256}+{judged.hexdigest()[:16]}"


def resolved(judge: Sequence[str] | None) -> list[str] | None:
    """A judge's paths as recorded: absolute, so that a comparison reloaded elsewhere (a service worker) finds it."""
    return [str(Path(p).expanduser().resolve()) for p in judge] if judge else None


def lucky_targets(runner: Runner, objective: Objective, targets: set[Config]) -> str | None:
    """A warning where most of the near-optimal set was measured once in a table that measured others more often:
    on noisy repeats the best of thousands of single runs are lucky draws of middling configurations (a generated
    sample's best means ranked 289th to 687th in its truth, bench/SEARCH.md), and a search that finds the good
    region is scored as missing them."""
    runs = {c: len(measured) for c, measured in runner.table.measured(objective.metric).items()}
    if not targets or max(runs.values(), default=0) < 2:
        return None  # a table of one run each: nothing to compare with
    once = sum(runs.get(c) == 1 for c in targets)
    table_share = sum(n == 1 for n in runs.values()) / len(runs)
    if once / len(targets) < 0.5 or once / len(targets) <= 2 * table_share:
        return None
    return (f"{once} of the {len(targets)} near-optimal configurations of {runner.table.name} were measured once, "
            f"against {table_share:.0%} of the table: its best means may be lucky repeats; judge the comparison on "
            "a re-measurement of the same configurations (`judge`)")


@dataclass(frozen=True)
class SeedTask:
    runner_settings: Mapping[str, Any]
    variant: Variant
    target: str  # the algorithm's "module:Class", resolved by the driver
    seed: int
    budget: int
    repeats: int
    objective: Objective
    targets: frozenset[Config] | None = None  # stop at the first of these (``stop_at_near_optimal``)


@dataclass
class SeedRun:
    variant: Variant
    seed: int
    trials: list[TrialView]
    overhead_s: list[float]
    diversity: list[float] | None = None
    campaign_id: int | None = None
    note: str | None = None  # why the campaign ended before its budget


def run_seed(task: SeedTask) -> SeedRun:
    """One seeded campaign of one variant, in memory (runs in a worker process, which loads the table once)."""
    _, runner = worker_runner("dataset", task.runner_settings)
    tuner = make_tuner(task.variant.algorithm, runner.space, seed=task.seed, direction=task.objective.direction,
                       params=dict(task.variant.params), target=task.target)
    store = MemoryStore()
    hit: list[int] = []  # the evaluation that measured the first target

    def on_trial(result: TrialResult) -> None:
        if not hit and task.targets is not None and result.config in task.targets:
            hit.append(result.evaluated)

    outcome = run_loop(campaign_id=0, tuner=tuner, runner=runner, objective=task.objective, store=store,
                       budget=task.budget, repeats=task.repeats, batch_size=1, seed=task.seed,
                       on_trial=on_trial, stop=(lambda: bool(hit)) if task.targets is not None else None)
    note = outcome.note
    if outcome.stopped:
        note = f"stopped at its first near-optimal configuration, evaluation {hit[0]} of {task.budget}"
    return SeedRun(task.variant, task.seed, store.trials(measurements=True), outcome.overhead_s,
                   tuner.diversity, note=note)


class Comparison:
    def __init__(self, history: History, spec: CompareSpec, comparison_id: int, prepared: Prepared,
                 origin: str = "cli"):
        self.history, self.spec, self.id, self.origin = history, spec, comparison_id, origin
        self.runner, self.objective, self.means = prepared.runner, prepared.objective, prepared.means
        self.targets = near_optimal(self.means, self.objective.direction, spec.within)
        # judged on a judge, the table's own repeats do not decide the targets
        self.lucky = None if spec.judge else lucky_targets(self.runner, self.objective, self.targets)
        if self.lucky:
            warnings.warn(self.lucky, TableWarning, stacklevel=2)

    def notes(self) -> tuple[str, ...]:
        """Warnings about the comparison's inputs, for a caller that cannot show Python's (REST)."""
        return self.runner.notes() + ((self.lucky,) if self.lucky else ())

    @classmethod
    def prepare(cls, spec: CompareSpec) -> Prepared:
        """The table's runner, the objective and the judged means, after every check: bad input raises
        ValueError, and nothing is written."""
        if not 0 < spec.within <= 1:
            raise ValueError(f"`within` must be in (0, 1], e.g. 0.99 for 'within 1% of the best'; got {spec.within}")
        for name, value in (("seeds", spec.seeds), ("budget", spec.budget), ("repeats", spec.repeats)):
            if value < 1:
                raise ValueError(f"`{name}` must be at least 1, not {value}")
        if not 0 <= spec.first_seed < FIRST_SEED_LIMIT:
            raise ValueError(f"`first_seed` must be from 0 to 2^62 - 1, not {spec.first_seed}")
        runner = make_runner("dataset", spec.runner_settings)
        size = runner.space.cardinality()
        if spec.budget > size:
            raise InvalidSpec(
                "budget", f"a budget of {spec.budget} is more than the {size} configurations of {runner.table.name}: "
                f"every search would measure the whole table; use `budget` {size} or less"
            )
        objective = checked("metric", lambda: Objective.resolve(runner.metrics(), spec.metric, spec.direction))
        for v in spec.variants:  # unknown algorithms and hyperparameters fail here, before any write
            checked("algorithms", lambda v=v: make_tuner(v.algorithm, runner.space, seed=0,
                                                         direction=objective.direction, params=dict(v.params)))
        # a judge that does not hold the table's configurations fails here
        return Prepared(runner, objective, judged_means(runner, objective, spec.judge))

    @classmethod
    def create(cls, history: History, spec: CompareSpec, *, origin: str = "cli", state: str = "running",
               executor_kind: str = "local", prepared: Prepared | None = None) -> Comparison:
        """Validate everything (unless ``prepared`` is what ``prepare`` gave), then record the comparison
        (``executor_kind``: where its seeds are to run)."""
        prepared = prepared or cls.prepare(spec)
        record = history.create_comparison(workload_name=prepared.runner.workload.name,
                                           runner_settings=prepared.runner.settings(),
                                           settings=cls._settings(spec, prepared, executor_kind), origin=origin,
                                           state=state)
        return cls(history, spec, record.id, prepared, origin)

    @staticmethod
    def _settings(spec: CompareSpec, prepared: Prepared, executor_kind: str) -> dict[str, Any]:
        """What a comparison records of its spec: all ``load`` needs to run it again."""
        return {
            "executor": executor_kind,
            "variants": [v.label for v in spec.variants], "seeds": spec.seeds, "first_seed": spec.first_seed,
            "variant_params": [[v.algorithm, [list(p) for p in v.params]] for v in spec.variants],
            "budget": spec.budget, "within": spec.within, "repeats": spec.repeats,
            "objective": prepared.objective.to_dict(), "stop_at_near_optimal": spec.stop_at_near_optimal,
            "judge": resolved(spec.judge), "inputs": prepared.digest(),
        }

    @classmethod
    def find(cls, history: History, spec: CompareSpec, *, origin: str = "cli",
             prepared: Prepared | None = None) -> Comparison | None:
        """The latest comparison of ``origin`` recorded with this very spec on this very table (its content and the
        means it is judged on, ``Prepared.digest``), whatever its state, or None: ``run`` on it goes on from the
        seeds it recorded, so that an interrupted run of the same comparison loses only the seeds in flight, and
        on a finished one returns its results as recorded. One found ``running`` may be a killed run's or a live
        one's, which the history cannot tell apart: the caller says so."""
        prepared = prepared or cls.prepare(spec)
        wanted = json.loads(json.dumps([prepared.runner.settings(), cls._settings(spec, prepared, "local")]))
        for record in reversed(history.comparisons(origin=origin)):
            settings = {**record.settings, "executor": "local"}
            if [record.runner_settings, settings] == wanted:
                return cls(history, spec, record.id, prepared, record.origin)
        return None

    @classmethod
    def find_or_create(cls, history: History, spec: CompareSpec, *, resume: bool,
                       prepared: Prepared | None = None) -> tuple[Comparison, list[str]]:
        """With ``resume``, the comparison ``find`` returns, else a new one; and what a person should be told
        about it (what it found, and a match recorded as running, which may still be running elsewhere)."""
        prepared = prepared or cls.prepare(spec)
        found = cls.find(history, spec, prepared=prepared) if resume else None
        if found is None:
            notes = ["--resume: the history holds no comparison of these settings on this table; starting one"]
            return cls.create(history, spec, prepared=prepared), notes if resume else []
        record, recorded = history.comparison(found.id), len(history.comparison_campaigns(found.id))
        total = spec.seeds * len(spec.variants)
        if record.state == "finished":
            return found, [f"comparison {found.id} is finished: its results as recorded"]
        notes = [f"resuming comparison {found.id}: {recorded} of {total} seeds are in the history"]
        if record.state == "running":
            notes.append(f"comparison {found.id} is recorded as running: if it still runs elsewhere, both measure "
                         "its missing seeds (stop one of them)")
        return found, notes

    @classmethod
    def load(cls, history: History, comparison_id: int) -> Comparison:
        """A recorded comparison, ready to run (the service records it, a worker runs it)."""
        record = history.comparison(comparison_id)
        settings = record.settings
        spec = CompareSpec(
            runner_settings=record.runner_settings,
            variants=tuple(Variant(a, tuple((k, v) for k, v in params)) for a, params in settings["variant_params"]),
            seeds=settings["seeds"], budget=settings["budget"], within=settings["within"],
            repeats=settings["repeats"], metric=settings["objective"]["metric"],
            direction=settings["objective"]["direction"], first_seed=settings["first_seed"],
            stop_at_near_optimal=settings.get("stop_at_near_optimal", False),  # not recorded before it existed
            judge=tuple(settings["judge"]) if settings.get("judge") else None,
        )
        return cls(history, spec, comparison_id, cls.prepare(spec), record.origin)

    def run(self, executor: Executor | None = None, on_seed: Callable[[SeedRun], None] | None = None) -> dict[str, Any]:
        """Run every seed of every variant, recording each as it completes, and summarise them. A comparison
        that was interrupted goes on from the seeds it recorded; a cancel (``cancel_requested``) stops it
        after the seed that finishes next, ``cancelled``, its recorded seeds kept for a resume."""
        executor = executor or LocalExecutor()
        spec = self.spec
        seeds = range(spec.first_seed, spec.first_seed + spec.seeds)
        targets = frozenset(self.targets) if spec.stop_at_near_optimal else None
        runs: dict[str, list[SeedRun]] = {v.label: [] for v in spec.variants}
        for run in self.recorded():
            runs[run.variant.label].append(run)
        done = {(label, r.seed) for label, rs in runs.items() for r in rs}
        tasks = [SeedTask(self.runner.settings(), v, algorithm_target(v.algorithm), s, spec.budget, spec.repeats,
                          self.objective, targets) for s in seeds for v in spec.variants if (v.label, s) not in done]
        record = self.history.comparison(self.id)
        if not tasks and record.state == "finished" and record.results is not None:
            executor.close()  # found finished (a resume): its results as recorded, ask+tell times included
            self.runs = runs
            return record.results
        self.history.transition_comparison(self.id, ["queued", "interrupted", "cancelled", "failed"], state="running",
                                           cancel_requested=False)
        total = len(seeds) * len(spec.variants)
        try:
            for run in executor.map_unordered(run_seed, tasks):
                run.campaign_id = self._record(run)
                runs[run.variant.label].append(run)
                if on_seed is not None:
                    on_seed(run)
                if self.history.comparison_cancel_requested(self.id):
                    recorded = sum(len(rs) for rs in runs.values())
                    self.history.finish_comparison(self.id, "cancelled", None, (
                        f"cancelled after {recorded} of {total} seed campaigns; resume it to run the others"))
                    raise ComparisonCancelled(self.id)
        except KeyboardInterrupt:
            self.history.finish_comparison(self.id, "interrupted", None)
            raise
        except ExecutorLost as e:  # its recorded seeds are kept: a resume runs the others
            self.history.finish_comparison(self.id, "interrupted", None, str(e))
            raise
        finally:
            executor.close()
        results = json_safe(self.summarize(runs))  # JSON has no NaN (PostgreSQL refuses it): None instead
        self.history.finish_comparison(self.id, "finished", results)
        self.runs = runs
        return results

    def recorded(self) -> list[SeedRun]:
        """The seeds this comparison recorded already (a resumed comparison does not run them again). Their
        ask+tell times and GA diversity were not kept: those figures come from the seeds run since."""
        variants = {(v.algorithm, tuple(sorted(v.params))): v for v in self.spec.variants}
        out = []
        for c in self.history.comparison_campaigns(self.id):
            variant = variants.get((c.algorithm, tuple(sorted((k, str(v)) for k, v in c.algorithm_params.items()))))
            if variant is not None:
                out.append(SeedRun(variant, c.seed, self.history.trials(c.id, measurements=True), [], None,
                                   campaign_id=c.id, note=c.note))
        return out

    def _record(self, run: SeedRun) -> int:
        runner = self.runner
        fields = dict(
            state="finished", finished_at=utcnow(), space_name=runner.label(),
            space_fingerprint=runner.space.fingerprint(), space=runner.space.to_dict(), runner=runner.name,
            runner_settings=runner.settings(), workload_name=runner.workload.name,
            workload_fingerprint=runner.workload.fingerprint(), workload=runner.workload.to_dict(),
            device=runner.device, algorithm=run.variant.algorithm,
            algorithm_params=dict(run.variant.params), objective_metric=self.objective.metric,
            objective_direction=self.objective.direction, budget=self.spec.budget, seed=run.seed,
            repeats=self.spec.repeats, batch_size=1, comparison_id=self.id, origin=self.origin, note=run.note,
        )
        return self.history.write_campaign(fields, run.trials)

    # --- the figures ------------------------------------------------------------------------------
    def summarize(self, runs: Mapping[str, Sequence[SeedRun]]) -> dict[str, Any]:
        budget, size = self.spec.budget, len(self.means)
        algorithms = {label: self._figures(sorted(rs, key=lambda r: r.seed)) for label, rs in runs.items() if rs}
        return {
            "comparison": self.id,
            "dataset": self.runner.label(),
            "objective": self.objective.to_dict(),
            "budget": budget,
            "seeds": self.spec.seeds,
            "within": self.spec.within,
            "configurations": size,
            "stop_at_near_optimal": self.spec.stop_at_near_optimal,
            "judge": resolved(self.spec.judge),
            "near_optimal": len(self.targets),
            "near_optimal_share": len(self.targets) / size,
            # random draws from every configuration, also those the table records as failures
            "random_expected_success_at": random_success_curve(self.runner.space.cardinality(), len(self.targets),
                                                               budget),
            "algorithms": algorithms,
        }

    def _figures(self, runs: Sequence[SeedRun]) -> dict[str, Any]:
        budget = self.spec.budget
        evaluated = [[Config(t.config) for t in r.trials if Status(t.status).terminal] for r in runs]
        hits = [evaluations_to_hit(e, self.targets) for e in evaluated]
        to_target = EvaluationsToTarget.of(hits, budget)
        overhead = [r.overhead_s for r in runs]
        out: dict[str, Any] = {
            "algorithm": runs[0].variant.algorithm,
            "params": dict(runs[0].variant.params),
            "median_evals_to_near_optimal": to_target.median,
            "evals_p25": to_target.p25,
            "evals_p75": to_target.p75,
            "censored": to_target.censored,
            "success_at": success_curve(hits, budget),
            # these need every seed's whole budget: None when the seeds that hit stopped there
            "best_mean_at_budget": None,
            "instant_mean": None,
            "ask_tell_ms": 1000 * float(np.mean([np.mean(o) for o in overhead if o])),
            "ask_tell_ms_at_budget": None,
            "evals_to_near_optimal": [budget + 1 if h is None else h for h in hits],
        }
        out["success_at_budget"] = out["success_at"][-1]
        if not self.spec.stop_at_near_optimal:
            instant = np.full((len(runs), budget), np.nan)
            for i, configs in enumerate(evaluated):
                instant[i, : len(configs)] = [self.means.get(c, np.nan) for c in configs]
            out.update(
                best_mean_at_budget=float(np.median([self._best_mean(r) for r in runs])),
                instant_mean=[_finite(v) for v in np.nanmean(instant, axis=0)],
                ask_tell_ms_at_budget=1000 * float(np.mean([np.mean(o[-OVERHEAD_WINDOW:]) for o in overhead if o])),
            )
        diversity = [r.diversity for r in runs if r.diversity]
        # the generations every seed bred: a seed stopped in its first would cut the curve to one
        if diversity and not self.spec.stop_at_near_optimal:
            generations = min(len(d) for d in diversity)
            out["diversity"] = np.mean([d[:generations] for d in diversity], axis=0).tolist()
        return out

    def _best_mean(self, run: SeedRun) -> float:
        """The table mean of the configuration the run reports as best (``analysis.best_trial``)."""
        best = best_trial(run.trials, self.objective.direction)
        return math.nan if best is None else self.means.get(Config(best.config), math.nan)


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else float(value)
