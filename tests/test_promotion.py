"""ASHA's promoting form: once the search space is exhausted, the runs stopped at a rung are measured whole, the most
promising first, so that budget left over puts right what a rung got wrong."""

from __future__ import annotations

import json

import pytest

from test_fidelity import _series_table


@pytest.mark.parametrize("workers", [1, 2])
def test_an_exhausted_space_promotes_the_stopped_runs_furthest_rung_first_and_tells_their_whole_value(tmp_path,
                                                                                                     workers):
    from storetune.runners import Status, make_runner
    from storetune.tuner.algorithms.registry import make_tuner
    from storetune.tuner.execution.local import LocalExecutor, ProcessExecutor
    from storetune.tuner.history.memory import MemoryStore
    from storetune.tuner.objectives.fidelity import Rungs
    from storetune.tuner.objectives.objective import Objective
    from storetune.tuner.search.loop import run_loop, run_seconds, settle
    from storetune.tuner.search.remeasure import Shortened
    from storetune.tuner.search.remeasure import stored_measurements as _measurements

    runner = make_runner("dataset", dataset=[str(_series_table(tmp_path / "measurements.csv"))])
    rungs, objective = Rungs((1, 3, 9)), Objective("ops_per_s", "max")
    tuner = make_tuner("random", runner.space, seed=0, direction="max")
    executor = LocalExecutor() if workers == 1 else ProcessExecutor(workers)
    store, order = MemoryStore(), []
    try:
        outcome = run_loop(campaign_id=0, tuner=tuner, runner=runner, objective=objective, store=store, budget=75,
                           repeats=1, batch_size=workers, seed=0, executor=executor, fidelity=rungs,
                           on_trial=lambda r: order.append(r.number) if r.remeasured else None)
    finally:
        executor.close()
    trials = store.trials(measurements=True)
    promoted = [t for t in trials if len(t.measurements) == 2]
    assert len(trials) == 60 and outcome.evaluated == 75 and len(promoted) == 15 == len(order)
    for t in promoted:  # a stopped run, then a whole one no rung judged; the trial's value is the whole run's alone
        first, whole = t.measurements
        assert first.status == "STOPPED" and whole.status == "SUCCEEDED" and "judged" not in whole.env
        assert t.status == Status.SUCCEEDED.value and t.value == whole.metrics["ops_per_s"] and t.reason is None
        assert (t.runs, t.short_runs, t.whole_runs) == (2, 1, 1)
    assert outcome.device_s == run_seconds([m for t in trials for m in _measurements(t)])
    # the furthest rung first: no promoted run stopped at a rung before one still waiting that reached further
    reached = {t.number: t.measurements[0].env["stopped_at_rung"] for t in trials if t.measurements[0].status == "STOPPED"}
    waiting = [reached[t.number] for t in trials if t.status == Status.STOPPED.value]
    # (with two workers, a run still in flight when the space ran out can be stopped further on after the first
    # promotion was chosen: the order may rise once for each other worker, never more)
    levels = [reached[n] for n in order]
    assert sum(b > a for a, b in zip(levels, levels[1:])) <= workers - 1, levels
    assert min(reached[n] for n in order) >= max(waiting, default=0)
    # the algorithm knows each promoted configuration by its whole run, and a resume settles nothing differently
    told = {o.config: o.loss for o in tuner.observations}
    assert all(told[runner.space.validate(t.config)] == -t.value for t in promoted)
    assert [(t.status, t.value) for t in settle(trials, objective, store)] == [(t.status, t.value) for t in trials]
    # the rungs learn every first whole run, a promoted one's with the values it was stopped on
    short = Shortened(rungs, objective, trials)
    assert len(short.wholes) == sum(t.status == Status.SUCCEEDED.value for t in trials)
    assert set(short.stopped) == {t.id for t in trials if t.status == Status.STOPPED.value}


def test_a_campaign_with_budget_left_measures_every_stopped_run_whole_then_says_the_space_was_exhausted(sqlite_url,
                                                                                                         tmp_path):
    from conftest import run_cli
    from storetune.tuner.history.store import History

    table = _series_table(tmp_path / "measurements.csv", seed=1)
    out = run_cli("tune", "--dataset", str(table), "--fidelity", "asha", "--burn-in", "0", "--guard", "0",
                  "--budget", "120", "--seed", "1", "--json", db=sqlite_url, check=True)
    summary = json.loads(out.stdout.splitlines()[-1])
    trials = History(sqlite_url).trials(summary["campaign"], measurements=True)
    stopped_first = [t for t in trials if t.measurements[0].status == "STOPPED"]
    assert len(trials) == 60 and stopped_first and all(t.status == "SUCCEEDED" for t in trials)
    assert summary["evaluated"] == 60 + len(stopped_first) and "exhausted" in summary["note"]
    best = max(trials, key=lambda t: t.value)
    assert summary["best_value"] == best.value and summary["best_runs"] == 1


def test_with_max_repeats_the_most_measured_rule_counts_whole_runs_not_a_promoted_trial_s_stopped_one(sqlite_url,
                                                                                                       tmp_path):
    """A promoted trial has two measurements but one whole run: beside finalists measured whole twice, it is a
    challenger to measure again, not one of the most measured."""
    from conftest import run_cli
    from storetune.tuner.analysis.summary import best_trial
    from storetune.tuner.history.store import History

    table = _series_table(tmp_path / "measurements.csv", seed=5, repeats=2)
    out = run_cli("tune", "--dataset", str(table), "--fidelity", "asha", "--burn-in", "0", "--guard", "0",
                  "--max-repeats", "2", "--budget", "120", "--seed", "2", "--json", db=sqlite_url, check=True)
    summary = json.loads(out.stdout.splitlines()[-1])
    history = History(sqlite_url)
    trials = history.trials(summary["campaign"], measurements=True)
    assert any(t.short_runs and t.status == "SUCCEEDED" for t in trials), "some stopped run should be promoted"
    assert all(t.whole_runs == sum(m.status == "SUCCEEDED" for m in t.measurements) for t in trials)
    most = max(t.whole_runs for t in trials)
    expected = max((t for t in trials if t.status == "SUCCEEDED" and t.whole_runs == most), key=lambda t: t.value)
    assert most == 2 and summary["best_runs"] == 2 and summary["best_value"] == expected.value
    assert best_trial(trials, "max", most_measured=True).id == expected.id
    assert history.best_trial(summary["campaign"], "max", most_measured=True).id == expected.id


def test_with_rungs_repeats_wait_until_the_space_is_exhausted_and_the_incumbent_s_race_goes_first(tmp_path):
    """Repeats are the second fidelity: no configuration is measured again while the search still proposes new ones
    (that would spend device time before the best is found); once the space is exhausted, the races go first (the
    incumbent, then what looks better than it), the stopped runs are promoted between them, and whole runs are
    measured again up to the cap."""
    from storetune.runners import make_runner
    from storetune.tuner.algorithms.registry import make_tuner
    from storetune.tuner.history.memory import MemoryStore
    from storetune.tuner.objectives.fidelity import Rungs
    from storetune.tuner.objectives.objective import Objective
    from storetune.tuner.search.loop import run_loop

    runner = make_runner("dataset", dataset=[str(_series_table(tmp_path / "measurements.csv", seed=5, repeats=2))])
    store, order = MemoryStore(), []
    outcome = run_loop(campaign_id=0, tuner=make_tuner("auto", runner.space, seed=2, direction="max"), runner=runner,
                       objective=Objective("ops_per_s", "max"), store=store, budget=200, repeats=1, batch_size=1,
                       seed=2, fidelity=Rungs((1, 3, 9), burn_in=0, guard=0), max_repeats=3,
                       on_trial=lambda r: order.append((r.number, r.remeasured, r.runs)))
    trials = {t.number: t for t in store.trials(measurements=True)}
    fresh = [k for k, (_, again, _) in enumerate(order) if not again]
    assert len(fresh) == 60 and fresh == list(range(60))  # every new configuration before any further run
    # a promotion is a stopped trial's second measurement; a repeat, any further whole run
    kinds = ["promoted" if runs == 2 and trials[n].measurements[0].status == "STOPPED" else "repeat"
             for n, _, runs in order[60:]]
    assert "promoted" in kinds and "repeat" in kinds
    assert kinds[0] == "repeat", kinds  # a race ended at one run each: the incumbent is measured again first
    assert max(t.whole_runs for t in trials.values()) <= 3 and "exhausted" in (outcome.note or "")


@pytest.mark.parametrize(("budget", "batch", "new"), [(3, 1, 2), (12, 4, 9)])
def test_the_budget_s_kept_end_holds_re_measurements_and_never_swallows_a_small_budget(tmp_path, budget, batch, new):
    """With rungs and adaptive repeats the budget's end is kept for re-measurements (three configurations' further
    runs, at most half the budget): a batch of new configurations stops short of it, and a budget of 3 still measures
    two configurations and spends its third evaluation again on one of them."""
    from storetune.runners import make_runner
    from storetune.tuner.algorithms.registry import make_tuner
    from storetune.tuner.execution.local import LocalExecutor
    from storetune.tuner.history.memory import MemoryStore
    from storetune.tuner.objectives.fidelity import Rungs
    from storetune.tuner.objectives.objective import Objective
    from storetune.tuner.search.loop import kept_runs, run_loop

    runner = make_runner("dataset", dataset=[str(_series_table(tmp_path / "measurements.csv", seed=5, repeats=2))])
    store = MemoryStore()
    outcome = run_loop(campaign_id=0, tuner=make_tuner("random", runner.space, seed=1, direction="max"),
                       runner=runner, objective=Objective("ops_per_s", "max"), store=store, budget=budget, repeats=1,
                       batch_size=batch, seed=1, executor=LocalExecutor(), fidelity=Rungs((1, 3, 9), guard=0),
                       max_repeats=2)
    trials = store.trials(measurements=True)
    assert kept_runs(budget, 2) == budget - new
    assert outcome.evaluated == budget and len(trials) == new
    assert sum(len(t.measurements) for t in trials) == budget  # the kept end measured what was there again
