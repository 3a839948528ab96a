"""Adaptive repeats: the intensifier's rule, and campaigns that re-measure challengers (budget,
the reported best, resume, parallel workers, bad input)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conftest import run_cli, shared
from storetune.runners import Status, make_runner
from storetune.search_spaces import Config
from test_campaign import FlakyRunner, spec
from storetune.tuner import Campaign, History, best_trial, make_tuner
from storetune.tuner.objectives.intensify import Standing, incumbent, next_finalist, next_remeasure

POSTGRES = shared("moot_configs/PostgreSQL.csv")  # 22 repeats per configuration: the noisiest table


def test_the_incumbent_is_the_best_mean_among_the_most_measured():
    standings = [Standing(1, 3, 10.0), Standing(2, 1, 5.0), Standing(3, 3, 9.0), Standing(4, 2, None)]
    assert incumbent(standings, "min").trial == 3  # trial 2 looks better, measured once
    assert incumbent(standings, "max").trial == 1


def test_a_challenger_that_looks_better_is_measured_again_the_best_looking_first():
    standings = [Standing(1, 3, 10.0), Standing(2, 1, 9.0), Standing(3, 2, 8.0), Standing(4, 1, 11.0)]
    assert next_remeasure(standings, "min", max_repeats=5) == 3
    assert next_remeasure(standings, "min", max_repeats=5, busy={3}) == 2
    assert next_remeasure(standings, "min", max_repeats=5, busy={1}) is None  # the bar is being measured
    assert next_remeasure(standings, "max", max_repeats=5) == 4


def test_the_incumbent_is_measured_again_when_a_race_ends_up_to_the_cap():
    lost = [Standing(1, 2, 10.0), Standing(2, 2, 10.5)]  # a challenger got as many runs and lost
    assert next_remeasure(lost, "min", max_repeats=3) == 1
    assert next_remeasure(lost, "min", max_repeats=2) is None
    won = [Standing(1, 2, 10.0), Standing(2, 2, 9.5)]  # ... or won: the new incumbent is measured again
    assert next_remeasure(won, "min", max_repeats=3) == 2
    alone = [Standing(1, 2, 10.0), Standing(2, 1, 12.0), Standing(3, 1, None)]
    assert next_remeasure(alone, "min", max_repeats=3) is None


def test_finalists_are_the_configurations_within_noise_of_the_incumbent_the_closest_first():
    standings = [Standing(1, 2, 10.0), Standing(2, 1, 11.0), Standing(3, 1, 12.0), Standing(4, 1, 30.0),
                 Standing(5, 2, 10.5), Standing(6, 1, None)]
    assert next_finalist(standings, "min", 3, run_sd=1.0) == 2  # 11 and 12 are within 2 standard errors of 10
    assert next_finalist(standings, "min", 3, run_sd=1.0, busy={2}) == 3
    assert next_finalist(standings, "min", 3, run_sd=1.0, busy={2, 3}) is None  # 30 is far; 10.5 has the runs
    assert next_finalist(standings, "min", 3, run_sd=0.1) is None  # with little noise, one run says enough
    assert next_finalist(standings, "min", 1, run_sd=1.0) is None  # the cap
    assert next_finalist(standings, "min", 3, run_sd=None) is None  # no configuration was measured twice
    assert next_finalist(standings, "max", 3, run_sd=1.0) == 4  # maximised: 30 is ahead of the incumbent, 10.5


def test_once_the_space_is_exhausted_the_finalists_are_measured_as_often_as_the_incumbent(sqlite_url, tmp_path):
    table = tmp_path / "noisy.csv"  # six configurations, four repeats each: two close at the top, four far behind
    rows = {(1, 1): (6, 14, 8, 12), (1, 2): (9, 13, 7, 15), (2, 1): (50, 54, 48, 56), (2, 2): (60, 64, 58, 66),
            (3, 1): (70, 74, 68, 76), (3, 2): (80, 84, 78, 86)}
    table.write_text("a,b,PERF-\n" + "".join(f"{a},{b},{v}\n" for (a, b), vs in rows.items() for v in vs))
    history = History(sqlite_url)
    summary = Campaign.create(history, spec(table, budget=12, seed=1, max_repeats=2)).run()
    runs = {(t.config["a"], t.config["b"]): t.runs for t in history.trials(summary.campaign, measurements=True)}
    assert runs[1, 1] == runs[1, 2] == 2  # whichever leads, the other was within noise and was measured again
    assert len(runs) == 6 and sum(runs.values()) == summary.evaluated < 12  # not every one: 40 behind is far


def test_retell_replaces_the_observation_and_the_model_sees_the_new_mean(bdbc):
    space = make_runner("dataset", dataset=str(bdbc)).space
    for algorithm in ("bo", "auto", "sa"):
        tuner = make_tuner(algorithm, space, seed=1, direction="min")
        configs = tuner.ask(3)
        for i, c in enumerate(configs):
            tuner.tell(c, 10.0 + i)
            assert tuner.loss_scale() == pytest.approx(0.5 * i or 10.0)  # kept between tells, renewed by each
        tuner.retell(configs[0], 20.0)
        assert len(tuner.observations) == 3 and tuner.told_loss(configs[0]) == 20.0
        assert tuner.best.config == configs[1]
        assert tuner.loss_scale() == pytest.approx(4.5)  # the IQR of 20, 11, 12 (not of 10, 11, 12: 1)
        warped = sorted(tuner.warp(v) for v in (20.0, 11.0, 12.0))  # a scale of its own, kept apart
        assert tuner.loss_scale(warped=True) == pytest.approx((warped[1] + warped[2]) / 2 - (warped[0] + warped[1]) / 2)
        assert tuner.loss_scale() == pytest.approx(4.5)
        if algorithm == "auto":
            assert all(m.loss_scale() == pytest.approx(4.5) for m in tuner.members)
        if algorithm == "bo":
            assert tuner._optimizer.yi[0] == pytest.approx(tuner.warp(20.0))
        if algorithm == "auto":
            assert all(m.told_loss(configs[0]) == 20.0 for m in tuner.members)


def test_a_campaign_re_measures_within_its_budget_and_reports_the_incumbent(sqlite_url):
    history = History(sqlite_url)
    summary = Campaign.create(history, spec(POSTGRES, budget=60, seed=4, max_repeats=4)).run()
    trials = history.trials(summary.campaign, measurements=True)
    re_measured = [t for t in trials if t.runs > 1]
    assert re_measured, "a noisy table gave no challenger a second run"
    assert summary.evaluated == summary.measurements == 60 == len(trials) + sum(t.runs - 1 for t in trials)
    assert max(t.runs for t in trials) <= 4
    for t in trials:  # each run is one more repeat, with the seed a fixed-repeat trial would have used
        assert [m.repeat for m in t.measurements] == list(range(t.runs))
        values = [m.metrics["Performance"] for m in t.measurements]
        assert t.value == pytest.approx(sum(values) / len(values))
    best = best_trial(trials, "min", most_measured=True)
    assert best.runs == max(t.runs for t in trials) == summary.best_runs
    assert summary.best_value == best.value and history.best_trial(summary.campaign, "min", True).id == best.id
    lucky = min(trials, key=lambda t: t.value)
    assert lucky.runs < best.runs or lucky.id == best.id


def test_the_reported_best_of_an_adaptive_campaign_is_never_a_lucky_first_run(sqlite_url):
    history = History(sqlite_url)
    summary = Campaign.create(history, spec(POSTGRES, budget=40, seed=4, max_repeats=3)).run()
    record, trials = history.campaign(summary.campaign), history.trials(summary.campaign, measurements=True)
    incumbent = best_trial(trials, "min", most_measured=True)
    # a configuration measured once, better than the incumbent: the end of a budget cut its race short
    lucky = next(t for t in trials if t.runs == 1)
    lucky = dataclasses.replace(lucky, value=incumbent.value - 1000.0)
    fields = {k: getattr(record, k) for k in ("space_name", "space_fingerprint", "space", "runner", "runner_settings",
                                              "workload_name", "workload_fingerprint", "workload", "device",
                                              "algorithm", "algorithm_params", "objective_metric",
                                              "objective_direction", "budget", "seed", "repeats", "max_repeats",
                                              "batch_size")}
    copied = history.write_campaign({**fields, "state": "finished"},
                                    [lucky if t.id == lucky.id else t for t in trials])
    rows = history.trials(copied, measurements=True)
    for reader in (lambda: best_trial(rows, "min", most_measured=True), lambda: history.best_trial(copied, "min", True)):
        assert reader().config == incumbent.config and reader().runs == 3
    assert best_trial(rows, "min").config == lucky.config  # the plain rule (fixed repeats) takes the best mean
    assert history.best_trial(copied, "min").config == lucky.config
    from storetune.tuner import CampaignSummary

    assert CampaignSummary.of(history.campaign(copied), rows, "").best_config == incumbent.config


def test_a_failed_re_measurement_fails_the_configuration_as_a_failed_repeat_does(sqlite_url):
    again: list[int] = []
    history = History(sqlite_url)
    Campaign.create(history, spec(POSTGRES, budget=20, seed=3, max_repeats=3)).run(
        on_trial=lambda r: again.append(r.evaluated) if r.remeasured else None)
    runner = FlakyRunner(make_runner("dataset", dataset=str(POSTGRES)), {again[0]: RuntimeError("disk on fire")})
    summary = Campaign.create(history, spec(POSTGRES, budget=20, seed=3, max_repeats=3), runner=runner).run()
    (failed,) = [t for t in history.trials(summary.campaign, measurements=True) if t.status == "FAILED"]
    assert failed.runs >= 2 and failed.measurements[-1].status == "FAILED" and failed.value is None
    assert failed.reason == "runner raised RuntimeError: disk on fire" and summary.evaluated == 20


def test_a_resume_settles_a_mean_its_driver_did_not_record_before_telling_the_algorithm(sqlite_url):
    history = History(sqlite_url)
    summary = Campaign.create(history, spec(POSTGRES, budget=30, seed=6, max_repeats=3)).run()
    raced = next(t for t in history.trials(summary.campaign, measurements=True) if t.runs > 1)
    history.finish_trial(raced.id, Status.SUCCEEDED, raced.measurements[0].metrics["Performance"], None)  # stale mean
    campaign = Campaign.resume(history, summary.campaign)
    campaign.run()
    assert history.trial(summary.campaign, raced.number).value == pytest.approx(raced.value)
    assert campaign.tuner.told_loss(Config(raced.config)) == pytest.approx(raced.value)


def test_a_resumed_campaign_measures_its_queued_trials_before_any_re_measurement():
    from storetune.tuner.history.memory import MemoryStore
    from storetune.tuner.search.loop import run_loop
    from storetune.tuner.objectives.objective import Objective
    from storetune.runners import Measurement, Status as S

    runner = make_runner("dataset", dataset=str(POSTGRES))
    objective = Objective("Performance", "min")
    store = MemoryStore()
    a, b, c = list(runner.space.enumerate())[:3]
    done = store.add_trials(0, [a, b], [1, 2])
    for t, value in zip(done, (10.0, 9.0)):  # two configurations measured once each: a race has just ended
        store.add_measurement(t.id, 0, Measurement(S.SUCCEEDED, {"Performance": value}))
        store.finish_trial(t.id, S.SUCCEEDED, value, None)
    (queued,) = store.add_trials(0, [c], [3])  # in flight when the driver died
    tuner = make_tuner("random", runner.space, seed=0, direction="min")
    for t in store.trials():
        if t.value is not None:
            tuner.tell(Config(t.config), t.value)
    outcome = run_loop(campaign_id=0, tuner=tuner, runner=runner, objective=objective, store=store, budget=3,
                       repeats=1, batch_size=1, seed=0, evaluated=2, queue=[queued], max_repeats=3,
                       finished=store.trials(measurements=True)[:2])
    rows = store.trials()
    assert outcome.evaluated == 3 and rows[2].status == "SUCCEEDED" and [t.runs for t in rows] == [1, 1, 1]


def test_a_campaign_interrupted_during_a_re_measurement_resumes_its_races(sqlite_url):
    history = History(sqlite_url)
    again: list[int] = []  # the evaluations that were re-measurements (one run each: the runner's call)
    whole = Campaign.create(history, spec(POSTGRES, budget=40, seed=7, max_repeats=3)).run(
        on_trial=lambda r: again.append(r.evaluated) if r.remeasured else None)
    call = next(e for e in again if e > 10)
    runner = FlakyRunner(make_runner("dataset", dataset=str(POSTGRES)), {call: KeyboardInterrupt()})
    split = Campaign.create(history, spec(POSTGRES, budget=40, seed=7, max_repeats=3), runner=runner)
    with pytest.raises(KeyboardInterrupt):
        split.run()
    assert history.campaign(split.id).state == "interrupted"
    assert all(t.status == "SUCCEEDED" for t in history.trials(split.id))  # the trial raced keeps its runs
    resumed = Campaign.resume(history, split.id).run()

    def outcome(campaign_id):
        return [(t.config_hash, t.runs, t.value) for t in history.trials(campaign_id) if t.status != "STALE"]

    assert resumed.evaluated == 40 and outcome(split.id) == outcome(whole.campaign)
    assert resumed.best_config == whole.best_config


def test_parallel_workers_re_measure_each_trial_once_at_a_time(sqlite_url):
    from storetune.tuner.execution.local import ProcessExecutor

    history = History(sqlite_url)
    campaign = Campaign.create(history, spec(POSTGRES, budget=30, seed=1, batch_size=2, max_repeats=3),
                               executor=ProcessExecutor(2))
    summary = campaign.run()
    trials = history.trials(campaign.id, measurements=True)
    assert summary.evaluated == 30 == len(trials) + sum(t.runs - 1 for t in trials)
    assert all([m.repeat for m in t.measurements] == list(range(t.runs)) for t in trials)
    assert any(t.runs > 1 for t in trials)


def test_a_cap_below_the_repeats_is_refused_and_nothing_is_recorded(sqlite_url):
    proc = run_cli("tune", "--runner", "dataset", "--dataset", str(POSTGRES), "--repeats", "3", "--max-repeats", "2",
                   db=sqlite_url)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --max-repeats 2 is below --repeats 3: every configuration is measured 3 times first; "
        "the cap must be at least that"]
    assert History(sqlite_url).campaigns() == []


def test_the_cli_reports_the_measurements_behind_the_best(sqlite_url):
    proc = run_cli("tune", "--runner", "dataset", "--dataset", str(POSTGRES), "--budget", "30", "--max-repeats", "3",
                   "--json", db=sqlite_url, check=True)
    summary = json.loads(proc.stdout)
    assert summary["evaluated"] == summary["measurements"] == 30
    history = History(sqlite_url)
    assert summary["best_runs"] == max(t.runs for t in history.trials(summary["campaign"]) if t.status == "SUCCEEDED")
    best = json.loads(run_cli("best", str(summary["campaign"]), "--json", db=sqlite_url, check=True).stdout)
    assert len(best["repeats"]) == summary["best_runs"] and best["config"] == summary["best_config"]
    assert Config(best["config"]) == Config(summary["best_config"])


def test_found_after_counts_the_re_measurements_before_the_best(sqlite_url):
    from storetune.api.cli.results import evaluations_to_find

    history = History(sqlite_url)
    first: dict[int, int] = {}  # trial number -> the evaluation that measured it first
    summary = Campaign.create(history, spec(POSTGRES, budget=50, seed=5, max_repeats=3)).run(
        on_trial=lambda r: first.setdefault(r.number, r.evaluated))
    trials = history.trials(summary.campaign, measurements=True)
    top = best_trial(trials, "min", most_measured=True)
    assert evaluations_to_find(trials, top, 1) == first[top.number]
    assert first[top.number] > top.number + 1 or all(t.runs == 1 for t in trials if t.number < top.number)


def test_the_report_of_an_adaptive_campaign_counts_evaluations_and_follows_the_incumbent(sqlite_url):
    from storetune.tuner.analysis.report import campaign_data

    history = History(sqlite_url)
    summary = Campaign.create(history, spec(POSTGRES, budget=40, seed=4, max_repeats=3)).run()
    trials = history.trials(summary.campaign, measurements=True)
    data = campaign_data(history, summary.campaign)
    assert data["evaluated"] == 40 and data["best"]["value"] == summary.best_value
    curve = data["convergence"]
    assert curve["evaluation"] == list(range(1, 41)) and curve["best"][-1] == pytest.approx(summary.best_value)
    assert sorted(curve["trial"]) == sorted(t.number for t in trials for _ in range(t.runs))  # one entry per run
    means = {t.number: [] for t in trials}
    for number, value in zip(curve["trial"], curve["value"]):  # each entry: the trial's mean after that run
        means[number].append(value)
    for t in trials:
        assert means[t.number][-1] == pytest.approx(t.value)
    assert data["near_optimal"]["trials"][0]["value"] <= summary.best_value
    # the service's progress counts the same, in one query: every run of a re-measured trial is an evaluation
    counts, evaluated = history.progress(summary.campaign, 1)
    assert evaluated == 40 == history.evaluations(summary.campaign, 1) and any(t.runs > 1 for t in trials)
    assert counts == history.status_counts(summary.campaign) and sum(counts.values()) == len(trials) < 40


def _repeated_table(path, repeats=8, seed=0):
    """40 configurations measured 8 times each: a rate per configuration, 3% noise per run."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lines = ["a,b,repeat,status,reason,ops_per_s"]
    for a in range(8):
        for b in range(5):
            rate = 1000 - 30 * (a - 5) ** 2 - 20 * (b - 2) ** 2
            lines += [f"{a},{b},{r},SUCCEEDED,,{rate * rng.normal(1, 0.03):.3f}" for r in range(repeats)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("workers", [1, 2])
def test_a_race_on_repeats_stops_the_configurations_that_lose_it(tmp_path, workers):
    """`--repeats 8 --race wilcoxon`: a configuration's runs race the incumbent's in the worker, and the clearly
    worse ones stop after a few runs, with the test's p-value in their reason; the incumbent has all its runs,
    and no configuration that stopped beats it on its own table's mean."""
    from storetune.runners import make_runner
    from storetune.tuner.algorithms.registry import make_tuner
    from storetune.tuner.execution.local import LocalExecutor, ProcessExecutor
    from storetune.tuner.history.memory import MemoryStore
    from storetune.tuner.objectives.intensify import RepeatRace
    from storetune.tuner.objectives.objective import Objective
    from storetune.tuner.search.loop import run_loop

    runner = make_runner("dataset", dataset=[str(_repeated_table(tmp_path / "t.csv"))])
    store, tuner = MemoryStore(), make_tuner("random", runner.space, seed=1, direction="max")
    executor = LocalExecutor() if workers == 1 else ProcessExecutor(workers)
    try:
        run_loop(campaign_id=0, tuner=tuner, runner=runner, objective=Objective("ops_per_s", "max"), store=store,
                 budget=30, repeats=8, batch_size=workers, seed=0, executor=executor,
                 race=RepeatRace("max", 8))
    finally:
        executor.close()
    trials = store.trials(measurements=True)
    raced = [t for t in trials if t.reason and t.reason.startswith("raced out after ")]
    assert raced and all(t.status == "SUCCEEDED" and 4 <= t.runs < 8 and "Wilcoxon signed-rank p = " in t.reason
                         for t in raced)
    whole = [t for t in trials if t.runs == 8]
    best = max(whole, key=lambda t: t.value)
    means = runner.table.means("ops_per_s")
    assert all(means[Config(t.config)] < means[Config(best.config)] for t in raced)
    assert sum(t.runs for t in trials) < 8 * len(trials)


def test_race_wilcoxon_from_the_command_line_and_its_refusals(sqlite_url, tmp_path):
    table = _repeated_table(tmp_path / "t.csv")
    out = run_cli("tune", "--dataset", str(table), "--repeats", "8", "--race", "wilcoxon", "--budget", "20",
                  "--algorithm", "random", "--seed", "2", "--json", db=sqlite_url, check=True)
    campaign = json.loads(out.stdout.splitlines()[-1])["campaign"]
    history = History(sqlite_url)
    assert history.campaign(campaign).fidelity == {"kind": "none", "budget_s": None, "race": "wilcoxon"}
    trials = history.trials(campaign)
    assert any(t.runs < 8 and t.reason.startswith("raced out after") for t in trials)
    for args, said in ((["--repeats", "4"], "race wilcoxon with 4 repeats cannot stop a configuration early"),
                       (["--repeats", "8", "--max-repeats", "10"], "does not combine with an objective over several "
                                                                  "metrics, adaptive repeats"),
                       (["--repeats", "8", "--race", "fast"], "race 'fast': choose none or wilcoxon")):
        out = run_cli("tune", "--dataset", str(table), "--budget", "10", "--race", "wilcoxon", *args, db=sqlite_url)
        assert out.returncode == 2 and said in " ".join(out.stderr.split()), (args, out.stderr)
