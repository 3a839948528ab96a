"""The offline comparison of search algorithms on an exhaustive table."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from storetune.api.cli import render
from storetune.api.cli.common import (
    DbOption, ExecutorOpt, JsonOption, MaxRetriesOpt, UserError, console, err, executor_for, interrupted_status,
    open_history, table_settings,
)
from storetune.api.cli.export import write_comparison
from storetune.api.cli.progress import ComparisonProgress
from storetune.tuner import SEARCH_ALGORITHMS


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
    stop_at_near_optimal: Annotated[bool, typer.Option(
        "--stop-at-near-optimal", help="Stop each seed at its first near-optimal configuration: evaluations to "
        "near-optimal and success rates stay exact and cost far less; what needs the whole budget (best mean "
        "at budget, instantaneous and best-so-far curves, GA diversity) is left out.")] = False,
    judge: Annotated[list[Path], typer.Option(
        help="Judge near-optimality on another table of the same configurations: re-measured with more repeats, or "
             "a generated table's noiseless truth. The searches still see --dataset's repeats.")] = [],  # noqa: B006
    workers: Annotated[int, typer.Option(help="Seeds run at once, in worker processes or Ray tasks (default: one "
                                              "per core, or the Ray cluster's CPUs).")] = 0,
    executor_kind: ExecutorOpt = None,
    max_retries: MaxRetriesOpt = 2,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Go on with the comparison of these very settings and table that the history holds "
        "(an interrupted one), measuring only the seeds it did not finish.")] = False,
    out: Annotated[Optional[Path], typer.Option(help="Folder for summary.json and CSV files.")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Compare algorithms offline on an exhaustive table: success rate by evaluation, evaluations to near-optimal."""
    from storetune.tuner.search.compare import CompareSpec, Comparison, Variant  # scipy: loaded only for this command
    if workers < 0:
        raise UserError(f"--workers must be 1 or more (0: one per core), not {workers}")
    spec = CompareSpec(
        runner_settings=table_settings(dataset, context, metric),
        variants=tuple(Variant.parse_list(algorithms)),
        seeds=seeds, budget=budget, within=within, repeats=repeats, metric=metric,
        direction=direction, first_seed=first_seed, stop_at_near_optimal=stop_at_near_optimal,
        judge=tuple(str(p) for p in judge) or None,
    )
    prepared = Comparison.prepare(spec)  # a missing or malformed table is refused before the history is opened
    executor = executor_for(executor_kind, workers or None, max_retries)
    executor.start()  # join the cluster before the comparison is recorded: a refusal leaves nothing behind
    history = open_history(db, migrate=True)
    comparison, notes = Comparison.find_or_create(history, spec, resume=resume, prepared=prepared)
    for note in notes:
        err.print(note, highlight=False, soft_wrap=True)
    recorded = len(history.comparison_campaigns(comparison.id))
    title = f"comparison {comparison.id} on {comparison.runner.label()}"
    try:
        with ComparisonProgress(err, title, seeds * len(spec.variants), recorded) as progress:
            results = comparison.run(executor, on_seed=progress.update)
    except KeyboardInterrupt:  # recorded as interrupted by the run; it used to end without a word
        err.print(f"interrupted: comparison {comparison.id} stopped; the seeds it finished are in the history: "
                  "run the same command with --resume to go on from them", highlight=False, soft_wrap=True)
        if as_json:  # a script still gets its last line: which comparison, and that it stopped
            print(json.dumps({"comparison": comparison.id, "state": "interrupted", "executor": executor.describe()}))
        sys.exit(interrupted_status())
    except Exception as e:  # not left "running" for ever: failed, with why
        history.finish_comparison(comparison.id, "failed", None, f"{type(e).__name__}: {e}")
        raise
    if out is not None:
        for path in write_comparison(out, results, comparison.runs):
            err.print(f"wrote {path}")
    if as_json:
        print(json.dumps({**results, "executor": executor.describe()}))
        return
    console.print(render.comparison_table(results))
