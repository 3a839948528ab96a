"""Benchmark: StoreTune's five algorithms against Optuna's TPE on exhaustive tables.

    .venv/bin/pip install -e '.[bench]'       # Optuna, the peer
    .venv/bin/python bench/compare_algorithms.py [--seeds 100] [--budget 200] [--datasets bdbc,sql]

For every dataset it prints, per algorithm: the median evaluations to a near-optimal configuration
(within 1% of the table's best mean), the success rate at 50/100/200 evaluations, and the mean
ask+tell time over the last 10 of 200 observations. Then the ratio of our best algorithm's median to
TPE's, with a paired bootstrap 95% confidence interval over the seeds; where a median is censored
(a majority of seeds never succeeded), the ratio of success rates at the budget (TPE's / ours), so
that below 1 always means "ours needs fewer evaluations". And the wall time of the whole comparison of
our five algorithms, against the target of 10 minutes for 100 seeds x 200 evaluations on BDBC.
A table smaller than --budget is compared with the whole table as the budget.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # workers inherit sys.path, so they can import bench.optuna_tpe

from runners import make_runner  # noqa: E402
from tuner.compare import Comparison, CompareSpec, Variant  # noqa: E402
from tuner.executor import ProcessExecutor  # noqa: E402
from tuner.history import History  # noqa: E402
from tuner.registry import register  # noqa: E402

SHARED = ROOT.parent / "shared" / "datasets"
DATASETS = {
    "bdbc": ({"dataset": [str(SHARED / "moot_configs/BDBC.csv")]}, "BDBC"),
    "postgresql": ({"dataset": [str(SHARED / "moot_configs/PostgreSQL.csv")]}, "PostgreSQL"),
    "sql": ({"dataset": [str(SHARED / "moot_configs/SQL_AllMeasurements.csv")]}, "SQL_AllMeasurements"),
    "atc18": ({"dataset": [str(SHARED / "cao_atc18_subset")], "context": {"workload_id": 4, "disk_type": 3}},
              "ATC'18 subset, workload 4, SSD"),
}
OURS = "random,sa,ga,bo,dqn"
PEER = "optuna-tpe"


def own_datasets() -> dict[str, tuple[dict, str]]:
    """The project's own measured datasets, each pinned to each workload it holds."""
    out = {}
    for manifest in sorted((ROOT / "datasets").glob("*/manifest.json")):
        if not (manifest.parent / "measurements.csv").exists():
            continue  # a sweep still measuring
        data = json.loads(manifest.read_text())
        for workload in data.get("workloads", []):
            out[f"{manifest.parent.name}:{workload}"] = (
                {"dataset": [str(manifest.parent)], "context": {"workload": workload}},
                f"{manifest.parent.name}, {workload}",
            )
    return out


def paired_ratio(ours: np.ndarray, peer: np.ndarray, budget: int, rng: np.random.Generator) -> tuple[str, float, float, float]:
    """Our median / the peer's, or the peer's success rate / ours where a median is censored."""
    censored = np.median(ours) > budget or np.median(peer) > budget

    def statistic(a: np.ndarray, b: np.ndarray) -> float:
        if censored:
            ours_rate, peer_rate = np.mean(a <= budget), np.mean(b <= budget)
            return float(peer_rate / ours_rate) if ours_rate else float("inf")
        return float(np.median(a) / np.median(b))

    point = statistic(ours, peer)
    samples = []
    for _ in range(5000):
        idx = rng.integers(len(ours), size=len(ours))  # the same seeds for both: a paired bootstrap
        samples.append(statistic(ours[idx], peer[idx]))
    low, high = np.percentile(samples, [2.5, 97.5], method="nearest")  # no interpolation across inf
    return ("success-rate ratio" if censored else "median ratio"), point, float(low), float(high)


def run(history: History, settings: dict, variants: str, args: argparse.Namespace, budget: int) -> tuple[dict, float]:
    spec = CompareSpec(runner_settings=settings, variants=tuple(Variant.parse_list(variants)),
                       seeds=args.seeds, budget=budget, within=0.99)
    comparison = Comparison.create(history, spec)
    started = time.perf_counter()
    results = comparison.run(ProcessExecutor(args.workers))
    return results, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--datasets", default=",".join(DATASETS) + ",own")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench")
    args = parser.parse_args()
    register(PEER, "bench.optuna_tpe:OptunaTPE")
    args.out.mkdir(parents=True, exist_ok=True)
    history = History(f"sqlite:///{args.out / 'bench.sqlite'}")
    chosen = {}
    for name in args.datasets.split(","):
        chosen.update(own_datasets() if name == "own" else {name: DATASETS[name]})
    report = {}
    rng = np.random.default_rng(0)
    for key, (settings, title) in chosen.items():
        size = make_runner("dataset", **settings).space.cardinality()
        budget = min(args.budget, size)  # a small table: the budget is the whole table
        marks = [k for k in (50, 100, 200) if k < budget] + [budget]
        ours, ours_s = run(history, settings, OURS, args, budget)
        peer, peer_s = run(history, settings, PEER, args, budget)
        algorithms = {**ours["algorithms"], **peer["algorithms"]}
        print(f"\n== {title}: {ours['near_optimal']} near-optimal of {ours['configurations']} "
              f"({100 * ours['near_optimal_share']:.2f}%), {args.seeds} seeds x {budget} evaluations")
        print(f"{'algorithm':<12}{'median evals (IQR)':>22}{'censored':>10}"
              + "".join(f"{'success@' + str(k):>13}" for k in marks) + f"{'ask+tell ms @' + str(budget):>18}")
        for label, a in algorithms.items():
            iqr = f"{a['median_evals_to_near_optimal']:g} ({a['evals_p25']:g}-{a['evals_p75']:g})"
            print(f"{label:<12}{iqr:>22}{a['censored']:>10}"
                  + "".join(f"{a['success_at'][k - 1]:>13.2f}" for k in marks) + f"{a['ask_tell_ms_at_budget']:>18.2f}")
        random_exact = ours["random_expected_success_at"]
        print(f"{'(random, exact)':<12}{'':>32}" + "".join(f"{random_exact[k - 1]:>13.2f}" for k in marks))
        contenders = {k: v for k, v in ours["algorithms"].items() if k != "random"}
        best = min(contenders, key=lambda k: (contenders[k]["median_evals_to_near_optimal"], -contenders[k]["success_at_budget"]))
        measure, point, low, high = paired_ratio(np.array(contenders[best]["evals_to_near_optimal"], float),
                                                 np.array(peer["algorithms"][PEER]["evals_to_near_optimal"], float),
                                                 budget, rng)
        print(f"ours/TPE ({best} vs {PEER}, {measure}): {point:.2f}  95% CI [{low:.2f}, {high:.2f}]"
              f"   (target <= 1.0, aim <= 0.8)")
        print(f"wall time: our five algorithms {ours_s:.0f} s, TPE {peer_s:.0f} s")
        report[key] = {"title": title, "ours": ours, "peer": peer, "best": best, "ratio": [measure, point, low, high],
                       "wall_s": {"ours": ours_s, PEER: peer_s}}
        (args.out / "compare_algorithms.json").write_text(json.dumps(report))  # after every dataset
    print(f"\nwrote {args.out / 'compare_algorithms.json'}")


if __name__ == "__main__":
    main()
