"""The ``storetune`` command line."""

from __future__ import annotations

import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from api import render
from api.export import write_comparison
from api.progress import CampaignProgress, ComparisonProgress
from api.settings import Settings
from runners import RUNNERS, Status, make_runner
from search_spaces import Config, format_config, list_spaces, load_space
from tuner import ALGORITHMS, SEARCH_ALGORITHMS, Campaign, CampaignSpec, CampaignSummary, History, best_trial
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


@dataclass(frozen=True)
class DeviceOptions:
    """The tune options of the device runner."""

    device: str = "loop"
    allow_device: tuple[str, ...] = ()
    workload: str = "fileserver"
    engine: str = "fio"
    runtime: float = 10.0
    loop_dir: str = "/var/tmp/storetune"
    loop_size_mib: int = 1024
    fileset_mib: int = 256

    def settings(self, space: str | None, timeout: float | None) -> dict[str, Any]:
        return dict(space=space or "storage_v2", workload=self.workload, device=self.device,
                    allow_device=list(self.allow_device), engine=self.engine, runtime_s=self.runtime,
                    timeout_s=timeout, loop_dir=self.loop_dir, loop_size_mib=self.loop_size_mib,
                    fileset_mib=self.fileset_mib)


def _runner_settings(runner: str, dataset: list[Path], context: list[str], space: str | None,
                     command: str | None, timeout: float | None, metric: str | None,
                     device: DeviceOptions | None = None) -> dict[str, Any]:
    if runner == "dataset":
        if not dataset:
            raise UserError("--runner dataset needs --dataset PATH (a CSV table or a folder of them)")
        return {"dataset": [str(p) for p in dataset], "context": _pairs(context, "--context"), "metric": metric}
    if runner == "command":
        if not command or not space:
            raise UserError("--runner command needs --command 'CMD ...' and --space NAME")
        return {"command": command, "space": space, "timeout_s": timeout or 3600.0}
    if runner == "device":
        return (device or DeviceOptions()).settings(space, timeout)
    raise UserError(f"unknown runner {runner!r}; known: {', '.join(RUNNERS)}")


@app.command()
def tune(
    runner: Annotated[str, typer.Option(help=f"How to measure: {', '.join(RUNNERS)}.")] = "dataset",
    dataset: Annotated[list[Path], typer.Option(help="Table(s) to replay (dataset runner).")] = [],  # noqa: B006
    context: Annotated[list[str], typer.Option(help="Pin a setup column, e.g. workload_id=4.")] = [],  # noqa: B006
    space: Annotated[Optional[str], typer.Option(help="Search space (command runner).")] = None,
    command: Annotated[Optional[str], typer.Option(help="Benchmark command (command runner).")] = None,
    timeout: Annotated[Optional[float], typer.Option(help="Seconds before a run counts as TIMEOUT.")] = None,
    device: Annotated[str, typer.Option(help="Device runner: 'loop' (a loop device StoreTune creates) or a "
                                             "block device named with --allow-device.")] = "loop",
    allow_device: Annotated[list[str], typer.Option(help="A block device StoreTune may format.")] = [],  # noqa: B006
    workload: Annotated[str, typer.Option(help="Device runner: fileserver, varmail, webserver or oltp.")] = "fileserver",
    engine: Annotated[str, typer.Option(help="Device runner: fio, or filebench if it is on PATH.")] = "fio",
    runtime: Annotated[float, typer.Option(help="Device runner: seconds each benchmark runs.")] = 10.0,
    loop_dir: Annotated[str, typer.Option(help="Where the loop device's sparse file goes.")] = "/var/tmp/storetune",
    loop_size_mib: Annotated[int, typer.Option(help="Size of the loop device.")] = 1024,
    fileset_mib: Annotated[int, typer.Option(help="Largest fileset a personality lays out.")] = 256,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the commands of the first evaluations; "
                                                             "run and record nothing.")] = False,
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
    options = DeviceOptions(device, tuple(allow_device), workload, engine, runtime, loop_dir, loop_size_mib, fileset_mib)
    if dry_run:
        _dry_run(runner, _runner_settings(runner, dataset, context, space, command, timeout, metric, options),
                 algorithm, _pairs(param, "--param"), budget, seed)
        return
    history = _history(db)
    if resume is not None:
        campaign = Campaign.resume(history, resume)
    else:
        settings = _runner_settings(runner, dataset, context, space, command, timeout, metric, options)
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


DRY_RUN_EVALUATIONS = 3


def _literal(line: str) -> None:
    """Print a command as it is (job files have [sections] that rich would take for markup)."""
    console.print(line, markup=False, highlight=False)


def _dry_run(runner_name: str, settings: dict[str, Any], algorithm: str, params: dict[str, str], budget: int,
             seed: int) -> None:
    """Print the commands of the first evaluations a campaign would make. Nothing is run or recorded."""
    from runners import runner_class
    from tuner import make_tuner

    cls = runner_class(runner_name)
    if "dry_run" not in cls.__init__.__code__.co_varnames:
        raise UserError(f"--dry-run is for the device runner; the {runner_name} runner changes nothing anyway")
    runner = cls(**settings, dry_run=True, echo=_literal)
    tuner = make_tuner(algorithm, runner.space, seed=seed, direction="max", params=params)
    for k, config in enumerate(tuner.ask(min(budget, DRY_RUN_EVALUATIONS)), start=1):
        console.print(f"[bold]# evaluation {k}: {escape(format_config(config))}[/]")
        runner.run(config, runner.workload, seed=seed)
        tuner.tell(config, None, Status.FAILED)
    console.print("[bold]# teardown[/]")
    runner.close()
    console.print(f"dry run: the commands of the first {min(budget, DRY_RUN_EVALUATIONS)} of {budget} evaluations; "
                  "nothing was run or recorded")


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
    = ",".join(SEARCH_ALGORITHMS),
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
def replay(
    trace: Annotated[Path, typer.Option(help="An MSR or FlashNet trace.")],
    out: Annotated[Path, typer.Option(help="Where to write the replay, in the 7-column FlashNet format.")],
    fmt: Annotated[Optional[str], typer.Option("--format", help="msr, msr-csv or flashnet (default: detected).")] = None,
    device: Annotated[str, typer.Option(help="'loop', or a block device named with --allow-device.")] = "loop",
    allow_device: Annotated[list[str], typer.Option(help="A block device StoreTune may overwrite.")] = [],  # noqa: B006
    speed: Annotated[float, typer.Option(help="Replay at this multiple of the trace's pace; 0: as fast as possible.")]
    = 1.0,
    queue_depth: Annotated[int, typer.Option(help="I/Os in flight at most.")] = 32,
    loop_dir: Annotated[str, typer.Option(help="Where the loop device's sparse file goes.")] = "/var/tmp/storetune",
    loop_size_mib: Annotated[int, typer.Option(help="Size of the loop device.")] = 1024,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be done; touch nothing.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Replay a block trace on a device with O_DIRECT and record every I/O's latency."""
    from runners.device.replay import replay_on_device
    from runners.traces import read_trace, write_flashnet

    loaded = read_trace(trace, fmt)
    result = replay_on_device(loaded, device=device, allow_device=allow_device, loop_dir=loop_dir,
                              loop_size_mib=loop_size_mib, speed=speed, queue_depth=queue_depth, dry_run=dry_run,
                              echo=_literal)
    if result is None:
        return
    write_flashnet(out, result.trace)
    summary = {**result.summary(), "trace": str(trace), "out": str(out), "device": device,
               "speed": speed, "queue_depth": queue_depth}
    if as_json:
        print(json.dumps(summary))
        return
    if result.wrapped:
        console.print(f"{result.wrapped} of {len(loaded)} offsets lay beyond the device and were wrapped modulo its size")
    console.print(f"replayed {summary['ios']} I/Os in {summary['duration_s']} s: mean latency "
                  f"{summary['latency_mean_us']:.0f} us, p99 {summary['latency_p99_us']:.0f} us -> {out}")


@app.command()
def sweep(
    out: Annotated[Path, typer.Option(help="The dataset folder, e.g. datasets/loop-storage-v2.")],
    space: Annotated[str, typer.Option(help="The space to sample.")] = "storage_v2",
    workloads: Annotated[str, typer.Option(help="Comma-separated personalities.")] = "fileserver,varmail,webserver,oltp",
    device: Annotated[str, typer.Option(help="'loop', or a block device named with --allow-device.")] = "loop",
    allow_device: Annotated[list[str], typer.Option(help="A block device StoreTune may format.")] = [],  # noqa: B006
    engine: Annotated[str, typer.Option(help="fio, or filebench if it is on PATH.")] = "fio",
    runtime: Annotated[float, typer.Option(help="Seconds each benchmark runs.")] = 8.0,
    repeats: Annotated[int, typer.Option(help="Measurements per configuration and workload.")] = 2,
    per_stratum: Annotated[int, typer.Option(help="Configurations per file system x I/O scheduler pair.")] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the grid and of fio.")] = 0,
    loop_dir: Annotated[str, typer.Option(help="Where the loop device's sparse file goes.")] = "/var/tmp/storetune",
    loop_size_mib: Annotated[int, typer.Option(help="Size of the loop device.")] = 1024,
    fileset_mib: Annotated[int, typer.Option(help="Largest fileset a personality lays out.")] = 256,
    db: DbOption = None,
) -> None:
    """Measure a grid of configurations for several workloads and write it as a dataset (resumable)."""
    from runners.device.personalities import PERSONALITIES
    from tuner.sweep import SweepSpec, run_sweep, workloads_of

    spec = SweepSpec(out=out, workloads=workloads_of(workloads, list(PERSONALITIES)), space=space, device=device,
                     allow_device=tuple(allow_device), engine=engine, runtime_s=runtime, repeats=repeats,
                     per_stratum=per_stratum, seed=seed, loop_dir=loop_dir, loop_size_mib=loop_size_mib,
                     fileset_mib=fileset_mib, command=["storetune", *sys.argv[1:]])
    history = _history(db)
    state: dict[str, Any] = {}

    def started(workload: str, campaign: Campaign) -> None:
        if state.get("progress"):
            state["progress"].__exit__(None, None, None)
        done = campaign.summary().evaluated
        title = f"sweep {workload} (campaign {campaign.id})"
        state["progress"] = CampaignProgress(err, title, campaign.record.budget, done).__enter__()

    try:
        manifest = run_sweep(history, spec, on_trial=lambda r: state["progress"].update(r), on_campaign=started)
    finally:
        if state.get("progress"):
            state["progress"].__exit__(None, None, None)
    console.print(f"dataset: {manifest.parent / 'measurements.csv'}  manifest: {manifest}")


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
