"""Measure short, promote the promising: device-seconds to a near-optimal configuration, offline, on a table of
per-second series (a dataset measured with `storetune sweep` at a long run length, e.g. datasets/loop-storage-ts).

    .venv/bin/python bench/multifidelity.py --dataset datasets/loop-storage-ts --seeds 100 --workers 2 --json

Each evaluation replays one drawn repeat of the configuration (the dataset runner): at a run length t, the mean of
its first t seconds; whole, the repeat's recorded figures. The contestants, each given the same device-seconds:
- ``auto`` at full length, and random search at full length (``tune`` as it is by default);
- ``auto`` with ASHA over the run length (``tune --fidelity asha``: rungs ``min_run``, x ``eta``, ... the whole run;
  once the space is exhausted, the stopped runs measured whole);
- the same with repeats as the second fidelity, ``auto+asha+repeats`` (``tune --fidelity asha --max-repeats N``): a
  whole run that looks better than the incumbent (once the space is exhausted, one within noise of it) is measured
  again, whole, and the best mean of the most-measured is
  reported;
- Optuna's TPE with its ``HyperbandPruner``, told each second's mean as an intermediate value (the natural peer),
  set up as its users would: its defaults (a shortest budget of 1 step, reduction factor 3), told the run's length;
- Optuna's TPE with its ``WilcoxonPruner`` over repeats, told each whole repeat as a step.
A seed succeeds once it has measured a near-optimal configuration *at full length* (a run stopped short has not
shown that it is one); near-optimal is judged on each configuration's full-length mean over all its repeats. Its
cost is the device-seconds spent until then (every run's length, short ones too, plus ``--setup-s`` a run: mkfs,
the file layout and the teardown, which a run stopped at its first second pays in full). At the end of the budget, the
configuration a contestant reports (its best whole run) is checked against the same truth. A contestant's choices
do not depend on what a run costs, so ``--setup-s 0,8.8`` reads both setups' figures off the same trajectories.
A long report can be stopped and resumed with ``--cache FILE`` (each finished seed is a line of it).

Also printed: the Spearman correlation, per workload, between each configuration's mean over its first t seconds
and its full-length mean (both over its repeats), for t = 1, 3 and 10: whether short runs rank as long ones do.
Evaluation counts and device-seconds do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import code_fingerprint  # noqa: E402

MEASURING = ("tuner", "search_spaces", "runners", "bench/multifidelity.py", "bench/optuna_tpe.py",
             "bench/optuna_pruners.py")  # --cache's code
CONTESTANTS = ("auto", "random", "auto+asha", "auto+asha+repeats", "optuna-hyperband", "optuna-wilcoxon")
HEADLINE = {"auto+asha": "asha", "auto+asha+repeats": "asha_repeats"}  # ASHA's contestants: their headline prefix
RANK_LENGTHS = (1, 3, 10)


@dataclass(frozen=True)
class Task:
    dataset: str
    workload: str
    contestant: str
    seed: int
    budget_s: float  # the longest budget of the setups (the trajectory goes on until every setup's is spent)
    eta: float
    min_run_s: float
    metric: str
    direction: str
    targets: frozenset  # near-optimal configurations (full-length mean over every repeat)
    budget_runs: float = 0.0  # each setup's budget: this many whole runs, each with its setup
    full_s: float = 0.0
    setups: tuple[float, ...] = (0.0,)  # what each run costs the device besides its timed seconds
    burn_in: int = 0  # auto+asha's rungs: whole runs before any stops one, and the best whole runs they must pass
    guard: int = 0
    max_repeats: int | None = None  # auto+asha+repeats: a finalist's whole runs (adaptive repeats)

    @property
    def key(self) -> tuple[str, str, int]:
        return self.workload, self.contestant, self.seed

    def budget_for(self, setup_s: float) -> float:
        return self.budget_runs * (self.full_s + setup_s)

    def spent_all(self, spent: dict[float, float]) -> bool:
        """Every setup's budget is spent (no trial starts then)."""
        return all(spent[s] >= self.budget_for(s) for s in self.setups)


@dataclass(frozen=True)
class Step:
    """One trial of a contestant's trajectory: its runs' timed seconds, its whole value (None: stopped short or
    failed) and whether its configuration is near-optimal. A setup's figures are read off the trajectory
    (``Trajectory.under``): the contestant's choices do not depend on what a run costs, only where it stops."""
    lengths: tuple[float, ...]
    value: float | None  # a re-measured trial's: the mean of its whole runs so far
    target: bool
    stopped: bool = False
    trial: int | None = None  # the trial's number (None: each step is its own trial)
    remeasured: bool = False  # the step measured an earlier trial again (adaptive repeats)


@dataclass
class Run:
    workload: str
    contestant: str
    seed: int
    hit_s: float | None  # device-seconds spent when a near-optimal configuration was first measured whole
    spent_s: float
    evaluations: int
    reported_near_optimal: bool  # the best whole run at the end is a near-optimal configuration
    stopped: int = 0  # runs stopped short
    notes: list[str] = field(default_factory=list)


def replay(task: Task, steps: Sequence[Step], setup_s: float) -> Run:
    """A trajectory's figures with ``setup_s`` a run: a trial starts while the budget is not spent, as
    `tune --budget-seconds` spends it; the cost is the device-seconds spent when a near-optimal configuration was
    first measured whole; the reported best is the campaign's: the best whole trial within the budget, among those
    measured the most times where finalists were measured again (``analysis.best_trial``'s rule)."""
    from storetune.tuner.objectives.intensify import Standing, incumbent

    budget, spent, hit, evaluations, stopped = task.budget_for(setup_s), 0.0, None, 0, 0
    whole: dict[int, Standing] = {}  # each trial measured whole: its whole runs and value so far
    target: dict[int, bool] = {}
    for i, step in enumerate(steps):
        if spent >= budget:
            break
        evaluations += 1
        spent += sum(length + setup_s for length in step.lengths)
        stopped += step.stopped
        if step.value is not None:
            trial = i if step.trial is None else step.trial
            runs = whole[trial].runs + 1 if step.remeasured and trial in whole else 1
            whole[trial], target[trial] = Standing(trial, runs, step.value), step.target
            if hit is None and step.target:
                hit = spent
    best = incumbent(whole.values(), task.direction)
    return Run(task.workload, task.contestant, task.seed, hit, spent, evaluations,
               best is not None and target[best.trial], stopped)


def run_task(task: Task) -> dict[float, Run]:
    """One seed of one contestant on one workload, in a worker process: its figures under each setup."""
    from storetune.tuner.execution.jobs import worker_runner

    _, runner = worker_runner("dataset", {"dataset": [task.dataset], "context": {"workload": task.workload},
                                          "metric": task.metric})
    if task.contestant.startswith("optuna"):
        from optuna_pruners import pruned_tpe

        steps = [Step(*step) for step in pruned_tpe(task, runner)]
    else:
        steps = _ours(task, runner)
    return {s: replay(task, steps, s) for s in task.setups}


def runner_for(dataset: str, workload: str, metric: str) -> Any:
    from storetune.runners import make_runner

    return make_runner("dataset", dataset=[dataset], context={"workload": workload}, metric=metric)


def _ours(task: Task, runner: Any) -> list[Step]:
    from storetune.search_spaces import Config
    from storetune.tuner.algorithms.registry import make_tuner
    from storetune.tuner.history.memory import MemoryStore
    from storetune.tuner.objectives.fidelity import schedule
    from storetune.tuner.objectives.objective import Objective
    from storetune.tuner.search.loop import TrialResult, run_loop

    algorithm = task.contestant.split("+")[0]
    tuner = make_tuner(algorithm, runner.space, seed=task.seed, direction=task.direction)
    rungs = schedule(runner, task.eta, task.min_run_s, burn_in=task.burn_in, guard=task.guard) \
        if task.contestant in HEADLINE else None
    store, steps = MemoryStore(), []
    spent = dict.fromkeys(task.setups, 0.0)

    def on_trial(result: TrialResult) -> None:  # device-seconds as they are spent (a trial's run lengths)
        trial = store.trials(measurements=True)[result.number]
        runs = list(trial.measurements or ())[-1:] if result.remeasured else list(trial.measurements or ())
        lengths = tuple(m.env.get("run_length_s", m.duration_s) for m in runs)  # this evaluation's runs only
        whole = trial.status == "SUCCEEDED" and trial.value is not None
        steps.append(Step(lengths, trial.value if whole else None, Config(result.config) in task.targets,
                          trial.status == "STOPPED", result.number, result.remeasured))
        for s in spent:
            spent[s] += sum(length + s for length in lengths)

    # the budget as `tune --budget-seconds` is told it and spends it: its timed seconds (the loop counts run lengths;
    # no trial starts once they are spent), so that the kept end of adaptive repeats is where a campaign has it. A
    # setup's budget, counted with its setups, is spent no later: a run is at most ``full_s`` long.
    run_loop(campaign_id=0, tuner=tuner, runner=runner, objective=Objective(task.metric, task.direction),
             store=store, budget=10**6, repeats=1, batch_size=1, seed=task.seed, on_trial=on_trial,
             fidelity=rungs, max_repeats=task.max_repeats if rungs is not None else None,
             budget_s=task.budget_for(0.0), stop=lambda: task.spent_all(spent))
    return steps


class Cache:
    """Finished seeds, one JSON line each after a first line of the settings they were run with. Hand-written: the
    bench's only state, a file it appends to."""

    def __init__(self, path: str, settings: dict[str, Any]):
        self.path, self.done = Path(path), {}
        if self.path.is_file() and self.path.stat().st_size:
            lines = self.path.read_text().splitlines()
            try:
                header = json.loads(lines[0])["settings"]
            except (ValueError, KeyError, TypeError):
                raise SystemExit(f"{path}: line 1 is not this bench's settings: give another --cache") from None
            differ = sorted(k for k in settings.keys() | header.keys() if settings.get(k) != header.get(k))
            if differ:
                raise SystemExit(f"{path} was written with other settings ({', '.join(differ)}): give another --cache")
            if not self.path.read_bytes().endswith(b"\n"):  # cut short by a stop: the next seed starts a line
                with self.path.open("a") as f:
                    f.write("\n")
            for number, line in enumerate(lines[1:], start=2):
                try:
                    entry = json.loads(line)
                    runs = {float(s): Run(**r) for s, r in entry.items()}
                except (ValueError, TypeError):  # a line cut short by a stop: its seed runs again
                    print(f"{path}:{number}: not a finished seed, run again", file=sys.stderr)
                    continue
                first = next(iter(runs.values()))
                self.done[(first.workload, first.contestant, first.seed)] = runs
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"settings": settings}) + "\n")

    def add(self, runs: dict[float, Run]) -> None:
        from dataclasses import asdict

        with self.path.open("a") as f:
            f.write(json.dumps({f"{s!r}": asdict(r) for s, r in runs.items()}) + "\n")


def prefix_means(runner: Any, metric: str, seconds: float) -> dict[Any, float]:
    """Each configuration's mean over the first ``seconds`` of its runs, over the repeats whose series are that long."""
    out = {}
    for config, series in runner.table.series.items():
        kept = [s for s in series if s is not None and metric in s.values and s.seconds >= seconds]
        if kept:
            out[config] = float(np.mean([s.mean(metric, seconds) for s in kept]))
    return out


def spearman(a: dict[Any, float], b: dict[Any, float]) -> tuple[int, float | None]:
    """Spearman's rho (scipy's) over the configurations both hold, and how many they are."""
    from scipy.stats import spearmanr

    common = [c for c in a if c in b]
    rho = spearmanr([a[c] for c in common], [b[c] for c in common]).statistic if len(common) > 2 else math.nan
    return len(common), None if not np.isfinite(rho) else round(float(rho), 3)


def rank_correlation(runner: Any, metric: str, lengths: Sequence[int] = RANK_LENGTHS) -> dict[str, float | None]:
    """Spearman's rho between each configuration's mean over its first t seconds and its full-length mean, both
    over its repeats."""
    full = runner.table.means(metric)
    return {str(t): spearman(prefix_means(runner, metric, t), full)[1] for t in lengths}


def best_rank(runner: Any, metric: str, direction: str, lengths: Sequence[int] = RANK_LENGTHS) -> dict[str, int]:
    """Where the configuration with the best full-length mean ranks (1: first) by its mean over the first t
    seconds: a rung at t that ranks it low stops the run a search is looking for."""
    full = runner.table.means(metric)
    best = (max if direction == "max" else min)(full, key=full.get)
    out = {}
    for t in lengths:
        means = prefix_means(runner, metric, t)
        if best in means:
            out[str(t)] = 1 + sum((v > means[best]) if direction == "max" else (v < means[best])
                                  for v in means.values())
    return out


def agreement(runner: Any, other: Any, metric: str, seconds: float) -> dict[str, Any]:
    """Spearman's rho between the ``seconds``-second prefix means of ``runner``'s series (over its repeats) and
    ``other``'s means (a fixed-length dataset measured with the same protocol), over the configurations both hold."""
    count, rho = spearman(prefix_means(runner, metric, seconds), other.table.means(metric))
    return {"configurations": count, "spearman": rho}


def median_ci(values: Sequence[float], rng: np.random.Generator, draws: int = 2000) -> tuple[float, float, float]:
    """The median, with a bootstrap 95% interval."""
    a = np.asarray(values, dtype=float)
    boot = np.median(rng.choice(a, size=(draws, len(a))), axis=1)
    return float(np.median(a)), float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))


def summarize(runs: Sequence[Run], budget_s: float) -> dict[str, Any]:
    """Per contestant: success (share of seeds that found a near-optimal configuration within the budget), the
    median device-seconds to find one (a seed that did not counts as more than the budget), and how often the
    reported best is near-optimal."""
    rng = np.random.default_rng(0)
    runs = sorted(runs, key=lambda r: r.seed)  # the bootstrap's draws do not depend on the order seeds ended in
    out: dict[str, Any] = {}
    for name in dict.fromkeys(r.contestant for r in runs):
        mine = [r for r in runs if r.contestant == name]
        cost = [r.hit_s if r.hit_s is not None else 2 * budget_s for r in mine]
        median, low, high = median_ci(cost, rng)
        out[name] = {"seeds": len(mine), "success": round(sum(r.hit_s is not None for r in mine) / len(mine), 3),
                     "median_s": median if median <= budget_s else None, "ci_s": [low, high],
                     "reported_near_optimal": round(sum(r.reported_near_optimal for r in mine) / len(mine), 3),
                     "evaluations": float(np.median([r.evaluations for r in mine])),
                     "stopped": float(np.median([r.stopped for r in mine]))}
    return out


def ratio(a: dict[str, Any], b: dict[str, Any], budget_s: float) -> float | None:
    """Median device-seconds of ``a`` over ``b``'s (a median beyond the budget counts as twice the budget)."""
    x, y = (s["median_s"] if s["median_s"] is not None else 2 * budget_s for s in (a, b))
    return round(x / y, 3) if y else None


def main(argv: Sequence[str] | None = None) -> int:
    from storetune.tuner.objectives.fidelity import BURN_IN, GUARD

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="datasets/loop-storage-ts", help="A long table with series:<metric> "
                        "columns (a folder with a manifest, or its measurements.csv).")
    parser.add_argument("--workloads", default=None, help="Comma-separated (default: every workload it holds).")
    parser.add_argument("--metric", default="ops_per_s")
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--budget-runs", type=float, default=20, help="The device-seconds budget, in whole runs "
                        "(each with its setup).")
    parser.add_argument("--eta", type=float, default=3.0, help="auto+asha's factor between rungs (Optuna's "
                        "Hyperband keeps its own defaults).")
    parser.add_argument("--min-run", type=float, default=1.0, help="auto+asha's shortest rung, in seconds.")
    parser.add_argument("--burn-in", type=int, default=BURN_IN, help="auto+asha: whole runs before any rung stops a "
                        "run (tune's default).")
    parser.add_argument("--guard", type=int, default=GUARD, help="auto+asha: a rung stops runs only while the best "
                        "this many whole runs would pass it (tune's default; 0: plain ASHA).")
    parser.add_argument("--max-repeats", type=int, default=2, help="auto+asha+repeats: measure a whole run that "
                        "looks better than the incumbent again, whole, up to this many runs, and once the space is "
                        "exhausted those within noise of it (tune --max-repeats; the reported best is then the best "
                        "mean of the most-measured).")
    parser.add_argument("--within", type=float, default=None, help="Near-optimal: within this fraction of the best "
                        "(default: the share rule of bench/compare_algorithms.py, 0.1%% to 1%% of the table, at least one)")
    parser.add_argument("--setup-s", default="0", help="Device-seconds each run costs besides its timed "
                        "seconds (mkfs, the file layout, the cache drop, the teardown), counted in every contestant's "
                        "cost and budget: a short run still pays them. 0: the timed seconds only. Several, "
                        "comma-separated (0,8.8): each one's figures from the same trajectories, the first at the top "
                        "of the JSON object and the others under `with_setup`.")
    parser.add_argument("--contestants", default=",".join(CONTESTANTS))
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--agree", default=None, help="A fixed-length dataset measured with the same protocol "
                        "(datasets/loop-storage-v3): the Spearman coefficient of its means against the series' "
                        "prefixes of its run length, where the two hold the same configurations.")
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    parser.add_argument("--cache", default=None, help="A JSON-lines file each finished seed is added to; a rerun with "
                        "the same settings and code reads it and runs only the seeds it lacks, so that a long report "
                        "can be stopped and resumed. It refuses a file written with other settings or code.")
    args = parser.parse_args(argv)
    try:
        setups = tuple(dict.fromkeys(float(v) for v in args.setup_s.split(",")))
    except ValueError:
        raise SystemExit(f"--setup-s {args.setup_s}: seconds, or comma-separated seconds (0,8.8)") from None
    if any(not (math.isfinite(v) and v >= 0) for v in setups):
        raise SystemExit(f"--setup-s {args.setup_s}: each must be a finite number of seconds, 0 or more")

    from storetune.tuner.analysis.convergence import near_optimal, within_for_share
    from storetune.tuner.execution.local import ProcessExecutor

    dataset = str(Path(args.dataset))
    manifest = Path(dataset) / "manifest.json"
    if args.workloads is None and not manifest.is_file():
        raise SystemExit(f"{dataset}: no manifest.json to list its workloads: name them with --workloads")
    workloads = args.workloads.split(",") if args.workloads else json.loads(manifest.read_text())["workloads"]
    unknown = [c for c in args.contestants.split(",") if c not in CONTESTANTS]
    if unknown:
        raise SystemExit(f"--contestants: unknown {', '.join(unknown)}; choose from {', '.join(CONTESTANTS)}")
    tasks, per_workload = [], {}
    for workload in workloads:
        runner = runner_for(dataset, workload, args.metric)
        direction = runner.metrics()[args.metric]
        means = runner.table.means(args.metric)
        within = args.within or within_for_share(means, direction)
        targets = frozenset(near_optimal(means, direction, within))
        full = runner.full_length_s()
        if not full:
            raise SystemExit(f"{dataset}, {workload}: no per-second series: measure it with `storetune sweep` first")
        budget_s = args.budget_runs * (full + max(setups))  # whole runs, each with its setup
        per_workload[workload] = {"configurations": len(means), "near_optimal": len(targets), "within": within,
                                  "run_s": full,
                                  "rank_correlation": rank_correlation(runner, args.metric),
                                  "best_rank": best_rank(runner, args.metric, direction)}
        if args.agree:
            other = runner_for(args.agree, workload, args.metric)
            manifest_other = Path(args.agree) / "manifest.json"
            length = (json.loads(manifest_other.read_text()).get("settings", {}).get("runtime_s", 10)
                      if manifest_other.is_file() else 10)
            per_workload[workload]["agreement"] = {"with": args.agree, "prefix_s": length,
                                                   **agreement(runner, other, args.metric, length)}
        for contestant in args.contestants.split(","):
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                tasks.append(Task(dataset, workload, contestant, seed, budget_s, args.eta, args.min_run, args.metric,
                                  direction, targets, args.budget_runs, full, setups, args.burn_in, args.guard,
                                  args.max_repeats if contestant == "auto+asha+repeats" else None))
    cache = Cache(args.cache, {"dataset": dataset, "metric": args.metric, "eta": args.eta, "min_run_s": args.min_run,
                               "burn_in": args.burn_in, "guard": args.guard, "max_repeats": args.max_repeats,
                               "budget_runs": args.budget_runs, "setups": list(setups), "within": args.within,
                               "code": code_fingerprint(MEASURING)}) if args.cache else None
    runs = [cache.done[t.key] for t in tasks if t.key in cache.done] if cache else []
    executor = ProcessExecutor(args.workers)
    try:
        for run in executor.map_unordered(run_task, [t for t in tasks if not cache or t.key not in cache.done]):
            runs.append(run)
            if cache:
                cache.add(run)
    finally:
        executor.close()
    results = [figures_for(setup, runs, per_workload, args) for setup in setups]
    result = results[0]
    if len(results) > 1:
        result["with_setup"] = {f"{r['setup_s']:g}": r for r in results[1:]}
    if args.json:
        print(json.dumps(result))
        return 0
    for r in results:
        print_figures(r)
    return 0


def figures_for(setup: float, runs: Sequence[dict[float, Run]], per_workload: dict[str, dict[str, Any]],
                args: argparse.Namespace) -> dict[str, Any]:
    """The JSON object for one setup: per workload and contestant, and the headline keys."""
    result: dict[str, Any] = {"dataset": args.dataset, "seeds": args.seeds, "first_seed": args.first_seed,
                              "eta": args.eta, "min_run_s": args.min_run, "burn_in": args.burn_in,
                              "guard": args.guard, "max_repeats": args.max_repeats, "setup_s": setup,
                              "budget_runs": args.budget_runs, "workloads": {}}
    for workload, base in per_workload.items():
        info = {**base, "budget_s": args.budget_runs * (base["run_s"] + setup)}
        info["contestants"] = summarize([r[setup] for r in runs if r[setup].workload == workload], info["budget_s"])
        result["workloads"][workload] = info

    # the headline keys: over workloads, the geometric mean of the per-workload ratios and the mean shares
    def over(key: str, fn: Any) -> float | None:
        values = [fn(w) for w in result["workloads"].values()]
        values = [v for v in values if v is not None]
        return round(float(np.exp(np.mean(np.log(values)))), 3) if values and key == "ratio" else \
            (round(float(np.mean(values)), 3) if values else None)

    def best_optuna(w: dict[str, Any]) -> dict[str, Any] | None:
        peers = [w["contestants"][p] for p in ("optuna-hyperband", "optuna-wilcoxon") if p in w["contestants"]]
        return min(peers, key=lambda s: s["median_s"] if s["median_s"] is not None else math.inf) if peers else None

    c = "contestants"
    for name, key in HEADLINE.items():  # auto+asha's keys always; auto+asha+repeats' where it ran
        if name != "auto+asha" and not any(name in w[c] for w in result["workloads"].values()):
            continue
        result[f"{key}_vs_full"] = over("ratio", lambda w, n=name: ratio(w[c][n], w[c]["auto"], w["budget_s"])
                                        if {n, "auto"} <= set(w[c]) else None)
        result[f"{key}_vs_optuna"] = over("ratio", lambda w, n=name: ratio(w[c][n], best_optuna(w), w["budget_s"])
                                          if n in w[c] and best_optuna(w) else None)
        result[f"{key}_success"] = over("share", lambda w, n=name: w[c].get(n, {}).get("success"))
        result[f"{key}_reported_near_optimal"] = over("share", lambda w, n=name: w[c].get(n, {}).get(
            "reported_near_optimal"))
    result["full_success"] = over("share", lambda w: w[c].get("auto", {}).get("success"))
    result["rank_correlation"] = {w: info["rank_correlation"] for w, info in per_workload.items()}
    result["best_rank"] = {w: info["best_rank"] for w, info in per_workload.items()}
    if args.agree:
        result["agreement"] = {w: info["agreement"] for w, info in per_workload.items()}
    return result


def print_figures(result: dict[str, Any]) -> None:
    print(f"=== {result['setup_s']:g} s of setup a run")
    for workload, info in result["workloads"].items():
        print(f"== {workload}: {info['near_optimal']} of {info['configurations']} near-optimal (within "
              f"{info['within']:.4g} of the best), runs of {info['run_s']:g} s, budget {info['budget_s']:g} "
              f"device-seconds; Spearman of t-second and full means: "
              + ", ".join(f"t={t}: {rho}" for t, rho in info["rank_correlation"].items())
              + "; the best whole run's rank at t: " + ", ".join(f"t={t}: {k}" for t, k in info["best_rank"].items()))
        if "agreement" in info:
            a = info["agreement"]
            print(f"   its {a['prefix_s']:g}-second prefixes against {a['with']}: Spearman {a['spearman']} over "
                  f"{a['configurations']} configurations")
        print(f"{'contestant':18} {'success':>8} {'median s':>9} {'95% CI':>16} {'best near-opt':>14} "
              f"{'evals':>6} {'stopped':>8}")
        for name, s in info["contestants"].items():
            median = "> budget" if s["median_s"] is None else f"{s['median_s']:.0f}"
            low, high = s["ci_s"]
            interval = f"[{low:.0f}, {high:.0f}]"
            print(f"{name:18} {s['success']:8.2f} {median:>9} {interval:>16} "
                  f"{s['reported_near_optimal']:14.2f} {s['evaluations']:6.0f} {s['stopped']:8.0f}")
    for key in [k for k in result if k.startswith("asha") or k == "full_success"]:
        print(f"{key}: {result[key]}")


if __name__ == "__main__":
    raise SystemExit(main())
