"""Benchmark: adaptive repeats (tuner/intensify.py) against fixed repeats, at equal total measurements.

    .venv/bin/python bench/adaptive_repeats.py [--seeds 50] [--measurements 60,120] [--datasets postgresql,own-v3]

On tables whose configurations were measured more than once (PostgreSQL: 22 repeats each; the project's
loop-storage-v3: 3 repeats; loop-storage-v2: 2), a measurement is one recorded repeat drawn at random,
so a search sees the noise a user does. Each strategy spends the same number of measurements M:
fixed repeats r (M / r configurations, each measured r times), or adaptive repeats (one measurement per
new configuration, challengers re-measured up to a cap; each re-measurement one of the M). What a user
gets is the configuration the campaign reports as best (``analysis.best_trial``); what it is worth is
that configuration's table mean (the mean of all its recorded repeats). Per table and strategy: the
mean and median regret of that mean against the table's best (in % of the best), the share of seeds
whose reported best is near-optimal (the same per-table threshold as bench/compare_algorithms.py), and
for adaptive strategies the paired difference in regret against each fixed one with a bootstrap 95%
interval (negative: adaptive reports better configurations).
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.compare_algorithms import DATASETS, own_datasets, threshold  # noqa: E402
from storetune.runners import make_runner  # noqa: E402
from storetune.search_spaces import Config  # noqa: E402
from storetune.tuner.analysis.summary import best_trial  # noqa: E402
from storetune.tuner.history.memory import MemoryStore
from storetune.tuner.search.loop import run_loop  # noqa: E402
from storetune.tuner.objectives.objective import Objective  # noqa: E402
from storetune.tuner.algorithms.registry import DEFAULT_ALGORITHM, make_tuner  # noqa: E402


@dataclass(frozen=True)
class Strategy:
    repeats: int
    max_repeats: int | None = None

    @property
    def label(self) -> str:
        return f"adaptive 1..{self.max_repeats}" if self.max_repeats else f"fixed x{self.repeats}"


@dataclass(frozen=True)
class Task:
    settings: dict
    algorithm: str
    strategy: Strategy
    measurements: int
    seed: int


_RUNNERS: dict[str, object] = {}


def run(task: Task) -> tuple[Task, dict, float]:
    """One seeded campaign in memory: the reported best configuration and the measurements it took."""
    key = repr(sorted(task.settings.items()))
    runner = _RUNNERS.setdefault(key, make_runner("dataset", task.settings))
    objective = Objective.resolve(runner.metrics(), task.settings.get("metric"), None)
    s = task.strategy
    budget = task.measurements if s.max_repeats else task.measurements // s.repeats
    tuner = make_tuner(task.algorithm, runner.space, seed=task.seed, direction=objective.direction)
    store = MemoryStore()
    run_loop(campaign_id=0, tuner=tuner, runner=runner, objective=objective, store=store, budget=budget,
             repeats=s.repeats, batch_size=1, seed=task.seed, max_repeats=s.max_repeats)
    trials = store.trials()
    best = best_trial(trials, objective.direction, most_measured=s.max_repeats is not None)
    return task, best.config, float(sum(t.runs for t in trials))


def tables(spec: str) -> dict[str, tuple[dict, str]]:
    out: dict[str, tuple[dict, str]] = {}
    for name in filter(None, spec.split(",")):
        if name in DATASETS:
            out[name] = DATASETS[name]
        elif name.startswith("own-"):
            out.update(own_datasets((f"loop-storage-{name[4:]}",)))
        else:
            sys.exit(f"unknown table {name!r}: one of {', '.join(DATASETS)}, own-v2, own-v3")
    return out


def paired_interval(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> tuple[float, float, float]:
    diff = a - b
    samples = [float(np.mean(diff[rng.integers(len(diff), size=len(diff))])) for _ in range(5000)]
    low, high = np.percentile(samples, [2.5, 97.5])
    return float(np.mean(diff)), float(low), float(high)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--measurements", default="60,120", help="total measurements per campaign")
    parser.add_argument("--datasets", default="postgresql,own-v3,own-v2")
    parser.add_argument("--algorithm", default=DEFAULT_ALGORITHM)
    parser.add_argument("--fixed", default="1,2,3", help="fixed repeat counts to compare")
    parser.add_argument("--caps", default="3,5", help="adaptive repeats' caps (each starts at 1 run)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    strategies = ([Strategy(int(r)) for r in args.fixed.split(",")]
                  + [Strategy(1, int(c)) for c in args.caps.split(",")])
    rng = np.random.default_rng(0)
    summary: list[tuple[str, int, str, float]] = []
    with ProcessPoolExecutor(args.workers) as pool:
        for key, (settings, title) in tables(args.datasets).items():
            runner = make_runner("dataset", settings)
            objective = Objective.resolve(runner.metrics(), settings.get("metric"), None)
            means = runner.table.means(objective.metric)
            best = min(means.values()) if objective.direction == "min" else max(means.values())
            within, near, size = threshold(settings)
            noise = runner.table.noise(objective.metric) if hasattr(runner.table, "noise") else None
            print(f"\n== {title} ({objective.metric}, {objective.direction}): {size} configurations, "
                  f"near-optimal within {within:.5g} ({near}); algorithm {args.algorithm}, {args.seeds} seeds"
                  + (f"; repeat noise {noise}" if noise else ""))
            for total in (int(m) for m in args.measurements.split(",")):
                tasks = [Task(settings, args.algorithm, s, total, seed) for s in strategies for seed in range(args.seeds)]
                regret: dict[str, np.ndarray] = {}
                hit: dict[str, float] = {}
                found: dict[Strategy, list[tuple[int, float]]] = {s: [] for s in strategies}
                for task, config, _taken in pool.map(run, tasks, chunksize=4):
                    value = means[Config(config)]
                    found[task.strategy].append((task.seed, value))
                for s in strategies:
                    values = np.array([v for _, v in sorted(found[s])])
                    regret[s.label] = 100 * np.abs(values - best) / abs(best)
                    near_set = np.abs(values - best) / abs(best) <= (1 / within - 1 if objective.direction == "min"
                                                                     else 1 - within) + 1e-12
                    hit[s.label] = float(np.mean(near_set))
                print(f"-- {total} measurements")
                print(f"{'strategy':<16}{'configurations':>16}{'mean regret %':>15}{'median %':>10}{'near-opt':>10}"
                      + "".join(f"{'vs ' + f.label + ' (95% CI)':>30}" for f in strategies if not f.max_repeats))
                for s in strategies:
                    configs = "adaptive" if s.max_repeats else str(total // s.repeats)
                    line = (f"{s.label:<16}{configs:>16}{np.mean(regret[s.label]):>15.3f}"
                            f"{np.median(regret[s.label]):>10.3f}{hit[s.label]:>10.2f}")
                    if s.max_repeats:
                        for f in strategies:
                            if f.max_repeats:
                                continue
                            d, low, high = paired_interval(regret[s.label], regret[f.label], rng)
                            line += f"{f'{d:+.3f} [{low:+.3f}, {high:+.3f}]':>30}"
                            summary.append((title, total, f"{s.label} - {f.label}", d))
                    print(line)
    print("\nmean regret difference (percentage points of the best; negative: adaptive reports better):")
    for title, total, pair, d in summary:
        print(f"  {title:<34}{total:>5} measurements  {pair:<28}{d:+.3f}")


if __name__ == "__main__":
    main()
