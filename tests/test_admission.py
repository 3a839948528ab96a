"""The admission pipeline against the definitions of ML-MittOS and HEIMDALL."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import run_cli, shared
from storetune.runners.admission.analytics import (
    Candidate, bias_shift, choose, expected_latency, expected_latency_recurrence, threshold_equation,
)
from storetune.runners.admission.features import AdmissionDataError, IOs, Split, features, prepare
from storetune.runners.admission.labels import (
    noise_filter, outliers_in_fast_periods, outliers_in_slow_periods, period_labels, short_bursts,
)
from storetune.runners.admission.simulator import fan_out, jumps, reference_simulate, simulate, time_windows
from storetune.runners.traces import Trace
from storetune.tuner.history.store import History

TRACE = "flashnet_tencent/tencent.cut.per_50k.rw_60_40.490.trace.csv"


# --- ML-MittOS chapter 3 ---------------------------------------------------------------------------------
def test_closed_form_equals_the_recurrence():
    rng = np.random.default_rng(0)
    for r in range(1, 11):
        for p in rng.uniform(0.0, 1.0, 20):
            t_n, t, f = rng.uniform(50, 500), rng.uniform(100, 900), rng.uniform(1, 100)
            assert expected_latency(p, t_n, t, f, r) == pytest.approx(expected_latency_recurrence(p, t_n, t, f, r))
        assert expected_latency(1.0, 100, 150, 30, r) == pytest.approx(150 + (r - 1) * 30)  # the limit at p = 1
        assert expected_latency_recurrence(1.0, 100, 150, 30, r) == pytest.approx(150 + (r - 1) * 30)


def test_amse_with_no_bias_is_mse_and_bias_weighs_underestimates():
    torch = pytest.importorskip("torch")
    from storetune.runners.admission.nets import amse

    predicted, target = torch.tensor([1.0, 2.0, 5.0]), torch.tensor([2.0, 2.0, 3.0])
    assert float(amse(predicted, target, 0.0)) == pytest.approx(float(torch.nn.functional.mse_loss(predicted, target)))
    under = amse(torch.tensor([1.0]), torch.tensor([2.0]), 0.5)  # predicted below the truth
    over = amse(torch.tensor([3.0]), torch.tensor([2.0]), 0.5)
    assert float(under) == pytest.approx(1.5**2) and float(over) == pytest.approx(0.5**2)


def test_threshold_equation_minimises_the_expected_latency():
    rng = np.random.default_rng(1)
    actual = np.concatenate([rng.normal(200, 20, 900), rng.normal(3000, 300, 100)])
    predicted = actual * rng.normal(1, 0.05, len(actual))  # a good regressor
    chosen = threshold_equation(predicted, actual, f=30, r=3)
    assert 300 < chosen < 2500  # between the fast and the slow mode: fail the slow ones over
    assert bias_shift(0.0, 100) == 0 and bias_shift(0.5, 100) == pytest.approx(math.log(2) * 100)
    with pytest.raises(ValueError, match=r"loss bias must be in \[0, 1\)"):
        bias_shift(1.0, 100)


def test_strategies():
    busy = [np.array([False, False]), np.array([True, False]), np.array([True, True])]
    cands = [Candidate(v, b, b) for v, b in zip((0.0, 0.5, 0.9), busy)]
    train = {0.0: 10.0, 0.5: 8.0, 0.9: 9.0}
    test = {0.0: 10.0, 0.5: 9.0, 0.9: 7.0}
    pick = {s: choose(s, cands, lambda c: train[c.value], lambda c: test[c.value]).value
            for s in ("bias_hindsight", "global", "greedy", "greedy_skip")}
    assert pick == {"bias_hindsight": 0.9, "global": 0.5, "greedy": 0.5, "greedy_skip": 0.5}


# --- the simulator ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("replicas", [1, 2, 3, 5])
def test_vectorised_simulator_equals_the_reference_loop(replicas):
    rng = np.random.default_rng(replicas)
    latency = rng.exponential(300, 400)
    busy = rng.random(400) < 0.3
    jump = jumps(400, replicas, rng)
    fast = simulate(latency, busy, replicas, 30.0, jump=jump)
    slow = reference_simulate(latency, busy, replicas, 30.0, jump)
    assert np.allclose(fast.latency_us, slow.latency_us) and (fast.failovers == slow.failovers).all()
    assert fast.failovers.max() <= replicas - 1


def test_iodas_busy_remaining_time_and_time_windows():
    latency = np.array([100.0, 5000.0, 200.0, 4000.0, 300.0, 6000.0])
    busy = latency > 1000
    jump = np.array([[2, 2, 0, 0, 1, 3], [0, 4, 4, 4, 3, 0]])  # 1 -> 3 -> 5: every replica busy
    plain = simulate(latency, busy, 3, 30.0, jump=jump)
    brt = simulate(latency, busy, 3, 30.0, jump=jump, brt=True)
    served = {1: latency[[1, 3, 5]].min()}  # the one free first serves, not the last
    assert plain.latency_us[1] == 60 + 6000 and brt.latency_us[1] == 60 + served[1]
    assert (brt.latency_us <= plain.latency_us).all() and (brt.failovers == plain.failovers).all()
    windows = time_windows(latency, busy, 3, 30.0, np.random.default_rng(0))
    assert (windows.failovers == busy).all() and (windows.latency_us[busy] <= 30 + 300).all()
    assert (windows.latency_us[~busy] == latency[~busy]).all()
    with pytest.raises(ValueError, match="time windows need at least two replicas"):
        time_windows(latency, busy, 1, 30.0, np.random.default_rng(0))


def test_simulator_semantics_and_seed():
    latency = np.array([100.0, 5000.0, 200.0, 300.0])
    busy = np.array([False, True, False, False])
    out = simulate(latency, busy, replicas=3, failover_cost_us=30, rng=np.random.default_rng(0))
    assert out.latency_us[0] == 100 and out.failovers[1] == 1 and out.latency_us[1] in (130, 230, 330)
    all_busy = simulate(latency, np.ones(4, bool), replicas=3, failover_cost_us=30, rng=np.random.default_rng(0))
    assert (all_busy.failovers == 2).all()  # the last replica always serves
    again = simulate(latency, busy, 3, 30, rng=np.random.default_rng(0))
    assert (again.latency_us == out.latency_us).all()
    with pytest.raises(ValueError, match="replicas must be at least 1"):
        simulate(latency, busy, 0, 30, rng=np.random.default_rng(0))
    users = fan_out(np.arange(12.0), 3, np.random.default_rng(0))
    assert len(users) == 4 and users.max() == 11


# --- features and labels ---------------------------------------------------------------------------------
def _ios(latency, throughput, submit=None) -> IOs:
    latency = np.asarray(latency, float)
    n = len(latency)
    submit = np.arange(n) * 1000.0 if submit is None else np.asarray(submit, float)
    return IOs(submit, latency, np.full(n, 4096.0), np.ones(n, bool), np.zeros(n), np.asarray(throughput, float))


def test_queue_length_and_history_use_only_what_is_known_at_submission():
    trace = Trace(ts_ms=np.zeros(4), is_read=np.ones(4, bool), size=np.full(4, 4096), offset=np.zeros(4, int),
                  latency_us=np.array([1000.0, 100.0, 100.0, 100.0]), submit_ms=np.array([0.0, 0.1, 0.5, 2.0]),
                  returned=np.full(4, 4096))
    ios = prepare(trace)
    assert ios.queue.tolist() == [0, 1, 1, 0]  # at 0.5 ms the first I/O is still out, the second done
    X = features(ios, depth=2)
    assert X.shape == (4, 2 + 3 * 2)
    assert X[2, 2] == 100.0  # the last completed before 0.5 ms is the second (done at 0.2 ms)
    assert X[1, 2] == 0.0  # nothing had completed at 0.1 ms
    assert X[3, 2] == 1000.0 and X[3, 3] == 100.0  # at 2 ms: the first finished last (1.0 ms), the third at 0.6


def test_period_labelling_marks_busy_periods_until_throughput_recovers():
    # fast I/Os, then a busy start (high latency, low throughput), 3 more below-median I/Os, recovery
    latency = [100] * 20 + [5000, 300, 300, 300] + [100] * 20
    throughput = [40] * 20 + [1, 5, 5, 5] + [40] * 20
    labels = period_labels(np.array(latency, float), np.array(throughput, float))
    assert labels.tolist() == [False] * 20 + [True] * 4 + [False] * 20


def test_the_three_noise_filter_stages():
    labels = np.array([0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0], bool)
    latency = np.array([100, 100, 900, 950, 100, 1000, 980, 100, 100, 800, 5000, 100], float)
    throughput = np.array([40, 40, 4, 3, 60, 3, 4, 40, 40, 5, 1, 40], float)
    slow = outliers_in_slow_periods(labels, latency, throughput)
    assert np.flatnonzero(slow).tolist() == [4]  # fast and high-throughput inside a slow period
    fast = outliers_in_fast_periods(labels, latency, throughput)
    assert 10 in np.flatnonzero(fast).tolist()  # a spike inside a fast period
    bursts = short_bursts(labels, longest=3)
    assert np.flatnonzero(bursts).tolist() == [9]  # a slow run of one; the run of five stays
    keep = noise_filter(labels, latency, throughput)
    assert not keep[4] and not keep[9] and not keep[10] and keep[2]


def test_a_trace_too_short_to_split_is_refused():
    n = 300
    trace = Trace(np.arange(n, dtype=float), np.ones(n, bool), np.full(n, 4096), np.zeros(n, int),
                  np.full(n, 100.0), np.arange(n, dtype=float), np.full(n, 4096))
    with pytest.raises(AdmissionDataError, match="too few I/Os to split"):
        Split.chronological(prepare(trace))


# --- the pipeline through the command line ---------------------------------------------------------------
@pytest.mark.slow
def test_admission_train_reports_accuracy():
    proc = run_cli("admission", "train", "--trace", str(shared(TRACE)), "--labeling", "period", "--model",
                   "classifier", "--history-depth", "3", "--json", check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("roc_auc", "pr_auc", "f1", "fnr", "fpr", "batched_us_per_io", "single_us_per_io"):
        assert key in result and np.isfinite(result[key])
    assert 0.5 < result["roc_auc"] <= 1.0


@pytest.mark.slow
def test_training_is_reproducible_with_a_seed():
    from storetune.runners.admission.pipeline import AdmissionConfig, Pipeline

    cfg = AdmissionConfig(model_kind="regressor", loss_bias=0.3)
    first = Pipeline(shared(TRACE), seed=7, epochs=2)
    again = Pipeline(shared(TRACE), seed=7, epochs=2)
    X = first.inputs(cfg, "test")
    assert np.array_equal(first.model(cfg).scores(X), again.model(cfg).scores(X))


@pytest.mark.slow
def test_the_decision_threshold_trades_misses_for_false_alarms_without_retraining():
    """At 0.5 the classifier flagged almost nothing (slow reads are a fifth of the test part)."""
    from storetune.runners.admission.pipeline import AdmissionConfig, Pipeline

    pipeline = Pipeline(shared(TRACE), seed=0, epochs=2)
    flagged = []
    for cutoff in (0.5, 0.2, 0.1):
        cfg = AdmissionConfig(model_kind="classifier", labeling="period", features="heimdall", decision_threshold=cutoff)
        flagged.append(pipeline.decide(cfg, "test").mean())
    assert flagged[0] <= flagged[1] < flagged[2] and flagged[0] < 0.01 < flagged[2]
    assert len(pipeline._models) == 1  # one model: the threshold only reads its scores


@pytest.mark.slow
def test_boosted_trees_are_a_classifier_of_the_admission_space(sqlite_url):
    from storetune.runners import make_runner

    runner = make_runner("admission", trace=str(shared(TRACE)), epochs=1)
    config = runner.space.validate({"model_kind": "boosted_trees", "decision_threshold": 0.25, "class_weight": 2.0,
                                    "labeling": "cutoff", "threshold_percentile": 90.0}, fill_defaults=True)
    assert "network" not in config  # trees have no network
    m = runner.run(config, runner.workload, seed=0)
    assert m.status.value == "SUCCEEDED" and 0 < m.metrics["failover_rate"] < 1
    none = runner.run(runner.space.validate({"model_kind": "classifier", "decision_threshold": 0.95},
                                            fill_defaults=True), runner.workload, seed=0)
    assert m.metrics["mean_latency_us"] != none.metrics["mean_latency_us"]
    proc = run_cli("admission", "train", "--trace", str(shared(TRACE)), "--model", "boosted_trees", "--json",
                   check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["network"] is None and 0.6 < result["roc_auc"] <= 1.0


@pytest.mark.slow
def test_baselines_and_simulate(tmp_path):
    proc = run_cli("admission", "baselines", "--trace", str(shared(TRACE)), "--replicas", "3",
                   "--failover-cost-us", "30", "--json", check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])["baselines"]
    names = {"no_admission", "random", "hedging", "perfect", "fail_if_slow", "brt", "time_windows",
             "threshold_equation", "bias_equation", "bias_hindsight",
             "global", "greedy", "greedy_skip"}
    assert set(result) == names
    for r in result.values():
        assert {"mean_latency_us", "p99_latency_us", "failover_rate"} <= r.keys()
    assert result["perfect"]["mean_latency_us"] < result["no_admission"]["mean_latency_us"]
    # the perfect predictor is the ceiling: no strategy gains more, and its share is 1 by definition
    assert all(r["mean_latency_us"] >= result["perfect"]["mean_latency_us"] for r in result.values())
    assert result["perfect"]["perfect_gain_share"] == 1 and result["no_admission"]["perfect_gain_share"] == 0
    assert 0 < result["global"]["perfect_gain_share"] < 1
    assert result["bias_hindsight"]["mean_latency_us"] <= result["global"]["mean_latency_us"] + 1e-9
    sim = json.loads(run_cli("admission", "simulate", "--trace", str(shared(TRACE)), "--threshold-us", "2000",
                             "--replicas", "3", "--failover-cost-us", "30", "--fan-out", "4", "--json",
                             check=True).stdout.strip().splitlines()[-1])
    assert sim["replicas"] == 3 and sim["p99_latency_us"] >= sim["p50_latency_us"] and sim["fan_out"] == 4


@pytest.mark.parametrize(
    "args, message",
    [
        (["simulate", "--threshold-us", "99999999"], "outside the trace's training latencies"),
        (["simulate", "--replicas", "0"], "--replicas must be at least 1"),
        (["train", "--model", "regressor", "--loss-bias", "1.2"], r"--loss-bias must be in [0, 1)"),
        (["train", "--model", "classifier", "--class-weight", "0.5"], "--class-weight must be at least 1"),
        (["simulate", "--failover-cost-us", "inf"], "--failover-cost-us must be a finite number of microseconds"),
        (["baselines", "--failover-cost-us", "-30"], "at least 0, not -30"),
        (["train", "--decision-threshold", "1.5"], "--decision-threshold must be in (0, 1), not 1.5"),
        (["train", "--model", "forest"], "--model 'forest': choose classifier, regressor, boosted_trees"),
        (["train", "--joint", "0"], "--joint must be at least 1 (I/Os per decision), not 0"),
        (["simulate", "--fan-out", "0"], "--fan-out must be at least 1"),
        (["train", "--labeling", "cutoff", "--threshold-percentile", "150"], "--threshold-percentile must be in (0, 100), not 150"),
        (["baselines", "--threshold-percentile", "-5"], "--threshold-percentile must be in (0, 100), not -5"),
    ],
)
def test_admission_bad_input_is_one_line(args, message):
    proc = run_cli("admission", args[0], "--trace", str(shared(TRACE)), *args[1:])
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr


def test_a_trace_missing_some_latencies_is_refused_naming_the_line(tmp_path):
    lines = shared(TRACE).read_text().splitlines(keepends=True)
    fields = lines[99].split(",")
    fields[1] = "-1"  # not measured
    lines[99] = ",".join(fields)
    path = tmp_path / "t.csv"
    path.write_text("".join(lines))
    proc = run_cli("admission", "train", "--trace", str(path))
    assert proc.returncode == 2 and proc.stderr.strip().endswith(f"{path}: line 100: no latency (-1); admission learns from every I/O's latency")


def test_a_trace_without_latency_is_refused():
    proc = run_cli("admission", "train", "--trace", str(shared("heimdall_msr/msr.cut.per_10k.rw_20_80.105.trace.txt")))
    assert proc.returncode == 2 and "has no latencies; replay it first" in proc.stderr


@pytest.mark.slow
def test_tune_the_admission_space_with_pinned_parameters(sqlite_url):
    proc = run_cli("tune", "--runner", "admission", "--trace", str(shared(TRACE)), "--space", "admission",
                   "--algorithm", "bo", "--budget", "6", "--fix", "replicas=3", "--fix", "failover_cost_us=30",
                   "--metric", "mean_latency_us", "--parallel", "2", "--json", db=sqlite_url, check=True)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["best_config"]["replicas"] == 3 and summary["best_config"]["failover_cost_us"] == 30
    assert summary["test_value"] is not None and summary["test_value"] > 0
    best = json.loads(run_cli("best", str(summary["campaign"]), "--json", db=sqlite_url, check=True).stdout)
    assert best["value"] == summary["best_value"] and best["test_value"] == summary["test_value"]
    # tune's box shows the held-out value too (it was only in --json and `best`)
    shown = run_cli("tune", "--resume", str(summary["campaign"]), db=sqlite_url, check=True).stdout
    assert f"held-out value │ {summary['test_value']:.6g} (the best configuration on the test part)" in " ".join(shown.split())
    bad = run_cli("tune", "--runner", "admission", "--trace", str(shared(TRACE)), "--fix", "replicas=9", db=sqlite_url)
    assert bad.returncode == 2 and "replicas=" in bad.stderr and "allowed: 1 to 5" in bad.stderr
    # one replica leaves nowhere to fail over to: every configuration would measure the same (newcomer trial)
    one = run_cli("tune", "--runner", "admission", "--trace", str(shared(TRACE)), "--fix", "replicas=1",
                  "--budget", "3", db=sqlite_url)
    assert one.returncode == 2 and one.stderr.strip() == (
        "error: replicas=1 leaves a read no replica to fail over to, so every configuration measures the same: "
        "pin 2 or more, or leave replicas to the search")
    assert [c.id for c in History(sqlite_url).campaigns()] == [summary["campaign"]]  # nothing recorded


def test_an_admission_campaign_over_a_file_system_space_is_refused(sqlite_url):
    """The admission runner reads only the policy's knobs: over storage_v1 every trial measured the default
    policy, and `best` reported a file system chosen by the failover draws' noise."""
    proc = run_cli("tune", "--runner", "admission", "--trace", str(shared(TRACE)), "--space", "storage_v1",
                   "--budget", "2", db=sqlite_url)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: the admission runner measures admission spaces, not 'storage_v1': fs, block_size, inode_size ... "
        "are no knobs of the admission policy")
