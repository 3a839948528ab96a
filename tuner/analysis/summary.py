"""What a history says: a campaign's trials by status and its best configuration."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from storetune.runners import Status
from storetune.search_spaces import Config
from storetune.search_spaces.status import best_of, better, within_of_best
from storetune.search_spaces.status import loss as to_loss
from storetune.tuner.history.views import CampaignView, TrialView


def trials_by_status(trials: Sequence[TrialView]) -> dict[str, int]:
    """Status -> count, in the order of the Status enum, listing only statuses that occur."""
    counts = Counter(t.status for t in trials)
    return {s.value: counts[s.value] for s in Status if counts[s.value]}


def best_trial(trials: Sequence[TrialView], direction: str, most_measured: bool = False) -> TrialView | None:
    """The succeeded trial with the best value; ties go to the earliest. With ``most_measured`` (a campaign
    with adaptive repeats), the best among those measured the most times: the incumbent
    (tuner/intensify.py), so that a configuration lucky once is not reported."""
    scored = [t for t in trials if t.status == Status.SUCCEEDED.value and t.value is not None]
    if not scored:
        return None
    if most_measured:  # whole runs: a promoted trial's run stopped at a rung is not one of its value's
        most = max(t.whole_runs for t in scored)
        scored = [t for t in scored if t.whole_runs == most]
    return min(scored, key=lambda t: (to_loss(t.value, direction), t.number))


def evaluations(trials: Sequence[TrialView], repeats: int) -> int:
    """What counts towards the budget: every finished trial, and each adaptive re-measurement beyond its repeats."""
    return sum(1 + max(0, t.runs - repeats) for t in trials if Status(t.status).terminal)


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
    evaluated: int  # evaluations that count towards the budget (finished trials, adaptive re-measurements)
    state: str
    note: str | None
    space: str
    workload: str
    database: str
    test_value: float | None = None  # the best configuration on data the search never saw, if any
    warm_started: int | None = None  # earlier trials told to the algorithm first (--warm-start same)
    measurements: int | None = None  # benchmark runs taken: repeats and adaptive re-measurements
    best_runs: int | None = None  # the runs behind best_value, the mean of the best configuration's measurements
    # --warm-start similar: the nearest known workloads, their distances, and the configurations measured first
    similar: dict[str, Any] | None = None
    # a Pareto objective: the non-dominated trials [{trial, config, values}], their hypervolume and its reference
    pareto: list[dict[str, Any]] | None = None
    hypervolume: float | None = None
    reference_point: dict[str, float] | None = None
    pinned: dict[str, Any] | None = None  # what the campaign held fixed: a table's --context, then --fix

    @classmethod
    def of(cls, record: CampaignView, trials: Sequence[TrialView], database: str) -> CampaignSummary:
        best = campaign_best(record, trials)
        front: dict[str, Any] = {}
        objective: dict[str, Any] = {"metric": record.objective_metric, "direction": record.objective_direction}
        if record.objective:
            from storetune.tuner.objectives.objective import MultiObjective
            from storetune.tuner.analysis.pareto import pareto_set

            multi = MultiObjective.from_spec(record.objective)
            objective.update(multi.spec())
            if multi.kind == "pareto" and all(t.measurements is not None for t in trials):
                front = pareto_set(trials, multi)
        return cls(
            campaign=record.id,
            algorithm=record.algorithm,
            seed=record.seed,
            trials_by_status=trials_by_status(trials),
            best_config=best.config if best else None,
            best_value=best.value if best else None,
            objective=objective,
            budget=record.budget,
            evaluated=evaluations(trials, record.repeats),
            state=record.state,
            note=record.note,
            space=record.space_name,
            workload=record.workload_name,
            database=database,
            test_value=held_out(best, record.objective_metric),
            measurements=sum(t.runs for t in trials),
            best_runs=best.whole_runs if best else None,
            pinned=pins(record),
            **front,
        )

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        if out["pareto"] is None:  # only a Pareto campaign's summary has them
            for key in ("pareto", "hypervolume", "reference_point"):
                del out[key]
        return out


def campaign_best(record: CampaignView, trials: Sequence[TrialView]) -> TrialView | None:
    """The trial a campaign reports as its best: ``best_trial`` by value, or, for an objective over several
    metrics, the objective's own (a rank objective's lexicographic best, from the trials' measurements)."""
    if not record.objective:
        return best_trial(trials, record.objective_direction, record.adaptive)
    from storetune.tuner.objectives.objective import MultiObjective

    return MultiObjective.from_spec(record.objective).best_trial(trials, record.adaptive)


def held_out(trial: TrialView | None, metric: str) -> float | None:
    """The mean of the ``test_<metric>`` the runner recorded beside the objective (admission does)."""
    if trial is None or trial.measurements is None:  # a summary of trials read without them
        return None
    values = [m.metrics[f"test_{metric}"] for m in trial.measurements if f"test_{metric}" in m.metrics]
    return sum(values) / len(values) if values else None


def pins(record: CampaignView) -> dict[str, Any]:
    """What a campaign held fixed: the setup columns of a table it replays (``--context``), then its pinned
    parameters (``--fix``)."""
    context = (record.runner_settings or {}).get("context") or {}
    return {**context, **(record.fixed or {})}


class TableGone(ValueError):
    """A replayed table that can no longer tell the truth about what was replayed: moved, or changed since."""


def replayed_table(runner_settings: Mapping[str, Any], digests: Sequence[str | None]) -> Any:
    """The dataset runner of a table replayed before, opened again to judge what its campaigns found.
    TableGone when it can no longer be read (moved, deleted) or is not the table they replayed: its
    digest differs from every one their campaigns recorded (edited in place since), so that its means
    would rank their configurations against other measurements."""
    from storetune.runners import make_runner

    try:
        runner = make_runner("dataset", dict(runner_settings))
    except (OSError, ValueError) as e:
        raise TableGone(f"its table can no longer be read: {e}") from None
    recorded = {d for d in digests if d}
    if recorded and runner.table.sha256 not in recorded:
        raise TableGone(f"its table {runner.table.name} has changed since it was replayed (digest "
                        f"{runner.table.sha256}, recorded {', '.join(sorted(recorded))})")
    return runner


def judge_means(runner: Any, judge: Sequence[str], metric: str) -> dict[Config, float]:
    """The means of a judge of a replayed table: another table of the same configurations (re-measured, or a
    generated table's noiseless truth), pinned and read as the table is; ValueError where it lacks the metric,
    or lacks or adds a configuration."""
    from storetune.runners import make_runner

    table = make_runner("dataset", {**runner.settings(), "dataset": list(judge)}).table
    if metric not in table.metrics:
        raise ValueError(f"the judge {table.name} has no column {metric!r}; it has {', '.join(table.metrics)}")
    truth, means = table.means(metric), runner.table.means(metric)
    missing, extra = set(means) - set(truth), set(truth) - set(means)
    if missing or extra:
        example = next(iter(missing or extra))
        raise ValueError(f"the judge {table.name} must hold the table's configurations: it lacks {len(missing)} "
                         f"and adds {len(extra)}, e.g. {dict(example)}")
    return truth


def table_digest(record: CampaignView) -> str | None:
    """The digest of the table a dataset campaign replayed, as it recorded it (None before it did)."""
    return (record.workload or {}).get("params", {}).get("sha256")


def searched_means(record: CampaignView, space: Any, means: Mapping[Any, float]) -> dict[Any, float]:
    """The table means of the configurations a campaign searched: those with its ``--fix`` pins (``space``
    is its table's, unpinned), or every one."""
    if not record.fixed:
        return dict(means)
    searched = set(space.fix(record.fixed).members)
    return {c: v for c, v in means.items() if c in searched}


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


@dataclass(frozen=True)
class Convergence:
    """A campaign's convergence, as columns (one entry per evaluation, in order): the trial, its
    status, its value (what production suffers while tuning), the best value so far, and the seconds
    since the campaign's first trial started. Columns, because plots take arrays."""

    evaluation: list[int]  # 1-based, counting finished trials only
    trial: list[int]
    status: list[str]
    value: list[float | None]
    best: list[float | None]
    elapsed_s: list[float | None]

    def to_dict(self) -> dict[str, list[Any]]:
        return dict(self.__dict__)


def convergence(outcomes: Sequence[tuple[int, str, float | None, Any, Any]], direction: str) -> Convergence:
    """Best-so-far and instantaneous value against evaluations and wall time, from the history's
    (number, status, value, started_at, finished_at) rows in the order of asking. Unfinished and
    STALE trials do not count as evaluations. Vectorised: it is read on every refresh of a report."""
    terminal = {s.value for s in Status if s.terminal}
    rows = [r for r in outcomes if r[1] in terminal]
    starts = [r[3] for r in outcomes if r[3] is not None]
    origin = min(starts) if starts else None
    values = np.array([r[2] if r[1] == Status.SUCCEEDED.value and r[2] is not None else np.nan for r in rows],
                      dtype=float)
    values[np.isinf(values)] = np.nan
    losses = np.where(np.isnan(values), np.inf, values if direction == "min" else -values)
    running = np.minimum.accumulate(losses) if len(rows) else losses
    best = np.where(np.isinf(running), np.nan, running if direction == "min" else -running)
    return Convergence(
        evaluation=list(range(1, len(rows) + 1)),
        trial=[r[0] for r in rows],
        status=[r[1] for r in rows],
        value=[None if np.isnan(v) or np.isinf(v) else float(v) for v in values],
        best=[None if np.isnan(b) else float(b) for b in best],
        elapsed_s=[None if origin is None or r[4] is None else (r[4] - origin).total_seconds() for r in rows],
    )


def race_convergence(trials: Sequence[TrialView], metric: str, direction: str, repeats: int) -> Convergence:
    """The convergence of a campaign with adaptive repeats, from its trials read with their measurements:
    one entry per evaluation (a trial's first ``repeats`` runs, or one re-measurement) in the order they
    finished; ``value`` is the trial's mean after it, ``best`` the incumbent's mean then (the trial the
    campaign would have reported), not the best mean seen: a challenger lucky once does not lower it."""
    from storetune.tuner.objectives.intensify import Standing, incumbent

    events = []
    for t in trials:
        if t.status == Status.STALE.value or not t.measurements:
            continue
        runs = sorted(t.measurements, key=lambda m: m.repeat)
        first = [m for m in runs if m.repeat < repeats]
        ends = ([len(first)] if first else []) + [m.repeat + 1 for m in runs if m.repeat >= repeats]
        for n in ends:
            events.append((runs[n - 1].created_at, t.number, t, runs[:n]))
    events.sort(key=lambda e: (e[0] is None, e[0] or 0, e[1]))
    starts = [t.started_at for t in trials if t.started_at is not None]
    origin = min(starts) if starts else None
    standings: dict[int, Standing] = {}
    out = Convergence([], [], [], [], [], [])
    for when, number, t, runs in events:
        ok = all(m.status == Status.SUCCEEDED.value and metric in m.metrics for m in runs)
        value = float(np.mean([m.metrics[metric] for m in runs])) if ok else None
        standings[t.id] = Standing(t.id, len(runs), value)
        best = incumbent(standings.values(), direction)
        out.evaluation.append(len(out.evaluation) + 1)
        out.trial.append(number)
        out.status.append(Status.SUCCEEDED.value if ok else runs[-1].status)
        out.value.append(value)
        out.best.append(None if best is None else best.value)
        out.elapsed_s.append(None if origin is None or when is None else (when - origin).total_seconds())
    return out


def campaign_convergence(history: Any, record: CampaignView) -> Convergence:
    """A recorded campaign's convergence: ``convergence`` from its trials' rows, or ``race_convergence``
    from their measurements when it re-measured challengers (adaptive repeats)."""
    if not record.adaptive:
        return convergence(history.outcomes(record.id), record.objective_direction)
    return race_convergence(history.trials(record.id, measurements=True), record.objective_metric,
                            record.objective_direction, record.repeats)


def near_optimal_trials(trials: Sequence[TrialView], direction: str, within: float,
                        most_measured: bool = False) -> list[TrialView]:
    """The succeeded trials within ``within`` of the campaign's best value (the ATC'18 definition:
    at least within x best when maximising, at most best / within when minimising), best first. The best
    value is ``best_trial``'s (with ``most_measured``, the incumbent's mean, not a lucky first run)."""
    if not 0 < within <= 1:
        raise ValueError(f"within must be in (0, 1], e.g. 0.99 for 'within 1% of the best'; got {within}")
    scored = [t for t in trials if t.status == Status.SUCCEEDED.value and t.value is not None]
    if not scored:
        return []
    best = best_trial(scored, direction, most_measured).value  # type: ignore[union-attr]
    if direction == "max" and best <= 0 or direction == "min" and best < 0:
        raise ValueError(f"'within' is a ratio to the best value, which is {best:g} here: it needs a positive best")
    near = [t for t in scored if within_of_best(t.value, best, direction, within)]  # type: ignore[arg-type]
    return sorted(near, key=lambda t: (to_loss(t.value, direction), t.number))  # type: ignore[arg-type]


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float as None: JSON has no NaN, and PostgreSQL refuses it."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
