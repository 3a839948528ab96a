"""The ``storetune`` command line: campaigns here; devices, comparisons and admission in their modules."""

from __future__ import annotations

import inspect
import json
import sys
import warnings
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from sqlalchemy.exc import SQLAlchemyError

from storetune.api.cli import admission, devices, offline, render, results, workloads
from storetune.api.cli.common import (
    DbOption, ExecutorOpt, MaxRetriesOpt, JsonOption, UserError, console, database_url, with_runner_options,
    db_flag, err, executor_for, interrupted_status, open_history, pairs, runner_settings, show_dry_run,
    stop_on_signals, table_settings,
)
from storetune.api.cli.progress import CampaignProgress
from storetune.api.fields import cli_terms
from storetune.extras import MissingExtra
from storetune.runners import RUNNERS, HostUnavailable, make_runner
from storetune.runners.base import TableWarning
from storetune.tuner.objectives.fidelity import BURN_IN, GUARD
from storetune.tuner.objectives.objective import table_metric
from storetune.search_spaces import format_config, list_spaces, load_space
from storetune.tuner import ALGORITHMS, DEFAULT_ALGORITHM, Campaign, CampaignSpec, CampaignSummary
from storetune.tuner.search.spec import UNBOUNDED_EVALUATIONS, WARM_STARTS
from storetune.tuner.history.schema import SchemaError, check_url, make_engine, shown_url, upgrade_schema

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="StoreTune: a black-box auto-tuner for storage stacks.",
)


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import version

        print(f"storetune {version('storetune')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True,
                                                    help="Print the version and exit.")] = None,
) -> None:
    """StoreTune: a black-box auto-tuner for storage stacks."""


app.command()(devices.replay)
app.command()(devices.sweep)
app.command()(offline.compare)
app.command()(workloads.fingerprint)
app.command()(workloads.recommend)
app.add_typer(admission.app, name="admission")
db_app = typer.Typer(no_args_is_help=True, help="The history's database: upgrade its schema.")
app.add_typer(db_app, name="db")


def main() -> None:
    """Entry point: user errors become one line on stderr and exit status 2."""
    shown = warnings.showwarning

    def show(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if issubclass(category, TableWarning):  # ours are one line, as errors are
            err.print(f"[yellow]warning:[/] {escape(cli_terms(str(message)))}", highlight=False, soft_wrap=True)
        else:
            shown(message, category, *args, **kwargs)

    warnings.showwarning = show
    stop_on_signals()
    try:
        app()
    except HostUnavailable as e:  # the host, not a configuration (before OSError: a refused lock file is both)
        err.print(f"[bold red]error:[/] {escape(cli_terms(str(e)))}", highlight=False, soft_wrap=True)
        sys.exit(75)  # EX_TEMPFAIL: try again later
    except (UserError, SchemaError, ValueError, LookupError, OSError, MissingExtra) as e:
        message = cli_terms(e.args[0] if isinstance(e, LookupError) and e.args else str(e))
        err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)  # "[rl]" is no markup
        sys.exit(2)
    except SQLAlchemyError as e:  # an unreachable server, a file that is not a database: one line, not a traceback
        cause = str(getattr(e, "orig", None) or e).strip().splitlines()
        err.print(f"[bold red]error:[/] the history: {escape(cause[0]) if cause else type(e).__name__}", highlight=False,
                  soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(interrupted_status())


# what a resumed campaign keeps from its creation; the rest says how to run it now
RESUME_OPTIONS = {"resume", "db", "as_json", "executor_kind", "max_retries", "parallel"}  # and --budget, to extend


@app.command()
@with_runner_options()  # one option per runner setting, from the settings models (runners/settings.py)
def tune(
    ctx: typer.Context,
    runner: Annotated[str, typer.Option(help=f"How to measure: {', '.join(RUNNERS)}.")] = "dataset",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the commands of the first evaluations; "
                                                             "run and record nothing.")] = False,
    fix: Annotated[list[str], typer.Option(help="Pin a parameter of the space, name=value.")] = [],  # noqa: B006
    algorithm: Annotated[Optional[str], typer.Option(help=f"Search algorithm: {', '.join(ALGORITHMS)} (default: "
                                                          f"{DEFAULT_ALGORITHM}; nsga2 for a pareto --objective).")] = None,
    param: Annotated[list[str], typer.Option(help="Algorithm hyperparameter, name=value.")] = [],  # noqa: B006
    budget: Annotated[int, typer.Option(help="Evaluations to spend.")] = 50,
    seed: Annotated[int, typer.Option(help="Seed of the algorithm and of the measurement noise.")] = 0,
    repeats: Annotated[int, typer.Option(help="Measurements per configuration.")] = 1,
    max_repeats: Annotated[Optional[int], typer.Option(
        help="Adaptive repeats: a configuration that looks better than the best so far is measured again, up "
             "to this many runs, before it replaces it (and once the space is exhausted, those within noise of it); "
             "each re-measurement is one evaluation of the budget. With --fidelity asha, the re-measurements wait "
             "until nothing new can be asked; in the budget's last 3 x (max repeats - 1) runs (with --budget-seconds, "
             "as many whole runs' seconds; at most half the budget) a due re-measurement goes before anything "
             "new.")] = None,
    parallel: Annotated[int, typer.Option(help="Configurations measured at once, in worker processes or Ray "
                                               "tasks.")] = 1,
    executor_kind: ExecutorOpt = None,
    max_retries: MaxRetriesOpt = 2,
    metric: Annotated[Optional[str], typer.Option(help="Metric to optimise (default: the runner's first).")] = None,
    direction: Annotated[Optional[str], typer.Option(help="min or max (default: from the metric).")] = None,
    objective: Annotated[Optional[str], typer.Option(
        help="Several metrics instead of --metric: weights 'ops_per_s:3,lat_p99_us:2' (each metric relative to "
             "the first succeeded trial), priorities 'rank:ops_per_s,lat_p99_us;tol=0.05' (the next metric breaks "
             "ties within 5%), or the Pareto set 'pareto:ops_per_s,lat_p99_us'.")] = None,
    fidelity: Annotated[str, typer.Option(
        help="asha: judge each run at rungs of its length (--min-run, x --eta, ... up to the whole run) and stop "
             "those not in the best 1/eta there; none: run every benchmark whole. For runners with a run length "
             "(the device runner with fio, a table with per-second series).")] = "none",
    eta: Annotated[float, typer.Option(help="--fidelity asha: the factor between rungs; about one run in eta goes "
                                            "on past each.")] = 3.0,
    min_run: Annotated[float, typer.Option(help="--fidelity asha: the shortest rung, in seconds.")] = 1.0,
    burn_in: Annotated[int, typer.Option(help="--fidelity asha: whole runs before a rung stops any (0 with --guard 0: "
                                              "plain ASHA).")] = BURN_IN,
    guard: Annotated[int, typer.Option(help="--fidelity asha: a rung stops runs only while the best this many whole "
                                            "runs so far would pass it (0: always).")] = GUARD,
    race: Annotated[str, typer.Option(
        help="wilcoxon: with --repeats 5 or more, a configuration's runs race the best configuration's run by run, "
             "and its remaining runs are not taken once a Wilcoxon signed-rank test says it is worse (p < 0.1); "
             "none: every configuration gets its --repeats.")] = "none",
    budget_seconds: Annotated[Optional[float], typer.Option(
        help="Device-seconds to spend: no trial starts once the runs took this long (their run lengths, short "
             "ones too). Without --budget, evaluations are then limited by it alone.")] = None,
    resume: Annotated[Optional[int], typer.Option(help="Finish the budget of this campaign.")] = None,
    warm_start: Annotated[str, typer.Option(help=f"{', '.join(WARM_STARTS)}: 'same' learns from earlier trials "
                                                 "of the same space, workload and device; 'similar' also measures "
                                                 "first the near-optimal configurations of the nearest fingerprinted "
                                                 "workloads (storetune recommend).")] = "none",
    db: DbOption = None,
    as_json: JsonOption = False,
    runner_options: dict[str, Any] | None = None,
) -> None:
    """Run a tuning campaign, or resume one (with --budget, a larger budget)."""
    extend = False
    if resume is not None:  # a campaign resumes as it was created: an option that would change it is refused
        given = [p.opts[0] for p in ctx.command.params if p.name not in RESUME_OPTIONS
                 # by name: typer 0.29 bundles its own click, whose enum is not click.core's
                 and getattr(ctx.get_parameter_source(p.name), "name", "DEFAULT") != "DEFAULT"]
        extend = "--budget" in given  # a larger budget extends the campaign; a smaller one is refused
        given = [g for g in given if g != "--budget"]
        if given:
            allowed = [p.opts[0] for p in ctx.command.params if p.name in RESUME_OPTIONS - {"resume"}]
            raise UserError(f"--resume {resume} finishes campaign {resume} as it was created and takes only "
                            f"{', '.join(allowed)} and --budget (a larger one extends it), not {', '.join(given)}: for "
                            f"another campaign, start a new one (--warm-start same learns from its trials)")
    if parallel < 1:
        raise UserError(f"--parallel must be at least 1, not {parallel}")
    if fidelity != "asha" and any(_given(ctx, o) for o in ("eta", "min_run", "burn_in", "guard")):
        raise UserError("--eta, --min-run, --burn-in and --guard set the rungs of --fidelity asha: add --fidelity asha, "
                        "or leave them out")
    options = {**(runner_options or {}), "metric": table_metric(metric, objective) if runner == "dataset" else None}
    spec = None
    if resume is None or dry_run:
        spec = CampaignSpec(
            runner=runner,
            runner_settings=runner_settings(runner, options),
            algorithm=algorithm,
            algorithm_params=pairs(param, "--param"),
            metric=metric,
            direction=direction,  # type: ignore[arg-type]
            objective=objective,
            budget=budget if budget_seconds is None or _given(ctx, "budget") else UNBOUNDED_EVALUATIONS,
            seed=seed,
            repeats=repeats,
            max_repeats=max_repeats,
            batch_size=parallel,
            warm_start=warm_start,
            fixed=pairs(fix, "--fix"),
            fidelity=fidelity,
            eta=eta,
            min_run_s=min_run,
            burn_in=burn_in,
            guard=guard,
            budget_s=budget_seconds,
            race=race,
        )
    if dry_run:
        show_dry_run(spec)
        return
    check_url(database_url(db))  # a URL that cannot name a history is refused before a device is set up
    executor = executor_for(executor_kind, parallel, max_retries)
    try:
        if spec is None:
            history = open_history(db, migrate=True)
            if extend:
                _extend(history, resume, budget)
            campaign = Campaign.resume(history, resume, executor)
            runner = campaign.runner
        else:  # the runner and the cluster are checked before the history is opened: a refusal leaves nothing
            runner, _ = Campaign.prepare(spec, executor=executor)
        note = executor.fit(runner)
        if note:
            err.print(cli_terms(note))
        if spec is not None:
            campaign = Campaign.create(open_history(db, migrate=True), spec, runner=runner, executor=executor)
        record = campaign.record
        start = campaign.summary()  # a resumed campaign's bar starts where it stopped, with its best so far
        title = f"campaign {record.id}: {record.algorithm} on {record.workload_name}"
        again = f"storetune tune --resume {record.id}{db_flag(db)}"
        kept = "its finished trials are kept, the running ones will be measured again. Finish it with: "
        try:
            with CampaignProgress(err, title, record.budget, start.evaluated, start.best_value) as progress:
                summary = campaign.run(on_trial=progress.update)
        except KeyboardInterrupt:
            err.print(f"interrupted: campaign {record.id} stopped; {kept}{again}", highlight=False, soft_wrap=True)
            if as_json:  # a script reads where it stopped, and how to go on, from the line it always gets
                _print_summary(campaign.summary(), True, executor.describe(), resume=again)
            sys.exit(interrupted_status())
        except HostUnavailable as e:
            err.print(f"[bold red]error:[/] {escape(str(e.__cause__ or e))}. Campaign {record.id} stopped; no "
                      f"configuration is blamed; {kept}{escape(again)}", highlight=False, soft_wrap=True)
            if as_json:
                _print_summary(campaign.summary(), True, executor.describe(), resume=again)
            sys.exit(75)
    finally:
        executor.close()
    _print_summary(summary, as_json, executor.describe(), db, resume=again if summary.state == "cancelled" else None)
    if summary.state == "cancelled":  # over the REST API: its budget is not spent, a script must not go on
        sys.exit(EXIT_CANCELLED)


def _given(ctx: typer.Context, name: str) -> bool:
    # by name: typer 0.29 bundles its own click, whose enum is not click.core's
    return getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"


EXIT_CANCELLED = 3  # not 1, a traceback's: "cancelled, resume me" is not "crashed"


def _extend(history: Any, campaign_id: int, budget: int) -> None:
    """``--resume N --budget B``: campaign N's budget grows to B (its trials stay, and count); a budget below the
    campaign's is refused, naming both."""
    record = history.campaign(campaign_id)
    if budget < record.budget:
        raise UserError(f"--resume {campaign_id} --budget {budget}: campaign {campaign_id} has a budget of "
                        f"{record.budget}, and a budget can grow, not shrink")
    if budget > record.budget:
        history.extend_campaign(campaign_id, budget, record.algorithm_params)
        err.print(f"campaign {campaign_id}: budget {record.budget} -> {budget}")


def _print_summary(summary: CampaignSummary, as_json: bool, executor: dict[str, Any] | None = None,
                   database: str | None = None, resume: str | None = None) -> None:
    """The summary; with ``as_json`` one line, the same keys whether the campaign finished or stopped (then
    ``resume``: the command that finishes it)."""
    if as_json:
        print(json.dumps({**summary.to_dict(), **({"executor": executor} if executor else {}),
                          **({"resume": resume} if resume else {})}, default=str))
        return
    console.print(render.summary_table(summary))
    db = db_flag(database)
    if summary.state == "cancelled":  # over the REST API, while this command drove it
        console.print(f"cancelled before its budget; its trials are kept. Finish it with: storetune tune --resume "
                      f"{summary.campaign}{db}", highlight=False, soft_wrap=True)
    console.print(f"see every trial: storetune trials {summary.campaign}{db}   the best: storetune best "
                  f"{summary.campaign}{db}")


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    db: DbOption = None,
    max_campaigns: Annotated[Optional[int], typer.Option(help="Campaigns running at once; the rest queue "
                                                              "(default: $STORETUNE_MAX_CAMPAIGNS or 2).")] = None,
    data_dir: Annotated[list[str], typer.Option(help="A directory whose tables and traces clients may name "
                                                     "(default: $STORETUNE_DATA_DIRS, or datasets/ and "
                                                     "../shared/datasets).")] = [],  # noqa: B006
    log_level: Annotated[str, typer.Option(help="uvicorn's log level.")] = "info",
) -> None:
    """The REST service: launch, watch, cancel and resume campaigns (OpenAPI at /docs; --host 0.0.0.0
    to listen beyond this machine, with STORETUNE_TOKEN set).

    STORETUNE_TOKEN, when set, guards every mutating call (Authorization: Bearer <token>);
    STORETUNE_ALLOW_DEVICES and STORETUNE_ALLOW_COMMANDS widen what clients may run. RAY_ADDRESS (the head's
    host:port) measures campaigns and comparisons on that Ray cluster (GET /cluster); STORETUNE_RAY_JOIN=1 joins
    it with a node of the service's own that runs no task (a machine without a Ray node). STORETUNE_DB_RETRY_S
    (60) bounds how long a database call retries while the history's server restarts."""

    import logging
    import os

    from storetune.api.settings import Settings
    from storetune.extras import need

    uvicorn = need("uvicorn", "service")
    need("fastapi", "service")

    # the command line's options reach the service as the settings it reads (one class: api/settings.py); the
    # service is started by its entry point, never imported here (the CLI and the service are rooms apart)
    given = {"STORETUNE_DATABASE_URL": db, "STORETUNE_MAX_CAMPAIGNS": None if max_campaigns is None else str(max_campaigns),
             "STORETUNE_DATA_DIRS": ":".join(data_dir) if data_dir else None}
    os.environ.update({k: v for k, v in given.items() if v})
    settings = Settings()
    # migrated here, not first in the app's startup, so a history this StoreTune cannot use is one line
    open_history(settings.database_url, migrate=True).close()
    logging.basicConfig(format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("storetune.api").setLevel(logging.INFO)  # the scheduler says when campaigns start, end, resume
    where = (f"measured on the Ray cluster at {settings.ray_address}" + (" (joined as a node)" if settings.ray_join else "")
             if settings.ray_address else "measured on this machine")
    err.print(f"StoreTune service on http://{host}:{port} (OpenAPI: /docs), history {shown_url(settings.database_url)}, "
              f"{settings.max_campaigns} campaigns at once, {where}, token {'required' if settings.token else 'not set'}")
    uvicorn.run("storetune.api.service.app:create_app", factory=True, host=host, port=port, log_level=log_level)


app.command()(results.trials)
app.command()(results.best)


@app.command()
def report(
    campaign: Annotated[Optional[int], typer.Argument(help="Campaign id.")] = None,
    comparison: Annotated[Optional[int], typer.Option(help="A comparison's report instead.")] = None,
    out: Annotated[Optional[Path], typer.Option(help="The HTML file (default: results/campaign-ID.html).")] = None,
    within: Annotated[float, typer.Option(help="Near-optimal: within this share of the best value.")] = 0.99,
    db: DbOption = None,
) -> None:
    """One self-contained HTML report (plotly.js inside: it opens without a network): convergence,
    statuses, the near-optimal set, which parameters matter, every trial; or a comparison's curves."""
    from storetune.extras import need

    need("plotly", "report")
    from storetune.api.report.page import page
    from storetune.tuner.analysis.report import campaign_data, comparison_data

    if campaign is not None and comparison is not None:
        raise UserError(f"report one thing: campaign {campaign} or --comparison {comparison}, not both")
    if campaign is None and comparison is None:
        raise UserError("report needs a campaign id, or --comparison ID")
    history = open_history(db, migrate=False)
    if campaign is not None:
        if not 0 < within <= 1:
            raise UserError(f"--within must be in (0, 1], not {within}")
        data, default = campaign_data(history, campaign, within=within), Path(f"results/campaign-{campaign}.html")
    else:
        data, default = comparison_data(history, comparison), Path(f"results/compare-{comparison}.html")
    path = out or default
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(data), encoding="utf-8")
    console.print(f"report: {path}")


@app.command()
def importance(
    campaign: Annotated[int, typer.Argument(help="Campaign id.")],
    seed: Annotated[int, typer.Option(help="Seed of the random-forest surrogate.")] = 0,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Which parameters matter: OLS coefficients (the ATC'18 way), type-II ANOVA shares and a
    random-forest variance share, on the campaign's succeeded trials; most important first."""
    from storetune.tuner.analysis.importance import of_campaign

    result = of_campaign(open_history(db, migrate=False), campaign, seed=seed)
    if as_json:
        print(json.dumps(result))
        return
    console.print(render.importance_table(result))


@app.command()
def campaigns(db: DbOption = None) -> None:
    """The campaigns in the history."""
    console.print(render.campaigns_table(open_history(db, migrate=False).campaigns()))


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None) -> None:
    """Bring the history's schema to this StoreTune's newest revision, printing it before and after.

    Commands that write the history (tune, compare, sweep, serve) migrate it themselves; those that
    only read it (trials, best, report, importance, campaigns) never do, and ask for this command."""
    engine = make_engine(database_url(db))
    try:
        before, after = upgrade_schema(engine)
    finally:
        engine.dispose()
    where = shown_url(engine.url)
    if before == after:
        console.print(f"{where}: schema revision {after}, already the newest", highlight=False)
    else:
        console.print(f"{where}: schema revision {before or 'none (no history yet)'} -> {after}", highlight=False)


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
        runner = make_runner("dataset", table_settings(dataset, context, metric))
        target = runner.space
    elif space:
        target, runner = load_space(space), None
    else:
        raise UserError("check needs --space NAME or --dataset PATH")
    config = target.validate(pairs(assignments, "configuration"), fill_defaults=defaults)
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
        runner = make_runner("dataset", table_settings(dataset, context, metric))
        console.print(render.space_table(runner.space))
        console.print(f"The table holds {runner.space.holding()}.")
        return
    for space_name in [name] if name else list_spaces():
        console.print(render.space_table(load_space(space_name)))


def _one_line_summaries(typer_app: typer.Typer) -> None:
    """Each command's summary in a listing: its docstring's first paragraph on one line. Typer keeps the
    docstring's line breaks there (by hand: it has no setting for it, and markdown mode would eat `_`s)."""
    for command in typer_app.registered_commands:
        doc = inspect.getdoc(command.callback) if command.callback else None
        if command.short_help is None and doc:
            command.short_help = " ".join(doc.split("\n\n")[0].split())
    for group in typer_app.registered_groups:
        _one_line_summaries(group.typer_instance)


_one_line_summaries(app)


if __name__ == "__main__":
    main()
