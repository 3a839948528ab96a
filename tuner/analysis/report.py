"""What a report shows, as data: the CLI's `report`, the service's report pages and their live
updates all draw from these two functions, so they show the same numbers.

Everything is aggregated here, on the server: a campaign of 10,000 trials becomes a few columns, a
sample of lines for the parallel-coordinates plot (and the report says it is a sample), and the
failed trials' reasons grouped.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from typing import Any

import numpy as np

from storetune.runners import Status
from storetune.search_spaces import Config
from storetune.search_spaces.status import best_of, loss, within_of_best
from storetune.tuner.analysis.summary import (
    TableGone, campaign_best, campaign_convergence, convergence, evaluations, held_out, near_optimal_trials,
    judge_means, replayed_table, table_digest,
)
from storetune.tuner.history.store import History
from storetune.tuner.history.views import CampaignView

PARALLEL_LINES = 1000  # lines of the parallel-coordinates plot at most: beyond, a seeded sample
INSTANT_POINTS = 1000  # evaluations drawn one point each at most: beyond, bins of consecutive evaluations
REASONS = 20  # distinct failure reasons listed


def campaign_data(history: History, campaign_id: int, *, within: float = 0.99, seed: int = 0) -> dict[str, Any]:
    """A campaign's report: state, convergence, statuses, near-optimal set, importance, all trials."""
    from storetune.tuner.analysis.importance import common_values, importance

    record = history.campaign(campaign_id)
    # an objective over several metrics is read from the measurements (the lexicographic best, the Pareto set)
    # a device campaign's runs have per-second series (few trials: each is minutes of a device)
    trials = history.trials(campaign_id, measurements=bool(record.objective) or record.runner == "device")
    direction = record.objective_direction
    names = [p["name"] for p in record.space["parameters"]]
    finished = [t for t in trials if Status(t.status).terminal]
    scored = [t for t in finished if t.status == Status.SUCCEEDED.value and t.value is not None]
    best = history.best_trial(campaign_id, direction, record.adaptive)
    if (record.objective or {}).get("kind") == "rank":  # the lexicographic best, read from the measurements
        best = campaign_best(record, trials)
    curve = campaign_convergence(history, record)
    values = [t.value for t in scored]
    out: dict[str, Any] = {
        "kind": "campaign", "id": record.id, "state": record.state, "note": record.note,
        "title": f"campaign {record.id}: {record.algorithm} on {record.workload_name}",
        "algorithm": record.algorithm, "space": record.space_name, "workload": record.workload_name,
        "params": record.resolved_params or record.algorithm_params,
        "runner": record.runner, "objective": {"metric": record.objective_metric, "direction": direction},
        "fixed": record.fixed or {}, "adaptive": record.adaptive,
        "holds": (record.space or {}).get("holds"),  # a table's space: how much of its grid it lists
        "budget": record.budget, "evaluated": evaluations(trials, record.repeats),
        "best": None if best is None else {"trial": best.number, "value": best.value, "config": best.config},
        "test_value": held_out(best, record.objective_metric),
        "convergence": curve.to_dict(),
        "instant": _instant(curve.evaluation, curve.value, curve.elapsed_s),
        "log_scale": _spans_decades(values),
        "statuses": _statuses(finished),
        "empty": None if scored else ("no trial has succeeded yet" if not finished else
                                      "no trial succeeded: every one failed, was invalid or timed out (see below)"),
    }
    adaptive = record.adaptive
    near = near_optimal_trials(scored, direction, within, adaptive) if scored and _positive_best(values, direction) else []
    out["near_optimal"] = {
        "within": within, "count": len(near),
        "trials": [{"trial": t.number, "value": t.value, "config": t.config} for t in near[:50]],
        "common": common_values([t.config for t in near], [t.config for t in scored], names) if near else {},
    }
    try:
        out["importance"] = importance([t.config for t in scored], values, names, seed=seed).to_dict()
    except ValueError as e:
        out["importance"] = {"error": str(e)}
    out["parallel"] = _parallel(scored, names, seed, direction)
    if record.objective:
        _several(out, record, trials)
    out["nodes"] = _nodes(history, finished)
    out["executor"] = record.executor or {}
    out["series"] = _series(finished, None if best is None else best.number)
    return out


SERIES_RUNS = 12  # the runs a report draws second by second: the best trial's and the latest


def _series(finished: list[Any], best: int | None) -> dict[str, Any] | None:
    """The runs measured second by second (a device campaign's): the best trial's and the latest ``SERIES_RUNS``,
    each with where it reached steady state; and which runs never did (their figure depends on the run's length)."""
    runs = [{"trial": t.number, "repeat": m.repeat, "best": t.number == best, "interval_s": m.series["interval_s"],
             "ops_per_s": m.series["ops_per_s"], "steady": m.series.get("steady")}
            for t in finished for m in (t.measurements or ()) if m.series and m.series.get("ops_per_s")]
    if not runs:
        return None
    unsteady = sorted({r["trial"] for r in runs if not (r["steady"] or {}).get("reached")})
    shown = [r for r in runs if r["best"]] + [r for r in runs if not r["best"]][-SERIES_RUNS:]
    return {"runs": shown, "total": len(runs), "unsteady_trials": unsteady,
            "unsteady_runs": sum(not (r["steady"] or {}).get("reached") for r in runs),
            "rule": next((r["steady"]["rule"] for r in runs if r["steady"]), None)}


def _nodes(history: History, finished: list[Any]) -> dict[str, int]:
    """The machines that measured the campaign, each with the trials it measured (a trial re-measured elsewhere
    counts on both), most first: on a cluster, whether one node's disk measured most of the campaign."""
    counts = Counter(n for ns in history.nodes(t.id for t in finished).values() for n in ns)
    return dict(counts.most_common())


# what the figures of a campaign over several metrics draw, and what its "best" is (`storetune best` says the same)
SCORES = {"weighted": "weighted score", "rank": "lexicographic score", "pareto": "equal-weight score"}
BESTS = {"weighted": "best weighted score", "rank": "lexicographic best (its score)", "pareto": "best equal-weight score"}


def _several(out: dict[str, Any], record: Any, measured: list[Any]) -> None:
    """An objective over several metrics: the one value the figures draw is a score of them, and says so;
    a Pareto campaign adds its set, its hypervolume and every succeeded trial's metrics (what it is about)."""
    from storetune.tuner.objectives.objective import MultiObjective, trial_means
    from storetune.tuner.analysis.pareto import pareto_set

    objective = MultiObjective.from_spec(record.objective)
    out["objective"].update(score=SCORES[objective.kind], best=BESTS[objective.kind], of=list(objective.metrics))
    if objective.kind != "pareto":
        return
    points = [(t.number, trial_means(t, objective.metrics)) for t in measured if t.status == Status.SUCCEEDED.value]
    out["pareto"] = {
        **pareto_set(measured, objective), "metrics": list(objective.metrics), "directions": list(objective.directions),
        "points": [{"trial": n, "values": v} for n, v in points if v is not None][-PARALLEL_LINES:],
        "trials": sum(v is not None for _, v in points),
        "log_scale": {m: _spans_decades([v[m] for _, v in points if v is not None]) for m in objective.metrics},
    }


def comparison_data(history: History, comparison_id: int) -> dict[str, Any]:
    """A comparison's report: success curves beside random search's exact one, each algorithm's mean
    instantaneous value and median best-so-far by evaluation, and evaluations to near-optimal."""
    record = history.comparison(comparison_id)
    results = record.results or {}
    objective = record.settings.get("objective", {})
    direction = objective.get("direction", "min")
    best_so_far: dict[str, list[float | None]] = {}
    # seeds stopped at their first near-optimal configuration have no best beyond it: no curve
    stopped = record.settings.get("stop_at_near_optimal", False)
    campaigns = [] if stopped else history.comparison_campaigns(comparison_id)
    seeds = _seed_campaigns(campaigns)
    means, gone = (_table_means(record.runner_settings, objective.get("metric"), campaigns, record.settings.get("judge"))
                   if seeds else (None, None))
    for label, ids in seeds.items():
        curves = []
        for campaign_id in ids:
            if means is None:  # the table is gone: the best values seen
                curve = convergence(history.outcomes(campaign_id), direction).best
            else:  # the trials, read once: their outcomes for the curve, their configurations for the means
                trials = history.trials(campaign_id)
                configs = {t.number: t.config for t in trials}
                conv = convergence([(t.number, t.status, t.value, t.started_at, t.finished_at) for t in trials],
                                   direction)
                curve = [None if n is None else means.get(Config(configs[n])) for n in _best_trials(conv)]
            curves.append([math.nan if v is None else v for v in curve])
        if curves:
            width = max(len(c) for c in curves)
            padded = np.array([c + [math.nan] * (width - len(c)) for c in curves], dtype=float)
            with np.errstate(all="ignore"):
                median = np.nanmedian(padded, axis=0) if np.isfinite(padded).any() else padded[0]
            best_so_far[label] = [None if not math.isfinite(v) else float(v) for v in median]
    # in the variants' order, as every other figure (the seeds' campaigns come in the order they finished)
    order = {label: i for i, label in enumerate(record.settings.get("variants", []))}
    best_so_far = dict(sorted(best_so_far.items(), key=lambda item: order.get(item[0], len(order))))
    algorithms = results.get("algorithms", {})
    return {
        "kind": "comparison", "id": record.id, "state": record.state, "note": record.note,
        "title": f"comparison {record.id} on {record.workload_name}",
        "objective": objective, "settings": {k: v for k, v in record.settings.items() if k != "driver"},
        "results": results or None,
        "random_exact": results.get("random_expected_success_at"),
        "algorithms": {label: {k: a.get(k) for k in ("success_at", "instant_mean", "evals_to_near_optimal",
                                                     "median_evals_to_near_optimal", "censored", "success_at_budget",
                                                     "best_mean_at_budget")}
                       for label, a in algorithms.items()},
        "best_so_far": best_so_far,
        # what the curve is of: each seed's reported configuration at its table mean, or (the table gone) its
        # best value seen
        "best_so_far_of": "table mean" if means is not None else "best value seen",
        "table_error": gone,  # why the seeds' best could not be judged by their table
        "log_scale": _spans_decades([v for c in best_so_far.values() for v in c if v is not None]),
        "empty": None if results else f"the comparison is {record.state}: its results come when every seed has run",
    }


# --- helpers ----------------------------------------------------------------------------------------
def _table_means(runner_settings: dict[str, Any], metric: str | None, campaigns: list[CampaignView],
                 judge: list[str] | None = None) -> tuple[dict[Config, float] | None, str | None]:
    """The comparison's table: each configuration's mean, or its judge's, the truth its seeds are judged by; or
    None and why not (the table or its judge can no longer be read, or the table has changed since the seeds
    replayed it)."""
    try:
        runner = replayed_table(runner_settings, [table_digest(c) for c in campaigns])
    except TableGone as e:
        return None, str(e)
    if judge:
        try:
            return judge_means(runner, judge, metric or runner.table.default_metric), None
        except (OSError, ValueError) as e:
            return None, f"its judge can no longer be read: {e}"
    return runner.table.means(metric), None


def _best_trials(conv: Any) -> list[int | None]:
    """After each evaluation, the trial a seed reports as its best so far (the first to reach the best
    value). Its table mean, not its value, is what the seed found: on a noisy table the best value
    seen is a lucky draw, and a median of those flattered every algorithm beyond the table's best."""
    out: list[int | None] = []
    for number, value, best in zip(conv.trial, conv.value, conv.best):
        if value is not None and value == best and (not out or out[-1] is None or best != previous):
            out.append(number)
        else:
            out.append(out[-1] if out else None)
        previous = best
    return out


def _seed_campaigns(campaigns: list[CampaignView]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for c in campaigns:
        params = dict(c.algorithm_params)
        label = c.algorithm if not params else f"{c.algorithm}[{','.join(f'{k}={v}' for k, v in params.items())}]"
        out.setdefault(label, []).append(c.id)
    return out


def _instant(evaluation: list[int], value: list[float | None], elapsed: list[float | None]) -> dict[str, Any]:
    """Each evaluation's value as drawn: one point each up to INSTANT_POINTS evaluations; beyond, the
    minimum, median and maximum of bins of consecutive evaluations (the bin's last evaluation and
    time as its position), so 10,000 evaluations draw as a band of a few hundred points."""
    n = len(value)
    if n <= INSTANT_POINTS:
        return {"bin": 1, "evaluation": evaluation, "elapsed_s": elapsed, "value": value}
    size = math.ceil(n / (INSTANT_POINTS // 2))
    bins = math.ceil(n / size)
    grid = np.full(bins * size, np.nan)
    grid[:n] = [math.nan if v is None else v for v in value]
    grid = grid.reshape(bins, size)
    ends = [min((b + 1) * size, n) - 1 for b in range(bins)]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a bin of failed trials only has no value
        low, median, high = np.nanmin(grid, axis=1), np.nanmedian(grid, axis=1), np.nanmax(grid, axis=1)

    def column(a: np.ndarray) -> list[float | None]:
        return [float(v) if math.isfinite(v) else None for v in a]

    return {"bin": size, "evaluation": [evaluation[i] for i in ends], "elapsed_s": [elapsed[i] for i in ends],
            "low": column(low), "median": column(median), "high": column(high)}


def _statuses(finished: list[Any]) -> dict[str, Any]:
    counts = Counter(t.status for t in finished)
    reasons = Counter((t.status, t.reason or "") for t in finished if t.status != Status.SUCCEEDED.value)
    return {"counts": {s.value: counts[s.value] for s in Status if counts[s.value]},
            "reasons": [{"status": s, "reason": r, "trials": n} for (s, r), n in reasons.most_common(REASONS)]}


def _parallel(scored: list[Any], names: list[str], seed: int, direction: str) -> dict[str, Any]:
    """All succeeded trials for a parallel-coordinates plot, or a seeded sample of them."""
    rows = scored
    if len(rows) > PARALLEL_LINES:
        picks = np.sort(np.random.default_rng(seed).choice(len(rows), PARALLEL_LINES, replace=False))
        rows = [scored[i] for i in picks]
    dimensions = []
    for name in names:
        column = [t.config.get(name) for t in rows]
        given = [v for v in column if v is not None]
        if given and all(isinstance(v, int | float) and not isinstance(v, bool) for v in given):
            # a number axis; where the parameter does not apply (a conditional one, such as a classifier's
            # decision threshold) None, drawn apart as n/a: as labels, every distinct real value was a tick
            dimensions.append({"name": name, "values": [None if v is None else float(v) for v in column]})
        else:
            labels = sorted({str(v) if v is not None else "n/a" for v in column})
            index = {label: i for i, label in enumerate(labels)}
            dimensions.append({"name": name, "values": [index[str(v) if v is not None else "n/a"] for v in column],
                               "labels": labels})
    losses = np.array([loss(t.value, direction) for t in rows])
    order = np.argsort(losses, kind="stable")  # best first
    rank = np.empty(len(rows))
    rank[order] = (np.arange(len(rows)) + 1) / max(len(rows), 1)
    return {"lines": len(rows), "of": len(scored), "dimensions": dimensions, "value": [t.value for t in rows],
            "rank": rank.tolist()}  # each line's share of lines at least as good: (0, 1], the best first


def _spans_decades(values: list[float]) -> bool:
    positive = [v for v in values if v is not None and v > 0]
    return len(positive) == len(values) and bool(positive) and max(positive) / min(positive) >= 100


def _positive_best(values: list[float], direction: str) -> bool:
    best = best_of(values, direction)
    return best > 0 and within_of_best(best, best, direction, 1.0)
