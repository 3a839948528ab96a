"""Benchmark: StoreTune's Pareto search (nsga2, random) against Optuna's NSGA-II on two-objective tables.

    .venv/bin/pip install -e '.[bench]'       # Optuna, the peer
    .venv/bin/python bench/pareto.py [--seeds 20] [--budget 100] [--tables SS-J,SS-O,SS-A]

The three two-objective tables of ../shared/datasets/moot_configs (SS-J: Throughput+ and Latency-, SS-O:
Performance- and Cpu-, SS-A: Throughput+ and Latency-). Each seed runs one campaign of each algorithm
through StoreTune's loop (`pareto:` objective, the dataset runner drawing the table's rows). What a
campaign reached is the hypervolume of the table means of the configurations it evaluated, as a share
of the true front's (the table's non-dominated means); every algorithm and the true front use one
reference point per table: the true front's nadir moved out by 10% of the front's extent (``MARGIN``). Per table: the true
front's size and hypervolume, each algorithm's median share at the budget with its IQR, and the ratio
of medians nsga2 / Optuna's NSGA-II (with its default population of 50, and with nsga2's 10) with a paired
bootstrap 95% interval over the seeds (of means where the peer's median share is 0).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from storetune.runners import make_runner  # noqa: E402
from storetune.search_spaces import Config  # noqa: E402
from storetune.tuner.history.memory import MemoryStore
from storetune.tuner.search.loop import run_loop  # noqa: E402
from storetune.tuner.objectives.objective import MultiObjective  # noqa: E402
from storetune.tuner.analysis.pareto import hypervolume, non_dominated  # noqa: E402
from storetune.tuner.algorithms.registry import make_tuner, register  # noqa: E402

MOOT = ROOT.parent / "shared" / "datasets" / "moot_configs"
TABLES = {"SS-J": ("Throughput", "Latency"), "SS-O": ("Performance", "Cpu"), "SS-A": ("Throughput", "Latency")}
PEER = "optuna-nsga2"  # Optuna's defaults: a population of 50, two generations in 100 evaluations
PEER_SMALL = "optuna-nsga2[10]"  # with nsga2's population of 10
PARAMS = {PEER_SMALL: {"population_size": 10}}
OURS = ("nsga2", "random")
# The reference point: the true front's nadir (its worst value of each metric) moved out by this share of
# the front's extent, so that its extreme points count. The table's worst point would make every search
# look alike: a few fair configurations already cover 90% of the volume to it.
MARGIN = 0.1


def table_truth(name: str) -> tuple[object, MultiObjective, dict[Config, tuple[float, ...]], np.ndarray, float, set]:
    """The runner, objective, each configuration's true losses, the reference point, true HV and the front."""
    a, b = TABLES[name]
    settings = {"dataset": [str(MOOT / f"{name}.csv")], "metric": a}
    runner = make_runner("dataset", settings)
    objective = MultiObjective.parse(f"pareto:{a},{b}", runner.metrics())
    means = {m: runner.table.means(m) for m in objective.metrics}
    losses = {c: objective.losses({m: means[m][c] for m in objective.metrics})
              for c in means[a] if all(c in means[m] for m in objective.metrics)}
    points = np.array(list(losses.values()))
    front = points[non_dominated(points)]
    nadir, ideal = front.max(axis=0), front.min(axis=0)
    reference = nadir + MARGIN * (nadir - ideal)
    return runner, objective, losses, reference, hypervolume(front, reference), {tuple(p) for p in front}


def share(runner, objective: MultiObjective, losses, reference, true_hv: float, algorithm: str, seed: int,
          budget: int, front: set, params: dict | None = None) -> tuple[float, int]:
    fresh = MultiObjective.from_spec({**objective.spec(), "reference": None})  # each campaign its own reference
    tuner = make_tuner(algorithm, runner.space, seed=seed, direction=fresh.direction, params=params)
    store = MemoryStore()
    run_loop(campaign_id=0, tuner=tuner, runner=runner, objective=fresh, store=store, budget=budget, repeats=1,
             batch_size=1, seed=seed)
    seen = [losses[Config(t.config)] for t in store.trials() if Config(t.config) in losses]
    return hypervolume(seen, reference) / true_hv, sum(1 for p in seen if p in front)


def bootstrap_ratio(ours: np.ndarray, peer: np.ndarray, rng: np.random.Generator) -> tuple[str, float, float, float]:
    """The ratio of median shares, ours / the peer's, with a paired bootstrap 95% interval; the ratio of
    mean shares where the peer's median share is 0 (a front it mostly misses altogether)."""
    statistic, measure = (np.median, "median") if np.median(peer) > 0 else (np.mean, "mean")
    point = float(statistic(ours) / statistic(peer)) if statistic(peer) > 0 else float("inf")
    samples = []
    for _ in range(5000):
        idx = rng.integers(len(ours), size=len(ours))  # the same seeds for both: paired
        theirs = statistic(peer[idx])
        samples.append(statistic(ours[idx]) / theirs if theirs > 0 else float("inf"))
    low, high = np.percentile(samples, [2.5, 97.5], method="nearest")  # no interpolation across inf
    return measure, point, float(low), float(high)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget", type=int, default=100)
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "pareto.json")
    args = parser.parse_args()
    try:
        register(PEER, "bench.optuna_nsga2:OptunaNSGA2")
        register(PEER_SMALL, "bench.optuna_nsga2:OptunaNSGA2")
        import optuna  # noqa: F401
        algorithms = (*OURS, PEER, PEER_SMALL)
    except ImportError:
        print("optuna is not installed (pip install -e '.[bench]'): StoreTune's algorithms only")
        algorithms = OURS
    report = {}
    for name in filter(None, args.tables.split(",")):
        runner, objective, losses, reference, true_hv, front = table_truth(name)
        size = len(front)
        budget = min(args.budget, len(losses))
        started = time.perf_counter()
        runs = {a: [share(runner, objective, losses, reference, true_hv, a, s, budget, front, PARAMS.get(a))
                    for s in range(args.seeds)] for a in algorithms}
        shares = {a: np.array([r[0] for r in rs]) for a, rs in runs.items()}
        found = {a: np.array([r[1] for r in rs]) for a, rs in runs.items()}
        wall = time.perf_counter() - started
        ref = ", ".join(f"{m} {v if d == 'min' else -v:.6g}" for m, d, v in
                        zip(objective.metrics, objective.directions, reference))
        print(f"\n== {name} ({objective.text}): {len(losses)} configurations, true front {size} points, "
              f"hypervolume {true_hv:.6g} (reference: {ref}); {args.seeds} seeds x {budget}")
        print(f"{'algorithm':<18}{'median share of true HV':>26}{'IQR':>18}{'mean share':>12}"
              f"{'front points found (median)':>30}")
        for a, values in shares.items():
            q25, q50, q75 = np.percentile(values, [25, 50, 75])
            print(f"{a:<18}{q50:>26.3f}{f'{q25:.3f}-{q75:.3f}':>18}{values.mean():>12.3f}"
                  f"{f'{np.median(found[a]):g} of {size}':>30}")
        entry = {"configurations": len(losses), "front": size, "true_hypervolume": true_hv,
                 "reference": reference.tolist(), "budget": budget, "seeds": args.seeds,
                 "shares": {a: v.tolist() for a, v in shares.items()},
                 "front_found": {a: v.tolist() for a, v in found.items()}, "wall_s": wall}
        for peer in (PEER, PEER_SMALL):
            if peer not in shares:
                continue
            rng = np.random.default_rng(zlib.crc32(name.encode()))  # seeded by the table: the same draws for both
            measure, point, low, high = bootstrap_ratio(shares["nsga2"], shares[peer], rng)
            print(f"nsga2 / {peer} ({measure} share): {point:.3f}  95% CI [{low:.3f}, {high:.3f}]")
            entry.setdefault("ratio", {})[peer] = {"measure": measure, "point": point, "low": low, "high": high}
        print(f"wall time {wall:.0f} s")
        report[name] = entry
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
