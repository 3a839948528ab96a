"""bench/multifidelity.py: the figures it prints, its cache, where the best ranks early, and the campaign's rule for
the reported best, on small dataset folders of per-second series."""

from __future__ import annotations

import numpy as np
import pytest


def _series_dataset(folder, seed=5):
    """A dataset folder of two workloads' 30-second series: 60 configurations, 2 repeats, a start 1.6x faster than
    the steady rate (the same for all: it does not change their ranks), 5% noise a second."""
    import json

    folder.mkdir()
    rng = np.random.default_rng(seed)
    lines = ["workload,a,b,repeat,status,reason,ops_per_s,series:ops_per_s"]
    for workload, shift in (("fileserver", 0), ("varmail", 3)):
        for a in range(10):
            for b in range(6):
                rate = 1300 - 40 * (a - 6 + shift) ** 2 - 25 * (b - 2) ** 2
                for r in range(2):
                    series = [rate * (1.6 if t < 3 else 1) * rng.normal(1, 0.05) for t in range(30)]
                    lines.append(f"{workload},{a},{b},{r},SUCCEEDED,,{np.mean(series):.3f},"
                                 + " ".join(f"{v:.3f}" for v in series))
    (folder / "measurements.csv").write_text("\n".join(lines) + "\n")
    (folder / "manifest.json").write_text(json.dumps({"format": "long", "files": ["measurements.csv"],
                                                      "workloads": ["fileserver", "varmail"], "series_interval_s": 1}))
    return folder


def test_the_multifidelity_benchmark_counts_device_seconds_for_every_contestant(tmp_path):
    """bench/multifidelity.py on a small dataset of series: the keys the issue names, each contestant within the
    budget it was given, short runs only where a pruner or ASHA stops them, and the rank correlation of t-second
    means with the whole runs' (near 1 here, where every start is alike)."""
    import json
    import subprocess
    import sys

    from conftest import ROOT

    pytest.importorskip("optuna")
    folder = _series_dataset(tmp_path / "ts")
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "multifidelity.py"), "--dataset", str(folder),
                          "--seeds", "3", "--workers", "2", "--budget-runs", "10", "--agree", str(folder), "--json"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert {"asha_vs_full", "asha_vs_optuna", "asha_success", "full_success", "rank_correlation",
            "asha_repeats_vs_full", "asha_repeats_reported_near_optimal"} <= set(result)
    assert set(result["rank_correlation"]) == {"fileserver", "varmail"}
    assert all(0.9 < rho <= 1 for w in result["rank_correlation"].values() for rho in w.values())
    assert all(set(ranks) == {"1", "3", "10"} for ranks in result["best_rank"].values())
    # agreement with a fixed-length dataset (here itself, whose manifest names no run length: 10 s prefixes)
    assert {w: a["spearman"] for w, a in result["agreement"].items()} == \
        {w: rho["10"] for w, rho in result["rank_correlation"].items()}
    assert all(a["configurations"] == 60 for a in result["agreement"].values())
    for workload in result["workloads"].values():
        assert workload["budget_s"] == 300 and workload["run_s"] == 30
        figures = workload["contestants"]
        assert set(figures) == {"auto", "random", "auto+asha", "auto+asha+repeats", "optuna-hyperband",
                                "optuna-wilcoxon"}
        assert figures["auto"]["evaluations"] == figures["random"]["evaluations"] == 10  # 10 whole runs of 30 s
        assert figures["auto"]["stopped"] == 0 and figures["auto+asha"]["stopped"] > 0
        assert figures["auto+asha"]["evaluations"] > 10 and figures["optuna-wilcoxon"]["evaluations"] == 5
        assert all(s["median_s"] is None or s["median_s"] <= 300 for s in figures.values())
    # each run's setup (mkfs, layout, teardown) counted: a whole run costs 35 s, a run stopped at 1 s costs 6
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "multifidelity.py"), "--dataset", str(folder),
                          "--seeds", "3", "--workers", "2", "--budget-runs", "10", "--setup-s", "0,5", "--workloads",
                          "varmail", "--contestants", "auto,auto+asha", "--json"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    both = json.loads(out.stdout)  # both setups read off the same trajectories: without setup, as the first run
    assert both["setup_s"] == 0 and both["workloads"]["varmail"]["contestants"] == \
        {k: v for k, v in result["workloads"]["varmail"]["contestants"].items() if k in ("auto", "auto+asha")}
    with_setup = both["with_setup"]["5"]
    assert with_setup["setup_s"] == 5 and with_setup["workloads"]["varmail"]["budget_s"] == 350
    figures, before = with_setup["workloads"]["varmail"]["contestants"], result["workloads"]["varmail"]["contestants"]
    assert figures["auto"]["evaluations"] == 10
    assert figures["auto+asha"]["evaluations"] < before["auto+asha"]["evaluations"]


def test_the_multifidelity_benchmark_resumes_from_its_cache_and_refuses_another_settings(tmp_path):
    """A long report can be stopped and resumed: each finished seed is a line of the cache, a line cut short runs
    again, and the figures are the same as in one sitting; a cache of other settings is refused by name."""
    import json
    import subprocess
    import sys

    from conftest import ROOT

    pytest.importorskip("optuna")
    folder, cache = _series_dataset(tmp_path / "ts"), tmp_path / "cache.jsonl"
    argv = [sys.executable, str(ROOT / "bench" / "multifidelity.py"), "--dataset", str(folder), "--seeds", "3",
            "--workers", "2", "--budget-runs", "6", "--workloads", "varmail", "--contestants",
            "random,optuna-hyperband", "--setup-s", "0,5", "--json"]
    whole = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert whole.returncode == 0, whole.stderr
    first = subprocess.run(argv + ["--cache", str(cache)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert first.returncode == 0, first.stderr
    lines = cache.read_text().splitlines()
    assert len(lines) == 1 + 6 and json.loads(lines[0])["settings"]["eta"] == 3
    cache.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])  # the last seed cut short by a stop
    again = subprocess.run(argv + ["--cache", str(cache)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert again.returncode == 0, again.stderr
    assert ":7: not a finished seed" in again.stderr
    assert json.loads(again.stdout) == json.loads(first.stdout) == json.loads(whole.stdout)
    other = subprocess.run(argv + ["--cache", str(cache), "--eta", "2"], capture_output=True, text=True, timeout=600,
                           cwd=ROOT)
    assert other.returncode != 0 and "other settings (eta)" in other.stderr


def test_best_rank_says_where_the_best_whole_run_ranks_on_its_first_seconds(tmp_path):
    """A best configuration that starts slowly (varmail's in loop-storage-ts: 18th of 70 at 1 s) ranks low on its
    first seconds: the bench prints where, so that a reader sees why a rung there stops it."""
    import sys

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "bench"))
    import multifidelity

    folder = tmp_path / "slow-start"
    folder.mkdir()
    lines = ["workload,a,repeat,status,reason,ops_per_s,series:ops_per_s"]
    starts = {0: (100, 400), 1: (300, 300), 2: (200, 200)}  # a=0: 100 ops/s for 5 s, then 400: the best whole
    for a, (first, then) in starts.items():
        for r in range(2):
            series = [first] * 5 + [then] * 25
            lines.append(f"fileserver,{a},{r},SUCCEEDED,,{np.mean(series):.3f}," + " ".join(map(str, series)))
    (folder / "measurements.csv").write_text("\n".join(lines) + "\n")
    runner = multifidelity.runner_for(str(folder / "measurements.csv"), "fileserver", "ops_per_s")
    assert multifidelity.best_rank(runner, "ops_per_s", "max") == {"1": 3, "3": 3, "10": 2}
    assert multifidelity.best_rank(runner, "ops_per_s", "max", lengths=(30,)) == {"30": 1}


def test_the_bench_reports_the_best_mean_of_the_most_measured_where_finalists_were_measured_again():
    """With --max-repeats, a lucky first run is not the reported best: the bench reads the campaign's rule (the best
    among the trials measured the most times), and a re-measurement costs its own run, not the trial's first again."""
    import sys

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "bench"))
    import multifidelity
    from multifidelity import Step, Task

    task = Task("d", "varmail", "auto+asha+repeats", 0, 300, 3.0, 1.0, "ops_per_s", "max", frozenset(),
                budget_runs=10, full_s=30, max_repeats=2)
    steps = [Step((30,), 100.0, True, trial=0), Step((30,), 120.0, False, trial=1),
             Step((30,), 102.0, False, trial=1, remeasured=True),  # trial 1's two runs: mean 102, lucky once
             Step((1,), None, False, stopped=True, trial=2),
             Step((30,), 105.0, True, trial=0, remeasured=True),  # trial 0: 105 over two runs, the best measured twice
             Step((30,), 130.0, False, trial=3)]  # best once, but not confirmed
    run = multifidelity.replay(task, steps, 0.0)
    assert run.reported_near_optimal and run.spent_s == 151 and run.evaluations == 6 and run.hit_s == 30
    run = multifidelity.replay(task, steps[:2], 0.0)  # one run each: the best single run
    assert not run.reported_near_optimal


def test_an_unknown_contestant_is_one_line_naming_the_known_ones(tmp_path):
    import subprocess
    import sys

    from conftest import ROOT

    folder = _series_dataset(tmp_path / "ts")
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "multifidelity.py"), "--dataset", str(folder),
                          "--contestants", "auto,auto+hyperband", "--seeds", "1"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode != 0 and out.stderr.strip().splitlines() == [
        "--contestants: unknown auto+hyperband; choose from auto, random, auto+asha, auto+asha+repeats, "
        "optuna-hyperband, optuna-wilcoxon"]
