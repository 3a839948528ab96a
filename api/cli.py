"""The ``storetune`` command line."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from api import render
from api.export import write_comparison
from api.progress import CampaignProgress, ComparisonProgress
from api.settings import Settings
from runners import RUNNERS, make_runner
from search_spaces import Config, format_config, list_spaces, load_space
from tuner import ALGORITHMS, Campaign, CampaignSpec, CampaignSummary, History, best_trial
from tuner.analysis import table_rank
from tuner.campaign import WARM_STARTS

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="StoreTune: a black-box auto-tuner for storage stacks.",
)
# Piped output (files, CI logs) gets wide tables instead of rich's 80-column default.
console = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True)

DbOption = Annotated[
    Optional[str], typer.Option("--db", help="History URL (default: $STORETUNE_DATABASE_URL or a SQLite file).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object as the last line.")]


class UserError(Exception):
    """Bad input: printed as one line, exit status 2."""


def main() -> None:
    """Entry point: user errors become one line on stderr and exit status 2."""
    try:
        app()
    except (UserError, ValueError, LookupError, OSError) as e:
        message = e.args[0] if isinstance(e, LookupError) and e.args else str(e)
        err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


def _history(db: str | None) -> History:
    return History(db or Settings().database_url)


def _pairs(items: list[str], option: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"{option} {item!r}: expected name=value")
        pairs[key.strip()] = value.strip()
    return pairs


def _runner_settings(runner: str, dataset: list[Path], context: list[str], space: str | None,
                     command: str | None, timeout: float, metric: str | None) -> dict[str, Any]:
    if runner == "dataset":
        if not dataset:
            raise UserError("--runner dataset needs --dataset PATH (a CSV table or a folder of them)")
        return {"dataset": [str(p) for p in dataset], "context": _pairs(context, "--context"), "metric": metric}
    if runner == "command":
        if not command or not space:
            raise UserError("--runner command needs --command 'CMD ...' and --space NAME")
        return {"command": command, "space": space, "timeout_s": timeout}
    raise UserError(f"unknown runner {runner!r}; known: {', '.join(RUNNERS)}")


@app.command()
def tune(
    runner: Annotated[str, typer.Option(help=f"How to measure: {', '.join(RUNNERS)}.")] = "dataset",
    dataset: Annotated[list[Path], typer.Option(help="Table(s) to replay (dataset runner).")] = [],  # noqa: B006
    context: Annotated[list[str], typer.Option(help="Pin a setup column, e.g. workload_id=4.")] = [],  # noqa: B006
    space: Annotated[Optional[str], typer.Option(help="Search space (command runner).")] = None,
    command: Annotated[Optional[str], typer.Option(help="Benchmark command (command runner).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds before a run counts as TIMEOUT.")] = 3600.0,
    algorithm: Annotated[str, typer.Option(help=f"Search algorithm: {', '.join(ALGORITHMS)}.")] = "random",
    param: Annotated[list[str], typer.Option(help="Algorithm hyperparameter, name=value.")] = [],  # noqa: B006
    budget: Annotated[int, typer.Option(help="Evaluations to spend.")] = 50,
    seed: Annotated[int, typer.Option(help="Seed of the algorithm and of the measurement noise.")] = 0,
    repeats: Annotated[int, typer.Option(help="Measurements per configuration.")] = 1,
    metric: Annotated[Optional[str], typer.Option(help="Metric to optimise (default: the runner's first).")] = None,
    direction: Annotated[Optional[str], typer.Option(help="min or max (default: from the metric).")] = None,
    resume: Annotated[Optional[int], typer.Option(help="Finish the budget of this campaign.")] = None,
    warm_start: Annotated[str, typer.Option(help=f"{' or '.join(WARM_STARTS)}: 'same' learns from earlier trials "
                                                 "of the same space, workload and device.")] = "none",
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run a tuning campaign, or resume one."""
    history = _history(db)
    if resume is not None:
        campaign = Campaign.resume(history, resume)
    else:
        settings = _runner_settings(runner, dataset, context, space, command, timeout, metric)
        spec = CampaignSpec(
            runner=runner,
            runner_settings=settings,
            algorithm=algorithm,
            algorithm_params=_pairs(param, "--param"),
            metric=metric,
            direction=direction,  # type: ignore[arg-type]
            budget=budget,
            seed=seed,
            repeats=repeats,
            warm_start=warm_start,
        )
        campaign = Campaign.create(history, spec)
    record = campaign.record
    done = campaign.summary().evaluated
    title = f"campaign {record.id}: {record.algorithm} on {record.workload_name}"
    with CampaignProgress(err, title, record.budget, done) as progress:
        summary = campaign.run(on_trial=progress.update)
    _print_summary(summary, as_json)


def _print_summary(summary: CampaignSummary, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary.to_dict(), default=str))
        return
    console.print(render.summary_table(summary))
    console.print(f"see every trial: storetune trials {summary.campaign}   the best: storetune best {summary.campaign}")


@app.command()
def compare(
    dataset: Annotated[list[Path], typer.Option(help="The exhaustive table(s) to replay.")],
    algorithms: Annotated[str, typer.Option(help="Comma-separated, with hyperparameters as ga:mutation_rate=0.05.")]
    = ",".join(ALGORITHMS),
    seeds: Annotated[int, typer.Option(help="Seeded campaigns per algorithm.")] = 100,
    budget: Annotated[int, typer.Option(help="Evaluations per campaign.")] = 200,
    within: Annotated[float, typer.Option(help="Near-optimal: within this fraction of the table's best mean.")] = 0.99,
    context: Annotated[list[str], typer.Option(help="Pin a setup column, e.g. workload_id=4.")] = [],  # noqa: B006
    metric: Annotated[Optional[str], typer.Option(help="Metric to optimise (default: the table's objective).")] = None,
    direction: Annotated[Optional[str], typer.Option(help="min or max (default: from the table).")] = None,
    repeats: Annotated[int, typer.Option(help="Measurements per configuration.")] = 1,
    first_seed: Annotated[int, typer.Option(help="Seeds run from this one.")] = 0,
    workers: Annotated[int, typer.Option(help="Worker processes (default: one per core).")] = 0,
    out: Annotated[Optional[Path], typer.Option(help="Folder for summary.json and CSV files.")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Compare algorithms offline on an exhaustive table: success rate by evaluation, evaluations to near-optimal."""
    from tuner.compare import Comparison, CompareSpec, Variant  # scipy: loaded only for this command
    from tuner.executor import ProcessExecutor

    history = _history(db)
    spec = CompareSpec(
        runner_settings=_runner_settings("dataset", dataset, context, None, None, 0, metric),
        variants=tuple(Variant.parse_list(algorithms)),
        seeds=seeds, budget=budget, within=within, repeats=repeats, metric=metric,
        direction=direction, first_seed=first_seed,
    )
    comparison = Comparison.create(history, spec)
    executor = ProcessExecutor(workers or None)
    title = f"comparison {comparison.id} on {comparison.runner.table.name}"
    with ComparisonProgress(err, title, seeds * len(spec.variants)) as progress:
        results = comparison.run(executor, on_seed=progress.update)
    if out is not None:
        for path in write_comparison(out, results, comparison.runs):
            err.print(f"wrote {path}")
    if as_json:
        print(json.dumps(results))
        return
    console.print(render.comparison_table(results))


@app.command()
def trials(
    campaign: Annotated[int, typer.Argument(help="Campaign id.")],
    fmt: Annotated[str, typer.Option("--format", help="table, json or csv.")] = "table",
    db: DbOption = None,
) -> None:
    """Every trial of a campaign: configuration, status, value and reason."""
    history = _history(db)
    record = history.campaign(campaign)
    rows = history.trials(campaign)
    if fmt == "table":
        console.print(render.trials_table(record, rows))
    elif fmt == "json":
        print(json.dumps([_trial_dict(t) for t in rows], default=str))
    elif fmt == "csv":
        names = list(dict.fromkeys(k for t in rows for k in t.config))
        writer = csv.writer(sys.stdout)
        writer.writerow(["number", "status", "value", "reason", *names])
        for t in rows:
            writer.writerow([t.number, t.status, t.value, t.reason, *(t.config.get(n, "") for n in names)])
    else:
        raise UserError(f"--format {fmt!r}: choose table, json or csv")


def _trial_dict(t: Any) -> dict[str, Any]:
    keys = ("number", "status", "value", "reason", "config", "config_hash", "seed", "retry_of", "started_at", "finished_at")
    return {k: getattr(t, k) for k in keys}


@app.command()
def best(campaign: Annotated[int, typer.Argument(help="Campaign id.")], db: DbOption = None, as_json: JsonOption = False) -> None:
    """The best configuration a campaign found."""
    history = _history(db)
    record = history.campaign(campaign)
    rows = history.trials(campaign, measurements=True)
    top = best_trial(rows, record.objective_direction)
    if top is None:
        raise UserError(f"campaign {campaign} has no succeeded trial yet")
    result = {
        "campaign": campaign,
        "trial": top.number,
        "evaluations_to_find": sum(1 for t in rows if t.number <= top.number and t.status != "STALE"),
        "value": top.value,
        "objective": {"metric": record.objective_metric, "direction": record.objective_direction},
        "config": top.config,
        "repeats": [m.metrics.get(record.objective_metric) for m in top.measurements],
    }
    rank = None
    if record.runner == "dataset":  # a replayed table knows the ground truth
        table = make_runner(record.runner, **record.runner_settings).table
        rank = table_rank(Config(top.config), table.means(record.objective_metric), record.objective_direction)
        result["table_rank"] = rank.to_dict() if rank else None
    if as_json:
        print(json.dumps(result))
        return
    console.print(
        f"campaign {campaign}: best {record.objective_metric} = [bold]{top.value:.6g}[/] "
        f"({record.objective_direction}), trial {top.number}, found after {result['evaluations_to_find']} evaluations"
    )
    if rank is not None:
        console.print(
            f"in the table: mean {rank.mean:.6g}, rank {rank.rank} of {rank.configurations} "
            f"(the table's best mean is {rank.table_best:.6g})"
        )
    for key, value in top.config.items():
        console.print(f"  {key} = {value}")


@app.command()
def campaigns(db: DbOption = None) -> None:
    """The campaigns in the history."""
    console.print(render.campaigns_table(_history(db).campaigns()))


@app.command()
def check(
    assignments: Annotated[list[str], typer.Argument(help="The configuration, as name=value ...")],
    space: Annotated[Optional[str], typer.Option(help="A search space by name.")] = None,
    dataset: Annotated[list[Path], typer.Option(help="Or the space of a table.")] = [],  # noqa: B006
    context: Annotated[list[str], typer.Option(help="Pin a setup column of the table.")] = [],  # noqa: B006
    metric: Annotated[Optional[str], typer.Option(help="The table's objective column, if its header does not say.")] = None,
    defaults: Annotated[bool, typer.Option("--defaults", help="Fill the parameters left out with defaults.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Validate a configuration: the canonical form, or which parameter is wrong and what it allows."""
    if dataset:
        runner = make_runner("dataset", **_runner_settings("dataset", dataset, context, None, None, 0, metric))
        target = runner.space
    elif space:
        target, runner = load_space(space), None
    else:
        raise UserError("check needs --space NAME or --dataset PATH")
    config = target.validate(_pairs(assignments, "configuration"), fill_defaults=defaults)
    result: dict[str, Any] = {"space": target.name, "config": config.to_dict(), "hash": target.hash(config)}
    if runner is not None:
        mean = runner.table.means(runner.table.default_metric).get(config)
        result["measured"] = mean is not None
        result["mean"] = mean
        if mean is None:
            raise UserError(f"valid, but not measured in {runner.table.name}: {format_config(config)}")
    if as_json:
        print(json.dumps(result))
        return
    console.print(f"valid in {target.name} (hash {result['hash']}): {format_config(config)}")
    if runner is not None:
        console.print(f"measured: mean {runner.table.default_metric} = {result['mean']:.6g}")


@app.command()
def spaces(
    name: Annotated[Optional[str], typer.Argument(help="One space; all when omitted.")] = None,
    dataset: Annotated[list[Path], typer.Option(help="Show the space inferred from a table instead.")] = [],  # noqa: B006
    context: Annotated[list[str], typer.Option(help="Pin a setup column of the table, e.g. workload_id=4.")] = [],  # noqa: B006
    metric: Annotated[Optional[str], typer.Option(help="The table's objective column, if its header does not say.")] = None,
) -> None:
    """The search spaces and their parameters."""
    if dataset:
        settings = _runner_settings("dataset", dataset, context, None, None, 0, metric)
        runner = make_runner("dataset", **settings)
        console.print(render.space_table(runner.space))
        return
    for space_name in [name] if name else list_spaces():
        console.print(render.space_table(load_space(space_name)))


if __name__ == "__main__":
    main()
