"""Adaptive repeats: the intensifier's rule, and campaigns that re-measure challengers (budget,
the reported best, resume, parallel workers, bad input)."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli, shared
from runners import make_runner
from search_spaces import Config
from test_campaign import FlakyRunner, spec
from tuner import Campaign, History, best_trial, make_tuner
from tuner.intensify import Standing, incumbent, next_remeasure

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


def test_retell_replaces_the_observation_and_the_model_sees_the_new_mean(bdbc):
    space = make_runner("dataset", dataset=str(bdbc)).space
    for algorithm in ("bo", "auto", "sa"):
        tuner = make_tuner(algorithm, space, seed=1, direction="min")
        configs = tuner.ask(3)
        for i, c in enumerate(configs):
            tuner.tell(c, 10.0 + i)
        tuner.retell(configs[0], 20.0)
        assert len(tuner.observations) == 3 and tuner.told_loss(configs[0]) == 20.0
        assert tuner.best.config == configs[1]
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
    best = best_trial(trials, "min")
    assert best.runs == max(t.runs for t in trials) == summary.best_runs
    assert summary.best_value == best.value and history.best_trial(summary.campaign, "min").id == best.id
    lucky = min(trials, key=lambda t: t.value)
    assert lucky.runs < best.runs or lucky.id == best.id


def test_fixed_repeats_are_the_same_campaign_as_before(sqlite_url):
    history = History(sqlite_url)
    fixed = Campaign.create(history, spec(POSTGRES, budget=15, seed=2, repeats=2)).run()
    capped = Campaign.create(history, spec(POSTGRES, budget=15, seed=2, repeats=2, max_repeats=2)).run()
    assert fixed.evaluated == capped.evaluated == 15 and fixed.measurements == capped.measurements == 30
    assert fixed.best_config == capped.best_config and fixed.best_value == capped.best_value


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
    from tuner.executor import ProcessExecutor

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
    assert summary["evaluated"] == summary["measurements"] == 30 and summary["best_runs"] >= 1
    best = json.loads(run_cli("best", str(summary["campaign"]), "--json", db=sqlite_url, check=True).stdout)
    assert len(best["repeats"]) == summary["best_runs"] and best["config"] == summary["best_config"]
    assert Config(best["config"]) == Config(summary["best_config"])


def test_found_after_counts_the_re_measurements_before_the_best(sqlite_url):
    from api.cli import evaluations_to_find

    history = History(sqlite_url)
    first: dict[int, int] = {}  # trial number -> the evaluation that measured it first
    summary = Campaign.create(history, spec(POSTGRES, budget=50, seed=5, max_repeats=3)).run(
        on_trial=lambda r: first.setdefault(r.number, r.evaluated))
    trials = history.trials(summary.campaign, measurements=True)
    top = best_trial(trials, "min")
    assert evaluations_to_find(trials, top, 1) == first[top.number]
    assert first[top.number] > top.number + 1 or all(t.runs == 1 for t in trials if t.number < top.number)
