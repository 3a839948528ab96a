"""Workload fingerprints, change detection, recommendations and --warm-start similar (issue 14)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from storetune.api.service.app import create_app
from storetune.api.settings import Settings as ServiceSettings
from conftest import run_cli, shared
from storetune.runners.fingerprint import MIN_IOS, FingerprintError, changes, features
from storetune.runners.traces import Trace, read_trace
from storetune.search_spaces.status import within_of_best
from storetune.tuner import Campaign, CampaignSpec, History
from storetune.tuner.search.spec import InvalidSpec
from storetune.tuner.algorithms.registry import SEARCH_ALGORITHMS
from storetune.tuner.analysis.workloads import NoHistory, recommend


def synthetic(n: int, *, read_ratio: float, size: int, sequential: bool, rate_per_s: float, seed: int = 0,
              latency_us: float | None = None) -> Trace:
    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.exponential(1000.0 / rate_per_s, n))
    sizes = np.full(n, size, dtype=np.int64)
    offsets = np.arange(n, dtype=np.int64) * size if sequential else rng.integers(0, 2**30 // size, n) * size
    lat = np.full(n, np.nan) if latency_us is None else np.full(n, latency_us)
    return Trace(ts, rng.random(n) < read_ratio, sizes, offsets, lat, ts.copy(), sizes.copy(), "synthetic")


def concatenated(a: Trace, b: Trace) -> Trace:
    shift = a.ts_ms[-1] - b.ts_ms[0] + 1.0
    parts = {k: np.concatenate([getattr(a, k), getattr(b, k) + (shift if k in ("ts_ms", "submit_ms") else 0)])
             for k in ("ts_ms", "is_read", "size", "offset", "latency_us", "submit_ms", "returned")}
    return Trace(**parts, source="concatenated")


def test_features_describe_what_the_trace_does():
    seq = features(synthetic(5000, read_ratio=0.25, size=65536, sequential=True, rate_per_s=2000, latency_us=500))
    assert seq["ios"] == 5000 and seq["reads"] + seq["writes"] == 5000
    assert abs(seq["read_ratio"] - 0.25) < 0.03
    assert seq["size_p50"] == 65536 and seq["log2_size_mean"] == 16 and seq["log2_size_std"] == 0
    assert seq["sequential_ratio"] > 0.99 and seq["log10_distance_median"] == 0
    assert abs(seq["arrival_rate"] - 2000) / 2000 < 0.05
    assert abs(seq["interarrival_cv"] - 1) < 0.1  # Poisson arrivals
    assert abs(seq["concurrency"] - 1.0) < 0.1  # Little's law: 2,000 I/Os a second for 0.5 ms each
    rand = features(synthetic(5000, read_ratio=0.9, size=4096, sequential=False, rate_per_s=100))
    assert rand["sequential_ratio"] < 0.01 and rand["log10_distance_median"] > 6
    assert rand["concurrency"] is None and rand["think_time_us"] is None  # an MSR trace has no latencies


def test_a_trace_too_short_to_fingerprint_says_how_many_ios_it_needs(tmp_path: Path, sqlite_url: str):
    with pytest.raises(FingerprintError, match=f"at least {MIN_IOS}"):
        features(synthetic(MIN_IOS - 1, read_ratio=0.5, size=4096, sequential=False, rate_per_s=10))
    short = tmp_path / "short.trace"
    short.write_text("".join(f"{i}.0 0 {i * 4096} 4096 1\n" for i in range(50)))
    proc = run_cli("fingerprint", "--trace", str(short), "--db", sqlite_url)
    assert proc.returncode == 2 and "50 I/Os are too few" in proc.stderr and f"at least {MIN_IOS}" in proc.stderr


@pytest.mark.parametrize("threshold", ["0", "-1", "nan"])
def test_a_threshold_that_makes_every_window_a_shift_is_refused(tmp_path: Path, sqlite_url: str, threshold):
    """--threshold 0 or below was taken, and every window of the trace reported as a shift."""
    trace = tmp_path / "ok.trace"
    trace.write_text("".join(f"{i * 0.5:.3f} 0 {i * 4096} 4096 1\n" for i in range(400)))
    proc = run_cli("fingerprint", "--trace", str(trace), "--window", "100", "--threshold", threshold, "--db", sqlite_url)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"error: a threshold of {float(threshold):g} noise units would make every window a shift; use a positive "
        "number (4 by default)")


def test_change_detection_finds_where_two_real_traces_meet():
    msr = read_trace(shared("heimdall_msr/msr.cut.per_10k.rw_40_60.1370.trace.txt"))
    tencent = read_trace(shared("flashnet_tencent/tencent.cut.per_50k.most_size_thpt.222.trace.csv"))
    first = Trace(*(getattr(tencent, k)[:10_000] for k in ("ts_ms", "is_read", "size", "offset", "latency_us",
                                                            "submit_ms", "returned")), source="tencent")
    assert changes(msr) == [] and changes(first) == []  # each alone: one phase
    for a, b in ((msr, first), (first, msr)):
        found = [c.window for c in changes(concatenated(a, b), window=1000)]
        assert found and all(abs(w - 10) <= 1 for w in found), found  # the known point: I/O 10,000, window 10


def test_change_detection_on_synthetic_phases_counts_windows_in_ios():
    a = synthetic(6000, read_ratio=0.9, size=4096, sequential=False, rate_per_s=500, seed=1)
    b = synthetic(6000, read_ratio=0.1, size=131072, sequential=True, rate_per_s=500, seed=2)
    b.ts_ms = np.floor(b.ts_ms / 1000) * 1000  # whole-second stamps, as some traces have
    found = changes(concatenated(a, b), window=500)
    assert [c.window for c in found] == [12] and found[0].first_io == 6000


# --- recommendations from the history ---------------------------------------------------------------

WORKLOADS = {  # name -> (features, the configuration each workload prefers)
    "reader": ({"read_ratio": 0.9, "log2_size_mean": 12, "log2_size_std": 0.5, "sequential_ratio": 0.05,
                "log10_distance_median": 7, "log10_arrival_rate": 3, "interarrival_cv": 2}, ("a", 4)),
    "reader2": ({"read_ratio": 0.85, "log2_size_mean": 12.2, "log2_size_std": 0.6, "sequential_ratio": 0.06,
                 "log10_distance_median": 7, "log10_arrival_rate": 3.1, "interarrival_cv": 2.2}, ("a", 4)),
    "writer": ({"read_ratio": 0.1, "log2_size_mean": 16, "log2_size_std": 0.2, "sequential_ratio": 0.9,
                "log10_distance_median": 0, "log10_arrival_rate": 2, "interarrival_cv": 1}, ("c", 1)),
}


def workload_table(folder: Path) -> Path:
    """A table of three workloads over fs x depth (12 configurations each), with a fingerprints.json."""
    folder.mkdir()
    path = folder / "measurements.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workload", "fs", "depth", "ops_per_s+"])
        for name, (_, (fs, depth)) in WORKLOADS.items():
            for i, x in enumerate("abc"):
                for d in (1, 2, 4, 8):
                    value = 1000 - 200 * (x != fs) - 40 * abs(np.log2(d) - np.log2(depth)) + (7 * i + d) % 5
                    w.writerow([name, x, d, value])
    prints = {name: {"source": "trace", "ios": 1000, "features": f} for name, (f, _) in WORKLOADS.items()}
    (folder / "fingerprints.json").write_text(json.dumps({"workloads": prints}))
    return path


def campaign(history: History, table: Path, workload: str, **kw) -> Campaign:
    spec = CampaignSpec(runner="dataset", runner_settings={"dataset": [str(table)], "context": {"workload": workload}},
                        algorithm=kw.pop("algorithm", "random"), budget=kw.pop("budget", 12), seed=kw.pop("seed", 0),
                        **kw)
    return Campaign.create(history, spec)


def test_recommend_ranks_known_workloads_by_distance_with_their_near_optimal_configurations(tmp_path, sqlite_url):
    table = workload_table(tmp_path / "ds")
    history = History(sqlite_url)
    with pytest.raises(NoHistory, match="no fingerprinted workload"):
        recommend(history, WORKLOADS["reader"][0])
    for name in ("reader", "writer"):
        campaign(history, table, name).run()  # every configuration measured, and the fingerprint recorded
    assert {fp["workload_name"] for fp in history.fingerprints().values()} == {"reader", "writer"}

    found = recommend(history, WORKLOADS["reader2"][0], k=2, within=0.99)
    assert [n.workload_name for n in found.neighbours] == ["reader", "writer"]
    assert found.neighbours[0].distance < found.neighbours[1].distance
    near = found.neighbours[0]
    assert near.best["config"] == {"fs": "a", "depth": 4} and near.configurations == 12
    means = {(r["fs"], int(r["depth"])): float(r["ops_per_s+"]) for r in csv.DictReader(table.open())
             if r["workload"] == "reader"}
    expected = {k for k, v in means.items() if within_of_best(v, max(means.values()), "max", 0.99)}
    assert {(c["config"]["fs"], c["config"]["depth"]) for c in near.near_optimal} == expected
    # reader's best (a, 4) measured on writer is not near-optimal there, and the other way round
    assert found.transfer["checked"] == 2 and found.transfer["near_optimal"] == 0
    # a metric no campaign was tuned for said "has no fingerprinted workload ...: measure some first" (a newcomer trial)
    with pytest.raises(NoHistory, match=r"^no fingerprinted workload in the history at .* was tuned for lat_p99_us; "
                                        r"2 were, for ops_per_s: give `metric` ops_per_s, or leave `metric` out$"):
        recommend(history, WORKLOADS["reader2"][0], metric="lat_p99_us")


@pytest.mark.parametrize("algorithm", SEARCH_ALGORITHMS)
def test_warm_start_similar_measures_the_nearest_workloads_best_first(tmp_path, sqlite_url, algorithm):
    table = workload_table(tmp_path / "ds")
    history = History(sqlite_url)
    with pytest.raises(InvalidSpec, match="no fingerprinted workload"):
        campaign(history, table, "reader2", warm_start="similar")
    for name in ("reader", "writer"):
        campaign(history, table, name).run()
    summary = campaign(history, table, "reader2", warm_start="similar", algorithm=algorithm, budget=6, seed=3).run()
    trials = history.trials(summary.campaign)
    assert trials[0].config == {"fs": "a", "depth": 4}  # reader's best, the nearest workload's
    assert summary.similar["neighbours"][0]["workload"] == "reader"
    assert summary.similar["first"][0] == {"fs": "a", "depth": 4}
    assert summary.best_config == {"fs": "a", "depth": 4}

    if algorithm == "random":  # the box `tune` prints says so too (it showed only "warm start: 0 earlier trials")
        from rich.console import Console

        from storetune.api.cli.render import summary_table

        console = Console(record=True, width=300)
        console.print(summary_table(summary))
        shown = " ".join(console.export_text().split())
        first = len(summary.similar["first"])
        assert f"similar workloads │ {first} of their near-optimal configurations measured first; nearest: reader (" in shown


def test_warm_start_similar_without_this_workloads_fingerprint_says_how_to_get_one(tmp_path, sqlite_url, bdbc):
    history = History(sqlite_url)
    spec = CampaignSpec(runner="dataset", runner_settings={"dataset": [str(bdbc)]}, warm_start="similar")
    # a table's workload cannot be traced: it said "record it with storetune fingerprint", which cannot name it
    with pytest.raises(InvalidSpec, match="needs the fingerprint of workload BDBC, and this table ships none .* "
                                          "use `warm_start` same$"):
        Campaign.create(history, spec)


def test_cli_fingerprint_records_and_recommend_reads(tmp_path, sqlite_url):
    trace = shared("heimdall_msr/msr.cut.per_10k.rw_40_60.1370.trace.txt")
    proc = run_cli("fingerprint", "--trace", str(trace), "--json", "--db", sqlite_url, check=True)
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["ios"] == 10_000 and out["source"] == "trace" and out["changes"]["at"] == []
    assert abs(out["features"]["read_ratio"] - 0.4054) < 1e-4
    other = shared("heimdall_msr/msr.cut.per_10k.rw_20_80.105.trace.txt")
    proc = run_cli("recommend", "--trace", str(other), "--db", sqlite_url)
    assert proc.returncode == 2 and "no fingerprinted workload with measured configurations" in proc.stderr


def test_rest_fingerprints_and_recommendations(tmp_path, sqlite_url):
    trace = shared("heimdall_msr/msr.cut.per_10k.rw_40_60.1370.trace.txt")
    data = f"{trace.parent}:{tmp_path}"
    table = workload_table(tmp_path / "ds")
    with TestClient(create_app(ServiceSettings(database_url=sqlite_url, data_dirs=data))) as client:
        created = client.post("/fingerprints", json={"trace": str(trace)})
        assert created.status_code == 201, created.text
        assert created.json()["ios"] == 10_000
        assert created.headers["location"] == f"/fingerprints/{created.json()['id']}"
        assert client.get("/recommendations", params={"trace": str(trace)}).status_code == 404
        assert client.post("/fingerprints", json={"trace": "/etc/passwd"}).status_code == 403
        short = tmp_path / "short.trace"
        short.write_text("".join(f"{i}.0 0 {i * 4096} 4096 1\n" for i in range(50)))
        refused = client.post("/fingerprints", json={"trace": str(short)})
        assert refused.status_code == 422 and "too few" in refused.text
    history = History(sqlite_url)
    for name in ("reader", "writer"):
        campaign(history, table, name).run()
    with TestClient(create_app(ServiceSettings(database_url=sqlite_url, data_dirs=data))) as client:
        got = client.get("/recommendations", params={"trace": str(trace), "k": 1})
        assert got.status_code == 200, got.text
        assert len(got.json()["neighbours"]) == 1 and got.json()["neighbours"][0]["workload_name"] in WORKLOADS
