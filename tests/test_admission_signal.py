"""Where the admission signal is: the feature groups (known at submission only), `storetune admission
explain` on traces whose signal the test planted, and the bad input of issue 15."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, run_cli
from storetune.runners.admission.features import NEVER_US, AdmissionDataError, digits, features, prepare
from storetune.runners.traces import Trace


def write_trace(path: Path, latency_us: np.ndarray, offset: np.ndarray, gap_ms: float = 1.0,
                is_read: np.ndarray | None = None) -> Path:
    """A FlashNet trace: ts_record, latency (us), type (1 read), size, offset, ts_submit (ms), returned."""
    n = len(latency_us)
    reads = np.ones(n, bool) if is_read is None else is_read
    rows = [f"{i * gap_ms:.3f},{int(lat)},{int(r)},4096,{int(off)},{i * gap_ms:.3f},4096\n"
            for i, (lat, off, r) in enumerate(zip(latency_us, offset, reads))]
    path.write_text("".join(rows))
    return path


def locality_trace(path: Path, n: int = 6000, seed: int = 0) -> Path:
    """Half the reads go to 50 hot offsets and are fast (a cache); the others go to offsets never
    touched before and are slow. Only the locality group can tell them apart."""
    rng = np.random.default_rng(seed)
    hot = rng.random(n) < 0.5
    offset = np.where(hot, rng.integers(0, 50, n) * 4096, (1000 + np.arange(n)) * 4096 * 7)
    latency = np.where(hot, rng.uniform(80, 150, n), rng.uniform(1500, 3000, n))
    return write_trace(path, latency, offset)


def hand_trace(latency_us: list[float], submit_ms: list[float], is_read: list[bool], offset: list[int]) -> Trace:
    n = len(latency_us)
    return Trace(ts_ms=np.asarray(submit_ms, float), is_read=np.asarray(is_read, bool), size=np.full(n, 4096),
                 offset=np.asarray(offset, int), latency_us=np.asarray(latency_us, float),
                 submit_ms=np.asarray(submit_ms, float), returned=np.full(n, 4096))


def test_outstanding_io_features_know_only_what_a_kernel_knows_at_submission():
    # I/O 0: a read, 0-5 ms; I/O 1: a write, 1-1.5 ms; I/O 2: a read, 2-2.1 ms; I/O 3: a read at 6 ms
    ios = prepare(hand_trace([5000, 500, 100, 100], [0, 1, 2, 6], [True, False, True, True], [0, 8192, 4096, 0]))
    X = features(ios, 1, ("pending",))
    reads, read_bytes, writes, write_bytes, oldest, mean_age = X.T
    assert reads.tolist() == [0, 1, 1, 0] and writes.tolist() == [0, 0, 0, 0]  # the write is done by 2 ms
    assert read_bytes.tolist() == [0, 4096, 4096, 0]
    assert oldest.tolist() == [0, 1000, 2000, 0]  # the first read has waited 1 ms, then 2 ms; all done at 6 ms
    assert mean_age.tolist() == [0, 1000, 2000, 0]
    distance, since = features(ios, 1, ("locality",)).T
    assert distance.tolist() == pytest.approx(np.log10(1 + np.array([0, 4096, 8192, 8192])).tolist())
    # offset 0 again at 6 ms, 6 ms after it was last touched; the others never were before
    assert since.tolist() == pytest.approx(np.log10(1 + np.array([NEVER_US, NEVER_US, NEVER_US, 6000])).tolist())


def test_linnos_digits():
    assert [d.tolist() for d in digits(np.array([7.0, 1234.0, 99999.0]), 4)] == [[0, 1, 9], [0, 2, 9], [0, 3, 9],
                                                                                [7, 4, 9]]
    ios = prepare(hand_trace([300, 1234, 100], [0, 0.1, 5], [True, True, True], [0, 4096, 8192]))
    X = features(ios, 1, ("linnos",))
    assert X.shape == (3, 3 + 4 * (4 + 3))
    assert X[2, 3:7].tolist() == [1, 2, 3, 4]  # the last completed latency, 1234 us, most significant digit first


def test_explain_finds_the_signal_the_trace_was_built_with(tmp_path, capsys):
    from storetune.api.cli.admission import show_explanation

    trace = locality_trace(tmp_path / "locality.trace.csv")
    proc = run_cli("admission", "explain", "--trace", str(trace), "--model", "boosted_trees", "--json", check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    pays = result["labelings"]["pays"]
    assert 1500 > result["pays_us"] > 140  # the perfect predictor fails over the slow half (fast: 80-150 us)
    assert 45 < result["pays_percentile"] < 55
    assert pays["most_signal"] == "locality"
    assert pays["ablation"]["only locality"]["roc_auc"] > 0.95
    assert pays["ablation"]["only heimdall"]["roc_auc"] < 0.7  # past latencies say nothing of the next offset
    assert pays["ablation"]["without locality"]["roc_auc"] < 0.7
    trees = pays["models"]["boosted_trees / extended"]
    assert trees["roc_auc"] > 0.95 and trees["calibration"]["brier"] < 0.05
    curve = trees["calibration"]["curve"]
    assert curve[0]["observed"] < 0.1 and curve[-1]["observed"] > 0.9
    assert set(result["labelings"]) == {"pays", "cutoff", "period"}
    assert set(pays["history_depth"]) == {"1", "3", "8"} and "joint4_extended_trees" in pays
    show_explanation(result)  # what the command prints without --json
    human = capsys.readouterr().out
    assert "most signal (pays): locality" in human and "calibration of boosted_trees / extended" in human


def test_the_extended_features_earn_their_keep_on_a_planted_signal(tmp_path):
    """A tuned configuration with the extended features fails over the slow reads; HEIMDALL's cannot see them."""
    from storetune.runners.admission.baselines import gain_share
    from storetune.runners.admission.pipeline import AdmissionConfig, Pipeline

    pipeline = Pipeline(locality_trace(tmp_path / "locality.trace.csv"), seed=0)
    none = pipeline.simulate(np.zeros(len(pipeline.reads("test")), bool), "test", 3, 30.0, 0).summary()
    slow = pipeline.ios.latency_us[pipeline.reads("test")] > 1000
    ideal = pipeline.simulate(slow, "test", 3, 30.0, 0).summary()
    shares = {}
    for feature_set in ("heimdall", "extended"):
        cfg = AdmissionConfig(model_kind="boosted_trees", labeling="cutoff", threshold_percentile=50.0,
                              features=feature_set)
        got = pipeline.simulate(pipeline.decide(cfg, "test"), "test", 3, 30.0, 0).summary()
        shares[feature_set] = gain_share(none["mean_latency_us"], ideal["mean_latency_us"], got["mean_latency_us"])
    assert shares["extended"] > 0.9 and shares["heimdall"] < 0.3, shares


@pytest.mark.parametrize(
    "args, message",
    [
        (["baselines", "--threshold-percentile", "90"], "the test part (1200 reads) holds no read slower than"),
        (["train", "--labeling", "cutoff", "--threshold-percentile", "90", "--model", "boosted_trees"],
         "holds no read slower than"),
        (["train", "--features", "everything"], "--features 'everything': choose heimdall, linnos, extended"),
        (["explain", "--model", "forest"], "--model 'forest': choose classifier, regressor, boosted_trees"),
    ],
)
def test_admission_bad_input_is_one_line(tmp_path, args, message):
    rng = np.random.default_rng(1)
    n = 6000  # the last 20% are all fast: nothing above the training part's p90
    latency = np.concatenate([rng.uniform(100, 3000, 4800), rng.uniform(100, 200, 1200)])
    trace = write_trace(tmp_path / "calm-end.trace.csv", latency, rng.integers(0, 1000, n) * 4096)
    proc = run_cli("admission", args[0], "--trace", str(trace), *args[1:])
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr


def test_a_network_without_torch_says_which_extra_installs_it(tmp_path):
    blocker = tmp_path / "site"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(  # torch, as if it were not installed
        "import importlib.abc, sys\n"
        "class NoTorch(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NoTorch())\n")
    trace = locality_trace(tmp_path / "locality.trace.csv", n=3000)
    env = {"PYTHONPATH": f"{blocker}:{ROOT}"}
    proc = run_cli("admission", "train", "--trace", str(trace), "--model", "classifier", env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "need torch, which is not installed: pip install -e '.[rl]'" in lines[0]
    trees = run_cli("admission", "train", "--trace", str(trace), "--model", "boosted_trees", "--json", env=env,
                    check=True)
    assert json.loads(trees.stdout.strip().splitlines()[-1])["roc_auc"] > 0.9  # trees need no torch


def test_a_campaign_measures_the_admission_defaults_first_and_baselines_judge_its_best(tmp_path, sqlite_url):
    from storetune.search_spaces import load_space
    from storetune.tuner import History

    trace = locality_trace(tmp_path / "locality.trace.csv")
    tune = run_cli("tune", "--runner", "admission", "--trace", str(trace), "--algorithm", "random", "--budget", "3",
                   "--fix", "replicas=2", "--metric", "mean_latency_us", "--json", db=sqlite_url, check=True)
    campaign = json.loads(tune.stdout.strip().splitlines()[-1])["campaign"]
    trials = History(sqlite_url, migrate=False).trials(campaign)
    default = load_space("admission").fix({"replicas": 2}).default()
    assert dict(trials[0].config) == dict(default) and len(trials) == 3  # the defaults first, then the search
    assert sum(dict(t.config) == dict(default) for t in trials) == 1
    proc = run_cli("admission", "baselines", "--trace", str(trace), "--replicas", "2", "--campaign", str(campaign),
                   "--json", db=sqlite_url, check=True)
    tuned = json.loads(proc.stdout.strip().splitlines()[-1])["baselines"]["tuned"]
    assert tuned["config"]["replicas"] == 2 and np.isfinite(tuned["perfect_gain_share"])
    wrong_r = run_cli("admission", "baselines", "--trace", str(trace), "--campaign", str(campaign), db=sqlite_url)
    assert wrong_r.returncode == 2 and "pass --replicas 2 --failover-cost-us 30" in wrong_r.stderr
    other = locality_trace(tmp_path / "other.trace.csv", seed=1)
    wrong_trace = run_cli("admission", "baselines", "--trace", str(other), "--replicas", "2", "--campaign",
                          str(campaign), db=sqlite_url)
    assert wrong_trace.returncode == 2 and "its test part would differ" in wrong_trace.stderr


def test_pays_labels_follow_the_deployment_and_never_look_at_the_test_part(tmp_path):
    from storetune.runners.admission.pipeline import AdmissionConfig, Pipeline

    trace = locality_trace(tmp_path / "locality.trace.csv")
    pipeline = Pipeline(trace, seed=0)
    cfg = AdmissionConfig(model_kind="boosted_trees", labeling="pays")
    threshold = pipeline.pays_threshold_us(3, 30.0)
    test = pipeline.ios.latency_us[pipeline.reads("test")]
    assert (pipeline.labels(cfg, "test") == (test > threshold)).all()
    # the test part's latencies, made ten times slower, move neither the threshold nor the training labels
    lines = trace.read_text().splitlines(keepends=True)
    cut = int(len(lines) * 0.8)
    slower = [",".join([f[0], str(int(f[1]) * 10), *f[2:]]) for f in (line.split(",") for line in lines[cut:])]
    changed = Pipeline(write_trace_lines(tmp_path / "slower-test.trace.csv", lines[:cut] + slower), seed=0)
    assert changed.pays_threshold_us(3, 30.0) == threshold
    assert (changed.labels(cfg, "fit") == pipeline.labels(cfg, "fit")).all()
    assert (changed.model(cfg).scores(changed.inputs(cfg, "fit")) == pipeline.model(cfg).scores(
        pipeline.inputs(cfg, "fit"))).all()
    # a failover dearer than any read never pays: nothing is slow, and judging a model is refused in one line
    dear = AdmissionConfig(model_kind="boosted_trees", labeling="pays", failover_cost_us=100_000.0)
    assert pipeline.pays_threshold_us(3, 100_000.0) == float("inf") and not pipeline.labels(dear, "fit").any()
    with pytest.raises(AdmissionDataError, match="no failover pays at r=3, f=100000 us"):
        pipeline.slow_labels(dear, "test")
    single = AdmissionConfig(model_kind="boosted_trees", labeling="pays", replicas=1)
    assert not pipeline.labels(single, "fit").any()  # one replica: nowhere to fail over to


def write_trace_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line if line.endswith("\n") else line + "\n" for line in lines))
    return path


@pytest.mark.parametrize("group", ["heimdall", "pending", "locality", "recent", "linnos"])
def test_no_feature_sees_an_io_submitted_later(group):
    """Rewrite everything about the I/Os after row 300 (latency, size, kind, offset): no row before it moves."""
    rng = np.random.default_rng(3)
    n, cut = 600, 300

    def trace(seed: int) -> Trace:
        r = np.random.default_rng(seed)
        later = np.arange(n) >= cut
        latency = np.where(later, r.uniform(50, 9000, n), rng_base[0])
        size = np.where(later, r.choice([4096, 65536], n), 4096)
        reads = np.where(later, r.random(n) < 0.3, rng_base[1])
        offset = np.where(later, r.integers(0, 50, n) * 4096, rng_base[2])
        submit = np.sort(rng_base[3])
        return Trace(ts_ms=submit, is_read=reads.astype(bool), size=size, offset=offset.astype(int),
                     latency_us=latency.astype(float), submit_ms=submit, returned=size)

    rng_base = (rng.uniform(50, 3000, n), rng.random(n) < 0.7, rng.integers(0, 50, n) * 4096,
                rng.uniform(0, 300, n))
    first, second = (features(prepare(trace(seed)), 3, (group,)) for seed in (1, 2))
    # an I/O submitted before row 300 may not have completed by then: compare the rows whose whole
    # history (every I/O submitted earlier) is unchanged, i.e. those before the cut in submission order
    assert np.array_equal(first[:cut], second[:cut])
    assert not np.array_equal(first[cut:], second[cut:])


def test_admission_json_is_strict_when_no_failover_pays(tmp_path):
    trace = locality_trace(tmp_path / "locality.trace.csv", n=3000)
    proc = run_cli("admission", "baselines", "--trace", str(trace), "--failover-cost-us", "100000", "--json",
                   check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1], parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    perfect = result["baselines"]["perfect"]
    assert perfect["threshold_us"] is None and perfect["failover_rate"] == 0  # failing nothing over is best
    assert result["baselines"]["no_admission"]["perfect_gain_share"] is None  # no gain to share
