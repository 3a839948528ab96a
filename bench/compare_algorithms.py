"""Benchmark: StoreTune's algorithms against Optuna's TPE and SMAC3 on exhaustive tables.

    .venv/bin/pip install -e '.[bench]'       # Optuna, the peer
    .venv/bin/python bench/compare_algorithms.py [--seeds 100] [--budget 200] [--datasets bdbc,7z,own]

Every table of ../shared/datasets/moot_configs (SS-A, SS-J and SS-O on one of their two objectives),
the ATC'18 subset and the four workloads of datasets/loop-storage-v2 (`own`; `own-all` for every dataset
in datasets/); a path names a table of your own or a folder of them (bench/synthetic_tables.py).
For each table: the near-optimal threshold, chosen so that 0.1% to 1% of its
configurations are near-optimal (1% of the best where that already holds), then per algorithm the
median evaluations to a near-optimal configuration with the IQR, the success rate at 50/100/200
evaluations against random search's exact curve, and the mean ask+tell time over the last 10
evaluations. Then the default algorithm's median over each peer's (and our post-hoc best's), with a paired
bootstrap 95% interval over the seeds; where a median is censored (most seeds never succeeded), the
ratio of success rates at the budget (the peer's / ours), so that below 1 always means "ours needs fewer
evaluations". At the end, the geometric mean of the ratios across tables, and the wall time of our
five algorithms on BDBC (target: 10 minutes for 100 seeds x 200 evaluations).
A table smaller than --budget is compared with the whole table as the budget. With --truth, a generated table
with its noiseless truth beside it (bench/synthetic_tables.py --numeric) is judged on that truth: the
threshold, the near-optimal set and random search's exact curve come from it, while every search sees the
table's noisy repeats.
With --stop-at-near-optimal each seed stops at its first near-optimal configuration: every evaluation
count, success rate and ratio is the same (a later evaluation cannot change the first hit), at a
fraction of the cost; the wall times and the ask+tell figures then describe the shortened runs.
With --resume an interrupted run goes on where it stopped: each table's comparison recorded in --out's history
with the same settings on the same content goes on from the seeds it finished, and a finished one gives its
results as recorded (Comparison.find_or_create), so that only the seeds in flight are measured twice. Every seed
is the same as in an uninterrupted run, and with the hash seed fixed so is every proposal: the evaluation counts
and ratios are those of one run; the wall times are each part's own, and the ask+tell times of seeds measured
before a resume are not kept. It refuses where the code that measures, or a library it uses, changed since the
run started (code.json in --out).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # workers inherit sys.path, so they can import bench.optuna_tpe

from bench.comparison_report import markdown, not_above_random, plot, summarize, table_lines  # noqa: E402
from bench import provenance  # noqa: E402
from bench.figures import Conditions  # noqa: E402
from storetune.runners import make_runner  # noqa: E402
from storetune.tuner.search.compare import Comparison, CompareSpec, Variant, judged_means  # noqa: E402
from storetune.tuner.analysis.convergence import near_optimal_share  # noqa: E402
from storetune.tuner.execution.local import ProcessExecutor  # noqa: E402
from storetune.tuner.history.store import History  # noqa: E402
from storetune.tuner.objectives.objective import Objective  # noqa: E402
from storetune.tuner.algorithms.base import parse_params  # noqa: E402
from storetune.tuner.algorithms.registry import DEFAULT_ALGORITHM, algorithm_class, register  # noqa: E402

SHARED = ROOT.parent / "shared" / "datasets"
MOOT = SHARED / "moot_configs"


def _moot(name: str, metric: str | None = None) -> dict:
    return {"dataset": [str(MOOT / f"{name}.csv")], **({"metric": metric} if metric else {})}


DATASETS = {
    "bdbc": (_moot("BDBC"), "BDBC"),
    "postgresql": (_moot("PostgreSQL"), "PostgreSQL"),
    "sql": (_moot("SQL_AllMeasurements"), "SQL_AllMeasurements"),
    "7z": (_moot("7z"), "7z"),
    "apache": (_moot("Apache_AllMeasurements"), "Apache"),
    "hsmgp": (_moot("HSMGP_num"), "HSMGP"),
    "llvm": (_moot("LLVM"), "LLVM"),
    "x264": (_moot("X264_AllMeasurements"), "X264"),
    "ss-a": (_moot("SS-A", "Latency"), "SS-A, latency"),
    "ss-j": (_moot("SS-J", "Throughput"), "SS-J, throughput"),
    "ss-o": (_moot("SS-O", "Performance"), "SS-O, time"),
    "atc18": ({"dataset": [str(SHARED / "cao_atc18_subset")], "context": {"workload_id": 4, "disk_type": 3}},
              "ATC'18 subset, workload 4, SSD"),
}
OURS = "random,sa,ga,bo,dqn"
# the peers, each set up as its users would and behind the same snapping protocol (bench/optuna_tpe.py)
PEERS = {"optuna-tpe": "bench.optuna_tpe:OptunaTPE", "smac3": "bench.smac_peer:SMAC3"}
BUDGETED = {"smac3": "n_trials"}  # a peer told the campaign's budget, as its users tell it


def own_datasets(names: tuple[str, ...] | None = None) -> dict[str, tuple[dict, str]]:
    """The project's own measured datasets (those named, or all), each pinned to each workload it holds."""
    out = {}
    for manifest in sorted((ROOT / "datasets").glob("*/manifest.json")):
        if names is not None and manifest.parent.name not in names:
            continue
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


def split_judge(settings: dict) -> tuple[dict, list[str] | None]:
    """A chosen table's runner settings, and the judge ``--truth`` gave it (chosen_tables), if any."""
    settings = dict(settings)
    return settings, settings.pop("judge", None)


def run(history: History, settings: dict, variants: str, args: argparse.Namespace, budget: int,
        within: float) -> tuple[dict, float]:
    settings, judge = split_judge(settings)
    spec = CompareSpec(runner_settings=settings, variants=tuple(Variant.parse_list(variants)),
                       seeds=args.seeds, budget=budget, within=within, metric=settings.get("metric"),
                       first_seed=args.first_seed, stop_at_near_optimal=args.stop_at_near_optimal,
                       judge=tuple(judge) if judge else None)
    comparison, notes = Comparison.find_or_create(history, spec, resume=args.resume)
    for note in notes:
        print(f"({note})")
    before = len(history.comparison_campaigns(comparison.id))
    started = time.perf_counter()
    results = comparison.run(ProcessExecutor(args.workers))
    results["seeds_measured_before"] = before  # by an interrupted part of the run: its wall time is not in this one's
    return results, time.perf_counter() - started


def check_peers(peers: list[str], given: str) -> None:
    """Each peer known, registered as an algorithm, and its hyperparameters valid, before anything is measured;
    the budget a budgeted peer is told is the run's, not one of its hyperparameters."""
    if not peers:
        sys.exit(f"--peers {given!r}: choose among {', '.join(PEERS)}")
    for peer in peers:
        (variant,) = Variant.parse_list(peer)
        if variant.algorithm not in PEERS:
            sys.exit(f"--peers {peer}: choose among {', '.join(PEERS)}")
        if BUDGETED.get(variant.algorithm) in dict(variant.params):
            sys.exit(f"--peers {peer}: {BUDGETED[variant.algorithm]} is the run's --budget, not the peer's")
        register(variant.algorithm, PEERS[variant.algorithm])
        try:
            parse_params(variant.algorithm, algorithm_class(variant.algorithm).Params, dict(variant.params))
        except ValueError as e:
            sys.exit(f"--peers {peer}: {e}")


def run_peer(history: History, settings: dict, name: str, args: argparse.Namespace, budget: int,
             within: float) -> tuple[dict, float]:
    """One peer's results, labelled by its name (a budgeted peer's variant carries the budget)."""
    base = Variant.parse_list(name)[0].algorithm  # a peer with hyperparameters: optuna-tpe:numbers_above=10
    variant = f"{name}:{BUDGETED[base]}={budget}" if base in BUDGETED else name
    results, seconds = run(history, settings, variant, args, budget, within)
    results["algorithms"] = {name: next(iter(results["algorithms"].values()))}
    return results, seconds


def threshold(settings: dict) -> tuple[float, int, int]:
    """The table's near-optimal threshold (0.1% to 1% of it near-optimal), the count and the size; on its judge's
    means where it has one (``--truth``)."""
    settings, judge = split_judge(settings)
    runner = make_runner("dataset", settings)
    objective = Objective.resolve(runner.metrics(), settings.get("metric"), None)
    within, near = near_optimal_share(judged_means(runner, objective, judge), objective.direction)
    return within, len(near), runner.space.cardinality()


def chosen_tables(spec: str, truth: bool = False) -> dict[str, tuple[dict, str]]:
    """The tables named; with ``truth``, a generated table with a noiseless truth beside it (truth/NAME, written
    by bench/synthetic_tables.py --numeric) is judged on it."""
    chosen: dict[str, tuple[dict, str]] = {}
    for name in filter(None, spec.split(",")):
        if name == "own":
            chosen.update(own_datasets(("loop-storage-v2",)))
        elif name == "own-all":
            chosen.update(own_datasets())
        elif name in DATASETS:
            chosen[name] = DATASETS[name]
        elif Path(name).exists():  # a table of your own, or a folder of them (bench/synthetic_tables.py)
            paths = sorted(Path(name).glob("*.csv")) if Path(name).is_dir() else [Path(name)]
            for p in paths:
                judge = p.parent / "truth" / p.name
                judged = truth and judge.exists()
                chosen[p.stem] = ({"dataset": [str(p)], **({"judge": [str(judge)]} if judged else {})},
                                  p.stem + (", judged on its noiseless truth" if judged else ""))
        else:
            sys.exit(f"unknown table {name!r}; known: {', '.join(DATASETS)}, own, own-all, or a CSV or folder")
    return chosen


def fixed_hashing() -> None:
    """Run again with Python's string hashing fixed (hash seed 0), unless it already is. SMAC 2.4 gathers its
    local search's start points in a set of configurations, whose order follows the process's hash seed, so that
    for the same seed its proposals differed from one run to the next (PostgreSQL, seed 5000: from the 18th);
    fixed, a rerun of the command is the same run. Optuna and our algorithms do not depend on it."""
    if not sys.flags.hash_randomization:
        return
    if os.environ.get("STORETUNE_BENCH_REEXECUTED"):  # Python ignored the variable (-E or -I): no second loop
        sys.exit("bench/compare_algorithms.py: Python ignored PYTHONHASHSEED=0 (run with -E or -I?); "
                 "run it without those flags")
    env = {**os.environ, "PYTHONHASHSEED": "0", "STORETUNE_BENCH_REEXECUTED": "1"}
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)  # the interpreter's flags kept


MEASURING = ("tuner", "search_spaces", "runners", "bench/compare_algorithms.py", "bench/optuna_tpe.py",
             "bench/smac_peer.py")


def code_fingerprint() -> dict:
    """The code that measures and the versions of the libraries it uses: a resumed run must have the same."""
    return provenance.code_fingerprint(MEASURING)


def check_resumable(out: Path) -> None:
    """Refuse to resume a run whose code or libraries differ from these; record them for a run that starts."""
    path, now = out / "code.json", code_fingerprint()
    if path.exists():
        then = json.loads(path.read_text())
        if then != now:
            changed = ["the code that measures"] * (then["code"] != now["code"]) + [
                f"{k} {then['libraries'].get(k)} -> {v}" for k, v in now["libraries"].items()
                if then["libraries"].get(k) != v]
            sys.exit(f"--resume: {', '.join(changed)} changed since the run in {out} started ({path}); "
                     "resume it with that code, or choose another --out")
    elif (out / "bench.sqlite").exists():
        sys.exit(f"--resume: {out} holds a run that did not record its code (no code.json): choose another --out")
    else:
        path.write_text(json.dumps(now, indent=1))


def write_atomically(path: Path, text: str) -> None:
    """A kill during the write leaves the previous file, not half of the new one."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--first-seed", type=int, default=0,
                        help="seeds first-seed .. first-seed+seeds-1: fresh ones report on what chose nothing")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help=f"the peers measured in the same run, the first being the figure's ({', '.join(PEERS)}; "
                             "with hyperparameters as optuna-tpe:numbers_above=10)")
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--datasets", default=",".join(DATASETS) + ",own")
    parser.add_argument("--algorithms", default=OURS, help="ours, as `storetune compare --algorithms` takes them")
    parser.add_argument("--default", default=DEFAULT_ALGORITHM,
                        help="the algorithm whose ratio to each peer is the target (tune's default)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench")
    parser.add_argument("--plot", type=Path, metavar="SVG",
                        help="draw each table's success curves (ours, the peers, random search's exact curve) to this SVG")
    parser.add_argument("--from", dest="saved", type=Path, metavar="JSON",
                        help="print (every table, the summary) and draw a saved run's compare_algorithms.json again, measuring nothing")
    parser.add_argument("--markdown", action="store_true",
                        help="also print the run as a Markdown table for the results pages (with --from, or at the end)")
    parser.add_argument("--truth", action="store_true",
                        help="judge a generated table on its noiseless truth where one is beside it (truth/NAME): the "
                             "searches see its noisy repeats, near-optimal is what the generator made good")
    parser.add_argument("--resume", action="store_true",
                        help="go on with the comparisons an interrupted run recorded in --out's history, from the "
                             "seeds they finished (refused if the code that measures changed)")
    parser.add_argument("--stop-at-near-optimal", action="store_true",
                        help="stop each seed at its first near-optimal configuration: the same evaluation counts "
                             "and ratios, in a fraction of the time; no ask+tell figure at the budget")
    args = parser.parse_args()
    if args.saved:
        saved = json.loads(args.saved.read_text())
        for table in saved["tables"].values():
            print("\n".join(table_lines(table)))
        summarize(saved["tables"], saved["default"])
        if args.markdown:
            print("\n" + markdown(saved["tables"], saved["default"]))
        if args.plot:
            plot(saved["tables"], saved["default"], args.plot, Conditions.of(saved["conditions"]))
        return
    fixed_hashing()
    conditions = Conditions()  # before the run loads the machine
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    check_peers(peers, args.peers)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.resume:
        check_resumable(args.out)
    else:
        (args.out / "code.json").write_text(json.dumps(code_fingerprint(), indent=1))
    history = History(f"sqlite:///{args.out / 'bench.sqlite'}")
    ours_labels = [v.label for v in Variant.parse_list(args.algorithms)]
    args.default = Variant.parse_list(args.default)[0].label  # auto:patience=10 is labelled auto[patience=10]
    if args.default not in ours_labels:
        sys.exit(f"--default {args.default} is not among --algorithms {args.algorithms}")
    saved_json = args.out / "compare_algorithms.json"
    parts = json.loads(saved_json.read_text()).get("parts", []) if args.resume and saved_json.exists() else []
    parts.append(conditions.as_dict())
    report = {}
    for key, (settings, title) in chosen_tables(args.datasets, args.truth).items():
        within, near, size = threshold(settings)
        budget = min(args.budget, size)  # a small table: the budget is the whole table
        ours, ours_s = run(history, settings, args.algorithms, args, budget, within)
        measured = {name: run_peer(history, settings, name, args, budget, within) for name in peers}
        peer = {"algorithms": {k: v for r, _ in measured.values() for k, v in r["algorithms"].items()}}
        contenders = {k: v for k, v in ours["algorithms"].items() if k != "random"} or ours["algorithms"]
        best = min(contenders, key=lambda k: (contenders[k]["median_evals_to_near_optimal"],
                                              -contenders[k]["success_at_budget"]))
        by_peer = {}
        for name in peers:
            theirs = np.array(peer["algorithms"][name]["evals_to_near_optimal"], float)
            by_peer[name] = {}
            for role, label in (("default", args.default), ("best", best)):
                evals = np.array(ours["algorithms"][label]["evals_to_near_optimal"], float)
                # seeded by the table: its draws do not depend on the tables before it, and every role and peer
                # gets the same ones
                rng = np.random.default_rng(zlib.crc32(key.encode()))
                measure, point, low, high = paired_ratio(evals, theirs, budget, rng)
                by_peer[name][role] = {"algorithm": label, "measure": measure, "ratio": point, "low": low, "high": high}
        report[key] = {"title": title, "part": len(parts), "within": within, "near_optimal": near, "size": size, "budget": budget,
                       "ours": ours, "peer": peer, "ratios": by_peer[peers[0]], "ratios_by_peer": by_peer,
                       "wall_s": {"ours": ours_s, **{n: s for n, (_, s) in measured.items()}}}
        print("\n".join(table_lines(report[key])))
        below_random = [label for label, keys in not_above_random({key: report[key]}, args.default).items() if keys]
        report[key]["below_random"] = below_random
        if below_random:
            print(f"not above random search's exact success at {budget}: {', '.join(below_random)}")
        saved = {"default": args.default, "conditions": parts[0], "parts": parts, "argv": sys.argv[1:],
                 "tables": report}
        write_atomically(saved_json, json.dumps(saved))  # after every dataset
    summarize(report, args.default)
    if args.markdown:
        print("\n" + markdown(report, args.default))
    print(f"\nwrote {args.out / 'compare_algorithms.json'}")
    if args.plot:
        plot(report, args.default, args.plot, conditions)


if __name__ == "__main__":
    main()
