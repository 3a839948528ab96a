"""Does a workload's nearest known neighbour tell us where to start? Leave one workload out of
StoreTune's own dataset (four workloads on one space), recommend from the other three, and measure
what --warm-start similar buys against a cold start.

For each held-out workload W:
  1. a history holds one campaign per other workload that measured each of its configurations once
     (random search over the whole table), and the dataset's fingerprints of all four;
  2. ``recommend`` ranks the three by fingerprint distance to W's; the nearest one's best configuration
     is judged by W's table mean: within 5% of W's best or not (``--within``);
  3. over ``--seeds`` seeds, the same algorithm tunes W cold and with ``--warm-start similar`` (each run in
     its own copy of that history, so no run sees another's trials), and each run's evaluations to the
     first near-optimal configuration of W (within ``--within`` of W's best table mean) are counted;
     censored at the budget.
It prints, per workload, the nearest workload and its distance, the recommendation's share of W's best,
the cold and warm medians (IQR) and success at budget, and the median of the paired savings (cold minus
warm, a censored run counting budget + 1) with a bootstrap 95% interval.

    .venv/bin/python bench/warm_start.py --seeds 40 --budget 100 --workers 2                  # random: 9 min
    .venv/bin/python bench/warm_start.py --seeds 40 --budget 100 --workers 2 --algorithm sa

Random search by default: with the same seed, a cold and a warm run differ only by the configurations
the warm start measures first, so the saving is the warm start's own. ``auto`` takes about 85 s per
campaign on this space (its GP), 20 seeds x 4 workloads x 2 about an hour on 2 cores.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from storetune.runners import make_runner  # noqa: E402
from storetune.runners.fingerprint import dataset_fingerprint  # noqa: E402
from storetune.tuner import Campaign, CampaignSpec, History  # noqa: E402
from storetune.tuner.analysis.convergence import evaluations_to_hit, near_optimal  # noqa: E402
from storetune.tuner.analysis.workloads import recommend  # noqa: E402


def settings(dataset: Path, workload: str, metric: str) -> dict:
    return {"dataset": [str(dataset)], "context": {"workload": workload}, "metric": metric}


def base_history(path: Path, dataset: Path, others: list[str], metric: str) -> None:
    """One campaign per other workload that measured every configuration once."""
    history = History(f"sqlite:///{path}")
    for w in others:
        runner = make_runner("dataset", settings(dataset, w, metric))
        size = len(runner.table.means(metric))
        Campaign.create(history, CampaignSpec("dataset", settings(dataset, w, metric), algorithm="random",
                                              metric=metric, budget=size, seed=0)).run()
    history.close()


def one_run(task: tuple) -> int | None:
    """Evaluations to W's first near-optimal configuration in one campaign (None: not by the budget)."""
    base, scratch, dataset, workload, metric, algorithm, budget, seed, warm, within = task
    path = Path(scratch) / f"{workload}-{seed}-{warm}.sqlite"
    shutil.copy(base, path)
    history = History(f"sqlite:///{path}")
    try:
        spec = CampaignSpec("dataset", settings(dataset, workload, metric), algorithm=algorithm, metric=metric,
                            budget=budget, seed=seed, warm_start=warm)
        campaign = Campaign.create(history, spec)
        campaign.run()
        runner = campaign.runner
        targets = near_optimal(runner.table.means(metric), campaign.objective.direction, within)
        trials = history.trials(campaign.id)
        return evaluations_to_hit([runner.space.validate(t.config) for t in trials], targets)
    finally:
        history.close()
        path.unlink(missing_ok=True)


def summary(hits: list[int | None], budget: int) -> str:
    x = np.array([budget + 1 if h is None else h for h in hits], dtype=float)
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    success = np.mean([h is not None for h in hits])
    return f"{med:g} ({q1:g}-{q3:g}), success {success:.2f}"


def saving(cold: list[int | None], warm: list[int | None], budget: int, rng: np.random.Generator) -> str:
    c = np.array([budget + 1 if h is None else h for h in cold], dtype=float)
    w = np.array([budget + 1 if h is None else h for h in warm], dtype=float)
    d = c - w
    boots = np.median(d[rng.integers(0, len(d), (5000, len(d)))], axis=1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return f"{np.median(d):+g} [{lo:+g}, {hi:+g}]"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", type=Path, default=ROOT / "datasets" / "loop-storage-v3")
    p.add_argument("--metric", default="ops_per_s")
    p.add_argument("--algorithm", default="random")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--budget", type=int, default=100)
    p.add_argument("--within", type=float, default=0.95, help="near-optimal: within this share of the best")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    dataset = args.dataset.resolve()
    table = make_runner("dataset", settings(dataset, "fileserver", args.metric)).table
    workloads = sorted({str(c["workload"]) for c in _contexts(dataset)}) or [table.context.get("workload")]
    missing = [w for w in workloads if dataset_fingerprint(dataset, w) is None]
    if missing:
        sys.exit(f"{dataset} has no fingerprint of {', '.join(missing)} (fingerprints.json): measure them with "
                 "storetune fingerprint --workload NAME --device loop --json")
    print(f"{dataset.name}: {len(workloads)} workloads, {args.algorithm}, {args.seeds} seeds x {args.budget} "
          f"evaluations, near-optimal within {1 - args.within:.0%} of each workload's best {args.metric}")
    rng = np.random.default_rng(0)
    hits_total, savings = 0, []
    with tempfile.TemporaryDirectory() as scratch, ProcessPoolExecutor(args.workers) as pool:
        for held in workloads:
            others = [w for w in workloads if w != held]
            base = Path(scratch) / f"base-{held}.sqlite"
            base_history(base, dataset, others, args.metric)
            history = History(f"sqlite:///{base}", migrate=False)
            runner = make_runner("dataset", settings(dataset, held, args.metric))
            means = runner.table.means(args.metric)
            direction = runner.metrics()[args.metric] or "max"
            best = max(means.values()) if direction == "max" else min(means.values())
            targets = near_optimal(means, direction, args.within)
            found = recommend(history, dataset_fingerprint(dataset, held)["features"], runner.space, k=3,
                              within=args.within, metric=args.metric)
            history.close()
            nearest = found.neighbours[0]
            got = means.get(runner.space.validate(nearest.best["config"]))
            share = got / best if got is not None and direction == "max" else (best / got if got else float("nan"))
            hit = runner.space.validate(nearest.best["config"]) in targets
            hits_total += hit
            tasks = [(str(base), scratch, str(dataset), held, args.metric, args.algorithm, args.budget, s, warm,
                      args.within) for warm in ("none", "similar") for s in range(args.seeds)]
            results = list(pool.map(one_run, tasks))
            cold, warm = results[:args.seeds], results[args.seeds:]
            order = ", ".join(f"{n.workload_name} {n.distance:.2f}" for n in found.neighbours)
            print(f"\n{held}: {len(targets)} of {len(means)} configurations near-optimal; nearest: {order}")
            print(f"  {nearest.workload_name}'s best on {held}: {share:.3f} of its best -> "
                  f"{'near-optimal' if hit else 'not near-optimal'}")
            print(f"  cold:    {summary(cold, args.budget)}")
            print(f"  similar: {summary(warm, args.budget)}")
            print(f"  saved (cold - similar, median of pairs): {saving(cold, warm, args.budget, rng)}")
            savings.append(np.median([(args.budget + 1 if c is None else c) - (args.budget + 1 if w is None else w)
                                      for c, w in zip(cold, warm)]))
    print(f"\nthe nearest workload's best was near-optimal on {hits_total} of {len(workloads)} held-out workloads; "
          f"median saving per workload: {', '.join(f'{s:+g}' for s in savings)}")


def _contexts(dataset: Path) -> list[dict]:
    import csv

    with (dataset / "measurements.csv").open() as f:
        return [{"workload": row["workload"]} for row in csv.DictReader(f)]


if __name__ == "__main__":
    main()
