"""``storetune trials`` and ``storetune best``: what a campaign measured, and the best it found (with each
metric of an objective over several, and the Pareto set of a Pareto objective)."""

from __future__ import annotations

import csv
import json
import sys
from typing import Annotated, Any

import typer
from rich.markup import escape

from storetune.api.cli import render
from storetune.api.cli.common import DbOption, JsonOption, UserError, console, open_history
from storetune.api.public import public_trials
from storetune.search_spaces import Config, format_config
from storetune.tuner.analysis.summary import (
    TableGone, campaign_best, held_out, replayed_table, searched_means, table_digest, table_rank,
)


def trials(
    campaign: Annotated[int, typer.Argument(help="Campaign id.")],
    fmt: Annotated[str, typer.Option("--format", help="table, json or csv.")] = "table",
    db: DbOption = None,
) -> None:
    """Every trial of a campaign: configuration, status, value and reason."""
    history = open_history(db, migrate=False)
    record = history.campaign(campaign)
    rows = history.trials(campaign, measurements=fmt == "table" and (record.runner == "device" or bool(record.fidelity)))
    if fmt == "table":
        console.print(render.trials_table(record, rows, history.nodes(t.id for t in rows)))
    elif fmt == "json":
        print(json.dumps(public_trials(history, rows), default=str))
    elif fmt == "csv":
        names = list(dict.fromkeys(k for t in rows for k in t.config))
        writer = csv.writer(sys.stdout)
        writer.writerow(["number", "status", "value", "reason", *names])
        for t in rows:
            writer.writerow([t.number, t.status, t.value, t.reason, *(t.config.get(n, "") for n in names)])
    else:
        raise UserError(f"--format {fmt!r}: choose table, json or csv")


def evaluations_to_find(trials: list[Any], top: Any, repeats: int) -> int:
    """Evaluations spent up to the first measurement of ``top``: a trial's first run counts one, and so does
    each adaptive re-measurement (a run past its repeats) taken before it."""
    if all(t.runs <= repeats for t in trials):
        return sum(1 for t in trials if t.number <= top.number and t.status != "STALE")
    found = top.measurements[0].created_at
    return sum(1 for t in trials if t.status != "STALE" for m in t.measurements
               if (m.repeat == 0 or m.repeat >= repeats) and m.created_at <= found)


def best(campaign: Annotated[int, typer.Argument(help="Campaign id.")], db: DbOption = None, as_json: JsonOption = False) -> None:
    """The best configuration a campaign found."""
    history = open_history(db, migrate=False)
    record = history.campaign(campaign)
    rows = history.trials(campaign, measurements=True)
    top = campaign_best(record, rows)
    if top is None:
        state = " yet" if record.state in ("queued", "running") else f" (it is {record.state})"
        raise UserError(f"campaign {campaign} has no succeeded trial{state}")
    if record.objective:
        _best_of_several(record, rows, top, as_json)
        return
    result = {
        "campaign": campaign,
        "trial": top.number,
        "evaluations_to_find": evaluations_to_find(rows, top, record.repeats),
        "value": top.value,
        "objective": {"metric": record.objective_metric, "direction": record.objective_direction},
        "config": top.config,
        "repeats": [m.metrics.get(record.objective_metric) for m in top.measurements],
        "test_value": held_out(top, record.objective_metric),
    }
    rank = pinned = gone = None
    try:  # a replayed table knows the ground truth, if it is still the table replayed
        runner = replayed_table(record.runner_settings, [table_digest(record)]) if record.runner == "dataset" else None
    except TableGone as e:
        runner, gone = None, f"not ranked in the table: {e}"
        result["table_rank"] = None
        result["table_error"] = gone
    if runner is not None:
        means = runner.table.means(record.objective_metric)
        rank = table_rank(Config(top.config), means, record.objective_direction)
        result["table_rank"] = rank.to_dict() if rank else None
        if record.fixed:  # the campaign searched only the configurations with its pins: its rank among them too
            pinned = table_rank(Config(top.config), searched_means(record, runner.space, means),
                                record.objective_direction)
            result["pinned_rank"] = {**pinned.to_dict(), "fixed": record.fixed} if pinned else None
    if as_json:
        print(json.dumps(result))
        return
    found = result["evaluations_to_find"]
    console.print(
        f"campaign {campaign}: best {record.objective_metric} = [bold]{top.value:.6g}[/] "
        f"({record.objective_direction}), trial {top.number}, found after {found} evaluation{'' if found == 1 else 's'}"
    )
    if rank is not None:
        console.print(
            f"in the table: mean {rank.mean:.6g}, rank {rank.rank} of {rank.configurations} "
            f"(the table's best mean is {rank.table_best:.6g})"
        )
    if gone is not None:
        console.print(f"[dim]{escape(gone)}[/]")
    if pinned is not None:
        pins = ", ".join(f"{k}={v}" for k, v in record.fixed.items())
        console.print(f"among the table's {pinned.configurations} configurations with the campaign's pins ({pins}): "
                      f"rank {pinned.rank} (their best mean is {pinned.table_best:.6g})")
    if result["test_value"] is not None:
        console.print(f"on the held-out test part: {record.objective_metric} = {result['test_value']:.6g}")
    for key, value in top.config.items():
        console.print(f"  {key} = {value}")


def _best_of_several(record: Any, rows: list[Any], top: Any, as_json: bool) -> None:
    """``best`` of a campaign with an objective over several metrics: the reported trial with each metric's
    mean, and for a Pareto objective the Pareto set from the history and its hypervolume."""
    from storetune.tuner.objectives.objective import MultiObjective, trial_means
    from storetune.tuner.analysis.pareto import format_point, pareto_set

    objective = MultiObjective.from_spec(record.objective)
    result: dict[str, Any] = {
        "campaign": record.id, "trial": top.number,
        "evaluations_to_find": evaluations_to_find(rows, top, record.repeats), "value": top.value,
        "objective": objective.to_dict(), "config": top.config, "values": trial_means(top, objective.metrics),
    }
    if objective.kind == "pareto":
        result.update(pareto_set(rows, objective))
    if as_json:
        print(json.dumps(result))
        return
    shown = format_point(result["values"])
    what = {"weighted": "best weighted score", "rank": "lexicographic best",
            "pareto": "best equal-weight score"}[objective.kind]
    console.print(f"campaign {record.id} ({objective.text}): {what} {top.value:.6g} at trial {top.number}: {shown}",
                  highlight=False)
    for key, value in top.config.items():
        console.print(f"  {key} = {value}")
    if objective.kind == "pareto":
        reference = format_point(result["reference_point"])
        console.print(f"Pareto set: {len(result['pareto'])} trials, hypervolume {result['hypervolume']:.6g} "
                      f"against the worst value of each metric measured ({reference})", highlight=False)
        for p in result["pareto"]:
            values = format_point(p["values"])
            console.print(f"  trial {p['trial']}: {values}   {format_config(Config(p['config']))}", highlight=False)
