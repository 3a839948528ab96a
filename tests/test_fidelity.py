"""The rung schedule and ASHA's rule: which runs go on past a rung, and schedules that cannot be used."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from storetune.tuner.objectives.fidelity import BURN_IN, GUARD, RungError, Rungs, SuccessiveHalving


def test_a_geometric_schedule_ends_at_the_run_s_length():
    assert Rungs.geometric(30).lengths == (1, 3, 9, 30)  # 27 is too close to 30 to be worth a rung
    assert Rungs.geometric(10, eta=2, min_s=1).lengths == (1, 2, 4, 10)  # 8 is within sqrt(2) of 10
    assert Rungs.geometric(3, min_s=3).lengths == (3,)
    assert Rungs.geometric(30, min_s=2).full_s == 30
    # on runs that report once a second, each rung a whole second: 2.5 s would be judged on the 2 s report
    assert Rungs.geometric(30, eta=2.5, min_s=1, interval_s=1).lengths == (1, 3, 6, 16, 30)
    assert Rungs.geometric(30, eta=1.2, min_s=1, interval_s=1).lengths[:4] == (1, 2, 3, 4)


def test_a_schedule_that_cannot_fit_is_one_line_naming_the_values():
    with pytest.raises(RungError, match=r"the shortest rung \(40 s\) must be positive and at most the run's length \(30 s\)"):
        Rungs.geometric(30, min_s=40)
    with pytest.raises(RungError, match="eta must be a number above 1"):
        Rungs.geometric(30, eta=1)
    with pytest.raises(RungError, match="rungs must be positive run lengths that grow: 3, 3, 10 s"):
        Rungs((3, 3, 10))
    with pytest.raises(RungError, match=r"the last rung \(10 s\) must be the run's length \(30 s\): rungs 1, 3, 10 s"):
        Rungs((1, 3, 10)).check(30)
    with pytest.raises(RungError, match="a budget of 20 device-seconds cannot pay for one run of 30 s"):
        Rungs.geometric(30).check(30, budget_s=20)
    Rungs.geometric(30).check(30, budget_s=3600)
    with pytest.raises(RungError, match=r"shorter than the interval the runs report at \(1 s\)"):
        Rungs.geometric(30, min_s=0.3, interval_s=1)
    with pytest.raises(RungError, match=r"rungs 1, 2.5, 30 s: each must be a whole number of the runs' reporting "
                                        r"interval \(1 s\)"):
        Rungs((1, 2.5, 30)).check(30, interval_s=1)


def test_a_run_goes_on_only_in_the_best_third_of_its_rung():
    asha = SuccessiveHalving(Rungs((1, 3, 9), eta=3))
    assert [asha.judge(0, v) for v in (10, 20, 30, 40)] == [True] * 4  # each the best so far
    assert [asha.judge(0, v) for v in (5, 6, 7)] == [False] * 3  # below what the rung has seen
    assert asha.judge(0, 35)  # among the best third of the eight
    assert not asha.judge(2, 1e9)  # the full length: nothing to go on to
    lower = SuccessiveHalving(Rungs((1, 3), eta=3), direction="min")  # a latency
    assert [lower.judge(0, v) for v in (10, 5, 20, 30)] == [True, True, False, False]
    with pytest.raises(ValueError, match="finite"):
        lower.judge(0, float("nan"))


def test_a_rung_stops_runs_only_after_the_burn_in_and_while_the_best_whole_runs_would_pass_it():
    """varmail's trap: the first seconds rank the best configurations low. A rung that would stop the best whole run
    so far lets every run through; it stops runs again once the record says the best stand in its best third."""
    asha = SuccessiveHalving(Rungs((1, 3, 9), eta=3, burn_in=2, guard=1))
    assert [asha.judge(0, v) for v in (50, 40, 30, 20, 10)] == [True] * 5  # the burn-in: nothing stopped yet
    assert asha.judge(1, 12) and asha.judge(1, 45)  # the runs of 10 and 50 after 1 s, at 3 s
    asha.learn([10, 12], 900)  # the best whole run was the slowest after 1 s
    asha.learn([50, 45], 300)
    assert not asha.trusted(0) and asha.judge(0, 5)  # the 1-s rung would have stopped it: it stops nothing
    assert not asha.trusted(1)  # at 3 s neither (12 is not in the best third of 12 and 45)
    assert asha.judge(0, 60) and asha.judge(1, 70)
    asha.learn([60, 70], 1000)  # a new best, first after 1 s: the rung is trusted again
    assert asha.trusted(0) and not asha.judge(0, 5) and asha.judge(0, 1e9)
    guarded = SuccessiveHalving(Rungs((1, 3, 9), eta=3, burn_in=0, guard=2), wholes=[([60], 1000), ([10], 900)])
    guarded.recorded[0] += [60, 10, 30]
    assert not guarded.trusted(0)  # the second best whole run is guarded too
    plain = SuccessiveHalving(Rungs((1, 3, 9), eta=3))  # burn_in 0, guard 0: ASHA as published
    assert [plain.judge(0, v) for v in (50, 10)] == [True, False]
    lower = SuccessiveHalving(Rungs((1, 3), eta=3, burn_in=1, guard=1), direction="min")  # a latency: less is better
    assert lower.judge(0, 100)
    lower.learn([100], 5)  # the best (lowest) whole run was slowest at 1 s
    assert [lower.judge(0, v) for v in (10, 20, 100, 500)] == [True] * 4
    with pytest.raises(RungError, match="burn_in .* and guard .* count whole runs"):
        Rungs((1, 3), burn_in=-1)


def test_about_one_run_in_eta_goes_on_when_values_come_in_random_order():
    rng = np.random.default_rng(0)
    for eta in (2, 3, 4):
        asha = SuccessiveHalving(Rungs((1, 10), eta=eta))
        share = np.mean([asha.judge(0, v) for v in rng.normal(size=3000)])
        assert share == pytest.approx(1 / eta, abs=0.03), (eta, share)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=60), st.sampled_from([2.0, 3.0, 4.0]))
def test_the_best_so_far_always_goes_on_and_a_strictly_worst_never_does(values, eta):
    asha = SuccessiveHalving(Rungs((1, 2), eta=eta))
    for i, v in enumerate(values):
        seen = values[:i]
        went_on = asha.judge(0, v)
        if all(v >= s for s in seen):
            assert went_on
        if seen and all(v < s for s in seen):
            assert not went_on


def test_a_replayed_run_is_judged_at_each_rung_and_stops_where_told(tmp_path):
    from storetune.runners import Status, WatchedRunner, make_runner
    from storetune.tuner.objectives.fidelity import watchable

    path = tmp_path / "measurements.csv"
    path.write_text("fs,repeat,status,reason,ops_per_s,lat_p99_us,series:ops_per_s\n"
                    "ext4,0,SUCCEEDED,,100,900,90 100 110\n"
                    "xfs,0,SUCCEEDED,,50,300,80 40 30\n")
    runner = make_runner("dataset", dataset=[str(path)])
    assert isinstance(runner, WatchedRunner) and runner.full_length_s() == 3
    rungs = Rungs((1, 3))
    assert watchable(runner, rungs) is runner
    xfs, ext4 = (runner.space.validate({"fs": fs}) for fs in ("xfs", "ext4"))
    seen = []
    stopped = runner.run_watched(xfs, runner.workload, seed=0, rungs=rungs.lengths,
                                 go_on=lambda k, metrics: seen.append((k, metrics)) or False)
    assert seen == [(0, {"ops_per_s": 80.0})]  # its first second: a fast start
    assert stopped.status is Status.SUCCEEDED and stopped.metrics == {"ops_per_s": 80.0}
    assert stopped.env["stopped_at_rung"] == 0 and stopped.duration_s == 1
    whole = runner.run_watched(ext4, runner.workload, seed=0, rungs=rungs.lengths, go_on=lambda k, m: True)
    assert whole.metrics == {"ops_per_s": 100.0, "lat_p99_us": 900.0}  # the whole run's figures, as recorded
    assert whole.env["run_length_s"] == 3 and whole.duration_s == 3 and "stopped_at_rung" not in whole.env
    with pytest.raises(RungError, match=r"the last rung \(10 s\) must be the run's length \(3 s\)"):
        watchable(runner, Rungs((1, 10)))

    plain = tmp_path / "plain.csv"
    plain.write_text("fs,repeat,status,reason,ops_per_s\next4,0,SUCCEEDED,,100\nxfs,0,SUCCEEDED,,50\n")
    with pytest.raises(RungError, match=r"the dataset runner on plain cannot measure short runs: its table keeps no "
                                        r"per-interval series"):
        watchable(make_runner("dataset", dataset=[str(plain)]), rungs)
    command = make_runner("command", command="echo '{\"x\": 1}'", space="storage_v1")
    with pytest.raises(RungError, match="the command runner on storage_v1 cannot measure short runs: it measures "
                                        "whole runs only"):
        watchable(command, rungs)


def test_fio_s_reports_each_second_are_read_line_by_line_and_the_last_is_the_run_s():
    import json

    from storetune.runners.device.engines import EngineOutputError, FioProgress

    def report(elapsed: int, reads: int, writes: int) -> list[str]:
        text = json.dumps({"fio version": "fio-3.33", "jobs": [{"elapsed": elapsed, "read": {"total_ios": reads},
                                                                 "write": {"total_ios": writes}}]}, indent=2)
        return [line + "\n" for line in text.splitlines()]

    asked = []
    stream = FioProgress(lambda seconds, ops: asked.append((seconds, ops)) or seconds < 2)
    said = [stream.line(line) for line in ["note: a line before the JSON\n", *report(1, 60, 40), *report(2, 150, 90),
                                           *report(3, 200, 100)]]
    assert asked == [(1.0, 100.0), (2.0, 120.0)]  # told to stop at 2 s: asked no more
    assert said[-1] is False and not stream.going
    assert json.loads(stream.last())["jobs"][0]["elapsed"] == 3  # fio's final report, after the interruption
    with pytest.raises(EngineOutputError, match="fio printed no report"):
        FioProgress(lambda s, o: True).last()


def _series_table(path, seed=0, repeats=1):
    """A replayed table of 60 configurations whose per-second series start with a burst (a page cache filling)
    that says little of the steady rate: the rate is the configuration's, plus noise."""
    rng = np.random.default_rng(seed)
    lines = ["a,b,repeat,status,reason,ops_per_s,series:ops_per_s"]
    for a in range(10):
        for b in range(6):
            rate = 1000 - 40 * (a - 6) ** 2 - 25 * (b - 2) ** 2
            for repeat in range(repeats):
                burst = rng.uniform(0, 3000)
                series = [rate + burst if t == 0 else rate * rng.normal(1, 0.02) for t in range(9)]
                lines.append(f"{a},{b},{repeat},SUCCEEDED,,{np.mean(series):.3f},"
                             f"{' '.join(f'{v:.3f}' for v in series)}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("workers", [1, 2])
def test_a_loop_with_rungs_stops_runs_short_and_counts_their_device_seconds(tmp_path, workers):
    """Asynchronous successive halving in the campaign loop, here and in worker processes: every run is judged at
    each rung against all the others' on one board (the driver's, or a manager's for the pool), the short ones are
    STOPPED with why, the device-seconds are their run lengths, and the algorithm is never told a short run's
    early burst as a value better than a whole run's."""
    from storetune.runners import Status, make_runner
    from storetune.tuner.algorithms.registry import make_tuner
    from storetune.tuner.execution.local import LocalExecutor, ProcessExecutor
    from storetune.tuner.history.memory import MemoryStore
    from storetune.tuner.objectives.objective import Objective
    from storetune.tuner.search.loop import run_loop

    runner = make_runner("dataset", dataset=[str(_series_table(tmp_path / "measurements.csv"))])
    rungs = Rungs((1, 3, 9))
    tuner = make_tuner("random", runner.space, seed=0, direction="max")
    executor = LocalExecutor() if workers == 1 else ProcessExecutor(workers)
    store = MemoryStore()
    try:
        outcome = run_loop(campaign_id=0, tuner=tuner, runner=runner, objective=Objective("ops_per_s", "max"),
                           store=store, budget=45, repeats=1, batch_size=workers, seed=0, executor=executor,
                           fidelity=rungs)
    finally:
        executor.close()
    trials = store.trials(measurements=True)
    assert outcome.evaluated == 45 and len(trials) == 45
    lengths = [t.measurements[0].env["run_length_s"] for t in trials]
    stopped = [t for t in trials if t.status == Status.STOPPED.value]
    whole = [t for t in trials if t.status == Status.SUCCEEDED.value]
    assert set(lengths) <= {1, 3, 9} and len(stopped) + len(whole) == 45
    # about one in eta past each rung (45 / 9 whole), the first runs all going on; with two workers the order in which
    # the record grows is the workers' (under load CI saw 4)
    assert 3 <= len(whole) <= 45 / 2
    assert all(t.value is None and t.reason.startswith("stopped after ") and "of 9 (rung " in t.reason for t in stopped)
    assert all(t.measurements[0].env["run_length_s"] == 9 for t in whole)
    assert outcome.device_s == sum(lengths) < 0.6 * 45 * 9
    # one board for all: every run judged at the first rung, and at the next as many as went on past the first (at
    # the last, the full length, nothing is left to judge)
    assert outcome.judged == [45, sum(x > 1 for x in lengths), 0]
    # what the algorithm was told in the end (a loss: lower is better): each short run its value at its rung, capped
    # at the worst whole run (told again as that fell), and each whole run its value
    told = {o.config: o.loss for o in tuner.observations}
    worst = min(t.value for t in whole)
    bursts = [t for t in stopped if t.measurements[0].metrics["ops_per_s"] > worst]
    assert bursts, "the table's bursts should put some short runs above a whole run"
    for t in stopped:
        assert told[runner.space.validate(t.config)] == -min(t.measurements[0].metrics["ops_per_s"], worst)
    for t in whole:
        assert told[runner.space.validate(t.config)] == -t.value


def test_tune_with_asha_spends_device_seconds_and_shows_each_run_s_length_and_seconds(sqlite_url, tmp_path):
    """`storetune tune --fidelity asha --budget-seconds` on a replayed table with per-second series: it stops when
    the device-seconds are spent, records the schedule, and `trials` shows how long each run ran, why a run
    stopped, and its metric second by second."""
    import json

    from conftest import run_cli
    from storetune.tuner.history.store import History

    table = _series_table(tmp_path / "measurements.csv")
    out = run_cli("tune", "--dataset", str(table), "--fidelity", "asha", "--budget-seconds", "80", "--seed", "1",
                  "--json", db=sqlite_url, check=True)
    summary = json.loads(out.stdout.splitlines()[-1])
    record = History(sqlite_url).campaign(summary["campaign"])
    assert record.fidelity == {"kind": "asha", "rungs": [1.0, 3.0, 9.0], "eta": 3.0, "burn_in": BURN_IN, "guard": GUARD,
                               "budget_s": 80.0}
    trials = History(sqlite_url).trials(summary["campaign"], measurements=True)
    spent = sum(t.measurements[0].env["run_length_s"] for t in trials)
    assert 80 <= spent < 80 + 9 and spent - trials[-1].measurements[0].env["run_length_s"] < 80
    assert "device-seconds was spent" in summary["note"] and len(trials) < 60
    assert {t.status for t in trials} == {"SUCCEEDED", "STOPPED"}
    shown = run_cli("trials", str(summary["campaign"]), db=sqlite_url, check=True, env={"COLUMNS": "250"}).stdout
    assert "ops_per_s per second" in shown and "1/9 s" in shown and "9/9 s" in shown and "█▁▁" in shown
    assert "stopped after 1 s of 9 (rung 1 of 3)" in shown


def test_asha_on_a_runner_without_run_lengths_or_a_schedule_that_does_not_fit_is_one_line(sqlite_url, tmp_path):
    from conftest import run_cli

    plain = tmp_path / "plain.csv"
    plain.write_text("fs,repeat,status,reason,ops_per_s\next4,0,SUCCEEDED,,100\nxfs,0,SUCCEEDED,,50\n")
    out = run_cli("tune", "--dataset", str(plain), "--budget", "2", "--fidelity", "asha", db=sqlite_url)
    assert out.returncode == 2, out.stderr
    assert "the dataset runner on plain cannot measure short runs: its table keeps no per-interval series" in out.stderr
    out = run_cli("tune", "--dataset", str(plain), "--budget-seconds", "60", db=sqlite_url)
    assert out.returncode == 2 and "its table keeps no per-interval series, so a replayed run takes no device time" \
        in " ".join(out.stderr.split()), out.stderr
    table = _series_table(tmp_path / "measurements.csv")
    header, *rows = table.read_text().splitlines()  # a latency column beside, but series of ops/s only
    with_latency = tmp_path / "latency.csv"
    with_latency.write_text("\n".join([header.replace("ops_per_s,series:", "ops_per_s,lat_p99_us,series:")]
                                      + [",".join(r.split(",")[:6] + ["900"] + r.split(",")[6:]) for r in rows]) + "\n")
    out = run_cli("tune", "--dataset", str(with_latency), "--metric", "lat_p99_us", "--fidelity", "asha", db=sqlite_url)
    assert out.returncode == 2 and "reports only ops_per_s while a run goes" in " ".join(out.stderr.split()), out.stderr
    for args, said in ((["--min-run", "20"], "the shortest rung (20 s) must be positive and at most the run's length "
                                            "(9 s)"),
                       (["--min-run", "9"], "the shortest rung (9 s) leaves no rung before the whole run (9 s)"),
                       (["--min-run", "0.5"], "the shortest rung (0.5 s) is shorter than the interval the runs report "
                                              "at (1 s)"),
                       (["--repeats", "2"], "one run per configuration"),
                       (["--budget-seconds", "5"], "a budget of 5 device-seconds cannot pay for one run of 9 s"),
                       (["--eta", "1"], "eta must be a number above 1"),
                       (["--guard", "-1"], "burn_in (0) and guard (-1) count whole runs: 0 or more")):
        out = run_cli("tune", "--dataset", str(table), "--fidelity", "asha", *args, db=sqlite_url)
        assert out.returncode == 2 and said in " ".join(out.stderr.split()), (args, out.stderr)
    for given in ("--eta", "--burn-in"):
        out = run_cli("tune", "--dataset", str(table), given, "2", db=sqlite_url)
        assert out.returncode == 2 and "--eta, --min-run, --burn-in and --guard set the rungs of --fidelity asha" \
            in " ".join(out.stderr.split()), out.stderr
    assert "campaign" not in run_cli("campaigns", db=sqlite_url).stdout.lower().replace("no campaigns", "")


def test_asha_with_max_repeats_measures_the_finalists_again_whole_and_reports_the_best_mean(sqlite_url, tmp_path):
    """Repeats as the second fidelity: the budget's end is kept for them (the space, 60 configurations, is not
    exhausted in 30); there a whole run that looks better than the incumbent is measured again, whole and unjudged;
    each re-measurement is an evaluation; the best is the best mean of the most-measured; the rungs learn each
    trial's first run once, on a resume as well."""
    import json

    from conftest import run_cli
    from storetune.runners import Status
    from storetune.tuner.history.store import History
    from storetune.tuner.objectives.objective import Objective
    from storetune.tuner.search.loop import run_seconds
    from storetune.tuner.search.remeasure import Shortened

    table = _series_table(tmp_path / "measurements.csv", seed=5, repeats=2)
    out = run_cli("tune", "--dataset", str(table), "--fidelity", "asha", "--max-repeats", "2", "--budget", "30",
                  "--seed", "2", "--json", db=sqlite_url, check=True)
    summary = json.loads(out.stdout.splitlines()[-1])
    trials = History(sqlite_url).trials(summary["campaign"], measurements=True)
    again = [t for t in trials if len(t.measurements) == 2]
    assert len(trials) == 27 and len(again) == 3  # FINALISTS x (max repeats - 1) evaluations kept for them
    assert all(t.status == "SUCCEEDED" and t.whole_runs == 2 for t in again)
    assert all(run_seconds([m]) == 9 for t in again for m in t.measurements)  # whole runs, device-seconds counted
    assert all("judged" not in t.measurements[1].env for t in again)  # measured whole, no rung judged it
    assert all(len(t.measurements) == 1 for t in trials if t.status == "STOPPED")
    assert len(trials) + len(again) == 30  # each re-measurement one evaluation of the budget
    assert summary["best_runs"] == 2 and summary["best_value"] == max(t.value for t in again)  # not a lucky one-run
    short = Shortened(Rungs((1, 3, 9)), Objective("ops_per_s", "max"), trials)
    assert len(short.wholes) == sum(t.status == Status.SUCCEEDED.value for t in trials)  # first runs, once each


def test_a_resumed_campaign_rebuilds_the_rung_record_and_what_stopped_runs_were_told(sqlite_url, tmp_path):
    """What a resume starts from: every run's judged values back on the board, rung by rung, and each stopped run
    told its rung value capped at the worst whole run, as the loop left it."""
    import json

    from conftest import run_cli
    from storetune.runners import Status
    from storetune.search_spaces import Config
    from storetune.tuner.history.store import History
    from storetune.tuner.objectives.objective import Objective
    from storetune.tuner.search.remeasure import Shortened

    table = _series_table(tmp_path / "measurements.csv")
    out = run_cli("tune", "--dataset", str(table), "--fidelity", "asha", "--budget", "30", "--seed", "3", "--json",
                  db=sqlite_url, check=True)
    campaign = json.loads(out.stdout.splitlines()[-1])["campaign"]
    trials = History(sqlite_url).trials(campaign, measurements=True)
    short = Shortened(Rungs((1, 3, 9)), Objective("ops_per_s", "max"), trials)
    lengths = [t.measurements[0].env["run_length_s"] for t in trials]
    assert short.halving().counts() == [30, sum(x > 1 for x in lengths), 0]
    assert short.recorded[0] == [t.measurements[0].env["judged"][0] for t in trials]
    # each whole run with its value at the rungs before the last: what decides which rungs may stop a run
    assert short.halving().wholes == [(tuple(t.measurements[0].env["judged"]), t.value) for t in trials
                                      if t.status == "SUCCEEDED"]
    whole = [t.value for t in trials if t.status == "SUCCEEDED"]
    for t in trials:
        told = short.told(Config(t.config))
        if t.status == Status.STOPPED.value:
            assert told == min(t.measurements[0].metrics["ops_per_s"], min(whole))
        else:
            assert told is None


def test_an_interrupted_asha_campaign_resumes_within_the_device_seconds_it_was_given(sqlite_url, tmp_path):
    """Interrupted after 6 trials, then resumed: the device-seconds already spent count, the stopped runs are told
    and judged as before, and the campaign ends at its budget with every trial once."""
    from storetune.tuner.history.store import History
    from storetune.tuner.search.campaign import Campaign
    from storetune.tuner.search.spec import CampaignSpec
    from storetune.tuner.search.loop import run_seconds
    from storetune.tuner.search.remeasure import stored_measurements as _measurements

    table = _series_table(tmp_path / "measurements.csv")
    history = History(sqlite_url)
    spec = CampaignSpec(runner="dataset", runner_settings={"dataset": [str(table)]}, algorithm="auto",
                        fidelity="asha", budget=1000, budget_s=60, seed=4)
    first = Campaign.create(history, spec)

    def stop(result):
        if result.evaluated == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        first.run(on_trial=stop)
    assert history.campaign(first.id).state == "interrupted"
    before = history.trials(first.id, measurements=True)
    spent_before = run_seconds([m for t in before for m in _measurements(t)])
    assert len(before) >= 6 and 0 < spent_before < 60
    summary = Campaign.resume(history, first.id).run()
    trials = history.trials(first.id, measurements=True)
    assert history.campaign(first.id).state == "finished", summary
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    spent = run_seconds([m for t in trials for m in _measurements(t)])
    assert 60 <= spent < 60 + 9 and "device-seconds was spent" in (history.campaign(first.id).note or "")
    assert {t.status for t in trials} == {"SUCCEEDED", "STOPPED"}
    judged = [m.env["judged"] for t in trials for m in t.measurements]
    assert all(len(j) >= 1 for j in judged) and len({tuple(t.config.items()) for t in trials}) == len(trials)


def test_a_board_that_goes_away_stops_the_loop_as_a_busy_host_would(tmp_path):
    """The rung record's process dies (a manager, a Ray actor): no configuration is blamed; the loop stops with
    HostUnavailable, which a campaign records as interrupted and resumable, not with the board's own error."""
    from storetune.runners import HostUnavailable, make_runner
    from storetune.tuner.algorithms.registry import make_tuner
    from storetune.tuner.execution.local import LocalExecutor
    from storetune.tuner.history.memory import MemoryStore
    from storetune.tuner.objectives.objective import Objective
    from storetune.tuner.search.loop import run_loop

    class Gone:
        def judge(self, rung, value):
            raise EOFError("the manager went away")

        counts = race = offer = judge

    class Lost(LocalExecutor):
        def board(self, halving):
            return Gone()

    runner = make_runner("dataset", dataset=[str(_series_table(tmp_path / "measurements.csv"))])
    store = MemoryStore()
    with pytest.raises(HostUnavailable, match=r"could not be reached \(EOFError: the manager went away\)"):
        run_loop(campaign_id=0, tuner=make_tuner("random", runner.space, seed=1, direction="max"), runner=runner,
                 objective=Objective("ops_per_s", "max"), store=store, budget=5, repeats=1, batch_size=1, seed=1,
                 executor=Lost(), fidelity=Rungs((1, 3, 9)))
    assert all(t.status in ("RUNNING", "PENDING") for t in store.trials())  # none condemned
