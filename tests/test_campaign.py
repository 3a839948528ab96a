"""The campaign loop: budget, repeats, failures as data, resume, and nothing half-written."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import shared
from storetune.runners import HostUnavailable, Measurement, make_runner
from storetune.search_spaces import Config
from storetune.tuner import Campaign, CampaignSpec, History
from storetune.tuner.search.loop import trial_seed


def spec(path: Path, **kw) -> CampaignSpec:
    return CampaignSpec(runner="dataset", runner_settings={"dataset": str(path)}, **kw)


def test_spends_the_budget_on_distinct_configurations_with_repeats(sqlite_url):
    history = History(sqlite_url)
    campaign = Campaign.create(history, spec(shared("moot_configs/PostgreSQL.csv"), budget=20, seed=3, repeats=3))
    summary = campaign.run()
    trials = history.trials(campaign.id, measurements=True)
    assert summary.trials_by_status == {"SUCCEEDED": 20} and summary.evaluated == 20
    assert len({t.config_hash for t in trials}) == 20
    for t in trials:
        values = [m.metrics["Performance"] for m in t.measurements]
        assert len(values) == 3 and t.value == pytest.approx(sum(values) / 3)
    assert summary.objective == {"metric": "Performance", "direction": "min"}
    assert summary.best_value == min(t.value for t in trials)
    assert history.campaign(campaign.id).state == "finished"


def test_repeats_draw_different_noise(sqlite_url):
    history = History(sqlite_url)
    campaign = Campaign.create(history, spec(shared("moot_configs/PostgreSQL.csv"), budget=5, repeats=4))
    campaign.run()
    draws = [tuple(m.env["repeat"] for m in t.measurements) for t in history.trials(campaign.id, measurements=True)]
    assert any(len(set(d)) > 1 for d in draws)


def test_the_same_seed_measures_a_configuration_with_the_same_noise():
    config = Config(a=1)
    assert trial_seed(7, config) == trial_seed(7, Config(a=1)) != trial_seed(8, config)


def test_bad_input_writes_nothing(sqlite_url, bdbc):
    history = History(sqlite_url)
    cases = [
        (dict(algorithm="annealing"), "unknown algorithm"),
        (dict(algorithm_params={"x": "1"}), "unknown hyperparameter"),
        (dict(budget=3000), "more than the 2560 configurations"),
        (dict(budget=0), "budget must be at least 1"),
        (dict(repeats=0), "repeats must be at least 1"),
        (dict(metric="latency"), "unknown metric 'latency'; this runner reports: PERF"),
    ]
    for kw, message in cases:
        with pytest.raises(ValueError, match=message):
            Campaign.create(history, spec(bdbc, **kw))
    assert history.campaigns() == []


def test_recorded_failures_count_and_are_not_proposed_again(sqlite_url, tmp_path):
    table = tmp_path / "sweep.csv"
    rows = ["fs,bs,repeat,status,reason,ops"]
    for fs in ("ext4", "xfs", "btrfs"):
        for bs in (1024, 4096):
            ok = not (fs == "btrfs" and bs == 1024)
            rows.append(f"{fs},{bs},0,{'SUCCEEDED' if ok else 'INVALID'},{'' if ok else 'sector size'},{bs if ok else ''}")
    table.write_text("\n".join(rows) + "\n")
    history = History(sqlite_url)
    summary = Campaign.create(history, spec(table, budget=6)).run()
    assert summary.trials_by_status == {"SUCCEEDED": 5, "INVALID": 1}
    invalid = [t for t in history.trials(summary.campaign) if t.status == "INVALID"]
    assert invalid[0].config == {"fs": "btrfs", "bs": 1024} and invalid[0].reason == "sector size"


class FlakyRunner:
    """Wraps a runner; raises on chosen calls, to stand for a runner bug or a Ctrl-C."""

    def __init__(self, inner, fail_on: dict[int, BaseException]):
        self.inner, self.fail_on, self.calls = inner, fail_on, 0
        self.name, self.space, self.workload = inner.name, inner.space, inner.workload
        self.metrics, self.settings, self.close = inner.metrics, inner.settings, inner.close

    def __getattr__(self, name):  # the rest of the Runner protocol is the wrapped runner's
        return getattr(self.inner, name)

    def run(self, config, workload, *, seed) -> Measurement:
        self.calls += 1
        if self.calls in self.fail_on:
            raise self.fail_on[self.calls]
        return self.inner.run(config, workload, seed=seed)


def test_a_runner_that_raises_fails_its_trial_and_the_campaign_goes_on(sqlite_url, bdbc):
    history = History(sqlite_url)
    runner = FlakyRunner(make_runner("dataset", dataset=str(bdbc)), {3: RuntimeError("disk on fire")})
    summary = Campaign.create(history, spec(bdbc, budget=6), runner=runner).run()
    assert summary.trials_by_status == {"SUCCEEDED": 5, "FAILED": 1}
    (failed,) = [t for t in history.trials(summary.campaign) if t.status == "FAILED"]
    assert failed.reason == "runner raised RuntimeError: disk on fire"


def test_ctrl_c_leaves_a_resumable_campaign(sqlite_url, bdbc):
    history = History(sqlite_url)
    runner = FlakyRunner(make_runner("dataset", dataset=str(bdbc)), {4: KeyboardInterrupt()})
    campaign = Campaign.create(history, spec(bdbc, budget=10, seed=2), runner=runner)
    with pytest.raises(KeyboardInterrupt):
        campaign.run()
    record = history.campaign(campaign.id)
    assert record.state == "interrupted" and f"--resume {campaign.id}" in record.note
    statuses = [t.status for t in history.trials(campaign.id)]
    assert statuses == ["SUCCEEDED"] * 3 + ["STALE"]

    summary = Campaign.resume(history, campaign.id).run()
    trials = history.trials(campaign.id)
    assert summary.evaluated == 10 and summary.trials_by_status == {"SUCCEEDED": 10, "STALE": 1}
    stale = trials[3]
    (retry,) = [t for t in trials if t.retry_of == stale.id]
    assert retry.config == stale.config and retry.status == "SUCCEEDED"
    counted = [t.config_hash for t in trials if t.status != "STALE"]
    assert len(counted) == len(set(counted)) == 10


def test_a_host_that_cannot_measure_stops_the_campaign_and_blames_no_configuration(sqlite_url, bdbc):
    """HostUnavailable (another measurement kept the host's settings too long) is not a result: a FAILED
    trial's configuration would never be proposed again. The campaign stops, resumable, and the trial's
    configuration is measured on resume."""
    history = History(sqlite_url)
    runner = FlakyRunner(make_runner("dataset", dataset=str(bdbc)), {4: HostUnavailable("the host is busy")})
    campaign = Campaign.create(history, spec(bdbc, budget=8, seed=2), runner=runner)
    with pytest.raises(HostUnavailable, match=f"campaign {campaign.id} stopped: the host is busy"):
        campaign.run()
    record = history.campaign(campaign.id)
    assert record.state == "failed" and "the host is busy" in record.note and f"--resume {campaign.id}" in record.note
    trials = history.trials(campaign.id)
    assert [t.status for t in trials] == ["SUCCEEDED"] * 3 + ["STALE"]

    summary = Campaign.resume(history, campaign.id).run()
    assert summary.evaluated == 8 and summary.trials_by_status == {"SUCCEEDED": 8, "STALE": 1}
    (retry,) = [t for t in history.trials(campaign.id) if t.retry_of == trials[3].id]
    assert retry.config == trials[3].config and retry.status == "SUCCEEDED"


class TwoSlots:
    """An asynchronous executor in this process, for the loop's side of the seam: two jobs measure at once
    (the first two submitted and not yet taken back), the rest queue, and each finishes in the order it
    was submitted; the host is busy for the chosen submissions."""

    kind, workers, asynchronous, remote = "local", 2, True, False

    def close(self):
        pass

    def __init__(self, busy_on: set[int], broken_on: set[int] = frozenset()):
        self.busy_on, self.broken_on, self.submitted, self.dropped = busy_on, broken_on, 0, []

    def start(self):
        pass

    def fit(self, runner):
        return None

    def describe(self):
        return {"kind": self.kind, "nodes": 1, "workers": self.workers}

    def stream(self, runner, workload, record=None, board=None):
        from collections import deque

        from storetune.tuner.execution.jobs import measure

        executor, jobs = self, deque()

        class Stream:
            @property
            def pending(self):
                return len(jobs)

            def submit(self, job):
                executor.submitted += 1
                jobs.append((executor.submitted, job))

            def next(self):
                number, job = jobs.popleft()
                if number in executor.busy_on:
                    raise HostUnavailable("the host is busy")
                if number in executor.broken_on:
                    raise RuntimeError("a worker died")
                return job, measure(runner, workload, job, record)

            def drop_queued(self):
                while len(jobs) > 1:  # the one beside the failed job is measuring; the rest have not started
                    executor.dropped.append(jobs.pop()[1].trial_id)

        return Stream()


def test_a_busy_host_lets_the_jobs_in_flight_finish_and_starts_none(sqlite_url, bdbc):
    """With jobs side by side (worker processes, Ray), one job's busy host does not throw away the others:
    the one measuring beside it is recorded, the queued one is dropped, and both that one and the failed
    one are measured on resume."""
    history = History(sqlite_url)
    executor = TwoSlots(busy_on={4})
    campaign = Campaign.create(history, spec(bdbc, budget=8, seed=2, batch_size=3), executor=executor)
    with pytest.raises(HostUnavailable, match="the host is busy"):
        campaign.run()
    trials = history.trials(campaign.id, measurements=True)
    assert [t.status for t in trials] == ["SUCCEEDED"] * 3 + ["STALE", "SUCCEEDED", "STALE"]
    assert len(trials[4].measurements) == 1 and executor.dropped == [trials[5].id]
    assert history.campaign(campaign.id).state == "failed"

    summary = Campaign.resume(history, campaign.id).run()
    assert summary.evaluated == 8 and summary.trials_by_status == {"SUCCEEDED": 8, "STALE": 2}
    retried = {t.retry_of: t for t in history.trials(campaign.id) if t.retry_of is not None}
    assert {trials[3].id, trials[5].id} == set(retried)
    assert all(retried[t.id].config == t.config and retried[t.id].status == "SUCCEEDED" for t in (trials[3], trials[5]))


def test_a_drain_that_breaks_still_stops_the_campaign_for_the_host(sqlite_url, bdbc):
    """A job that fails otherwise while the loop drains (a worker died) does not hide why the campaign stops."""
    history = History(sqlite_url)
    campaign = Campaign.create(history, spec(bdbc, budget=8, seed=2, batch_size=3),
                               executor=TwoSlots(busy_on={4}, broken_on={5}))
    with pytest.raises(HostUnavailable, match="the host is busy"):
        campaign.run()
    record = history.campaign(campaign.id)
    assert record.state == "failed" and "the host is busy" in record.note
    assert [t.status for t in history.trials(campaign.id)] == ["SUCCEEDED"] * 3 + ["STALE"] * 3


@pytest.mark.parametrize("error", ["busy", "refused"])
def test_a_runner_s_host_trouble_is_not_its_configuration_s_failure(sqlite_url, bdbc, error):
    """Through RunnerBase.run (which turns any other exception into a FAILED measurement): a busy host lock
    or a refused lock file stops the campaign, and the trial it was measuring is re-run on resume."""
    import errno

    from storetune.runners import RunnerBase
    from storetune.runners.device.host import HostBusy, HostLockRefused

    inner = make_runner("dataset", dataset=str(bdbc))

    class Host(RunnerBase):
        name, space, workload = inner.name, inner.space, inner.workload
        calls = 0

        def __init__(self):
            super().__init__(inner._settings)

        def metrics(self):
            return inner.metrics()

        def measure(self, config, workload, *, seed):
            Host.calls += 1
            if Host.calls == 2:
                raise HostBusy("kept too long") if error == "busy" else HostLockRefused(errno.EPERM, "refusing it")
            return inner.measure(config, workload, seed=seed)

    campaign = Campaign.create(history := History(sqlite_url), spec(bdbc, budget=3, seed=5), runner=Host())
    with pytest.raises(HostUnavailable):
        campaign.run()
    assert [t.status for t in history.trials(campaign.id)] == ["SUCCEEDED", "STALE"]
    assert history.campaign(campaign.id).state == "failed"


def test_a_resumed_random_search_continues_the_same_order(sqlite_url, bdbc):
    history = History(sqlite_url)
    whole = Campaign.create(history, spec(bdbc, budget=12, seed=9)).run()
    runner = FlakyRunner(make_runner("dataset", dataset=str(bdbc)), {6: KeyboardInterrupt()})
    split = Campaign.create(history, spec(bdbc, budget=12, seed=9), runner=runner)
    with pytest.raises(KeyboardInterrupt):
        split.run()
    Campaign.resume(history, split.id).run()

    def order(campaign_id):
        return [t.config_hash for t in history.trials(campaign_id) if t.status != "STALE"]

    assert order(split.id) == order(whole.campaign)


def test_resume_refuses_a_changed_dataset(sqlite_url, tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("a,PERF-\n1,2\n2,3\n3,4\n")
    history = History(sqlite_url)
    campaign = Campaign.create(history, spec(table, budget=2))
    table.write_text("a,PERF-\n1,2\n2,3\n3,5\n")
    with pytest.raises(ValueError, match="workload t changed since it started"):
        Campaign.resume(history, campaign.id)


def interrupted(history: History, bdbc: Path, runner=None, **kw) -> int:
    """A campaign of 8 on BDBC with hAVE_CRYPTO pinned, stopped by Ctrl-C at its fourth measurement."""
    runner = FlakyRunner(runner or make_runner("dataset", dataset=str(bdbc)), {3: KeyboardInterrupt()})
    campaign = Campaign.create(history, spec(bdbc, budget=8, seed=2, fixed={"hAVE_CRYPTO": 1}, **kw), runner=runner)
    with pytest.raises(KeyboardInterrupt):
        campaign.run()
    return campaign.id


def test_a_pinned_campaign_checked_before_it_is_created_can_be_resumed(sqlite_url, bdbc):
    """`storetune tune --fix` checks the campaign (prepare) and then creates it with the runner it checked:
    the parameters pinned twice are labelled once, so the printed --resume finds the same space."""
    history = History(sqlite_url)
    checked, _ = Campaign.prepare(spec(bdbc, fixed={"hAVE_CRYPTO": 1}))
    campaign_id = interrupted(history, bdbc, runner=checked)
    assert history.campaign(campaign_id).space["description"].count("fixed") == 1
    summary = Campaign.resume(history, campaign_id).run()
    assert summary.evaluated == 8
    assert {t.config["hAVE_CRYPTO"] for t in history.trials(campaign_id)} == {1}


def test_a_campaign_the_cli_labelled_twice_is_still_resumed(sqlite_url, bdbc):
    """Until 2026-11-27 `storetune tune --fix` recorded the space's description with its pins labelled
    twice; those stopped campaigns are resumed, not refused as a changed space."""
    history = History(sqlite_url)
    runner = make_runner("dataset", dataset=str(bdbc))
    runner.space = runner.space.fix({"hAVE_CRYPTO": 1})
    runner.space.description += " (hAVE_CRYPTO=1 fixed)"  # what the second pinning added
    campaign_id = interrupted(history, bdbc, runner=runner)
    assert history.campaign(campaign_id).space["description"].count("fixed") == 2
    assert Campaign.resume(history, campaign_id).run().evaluated == 8
    other = make_runner("dataset", dataset=str(bdbc))
    other.space = other.space.fix({"hAVE_CRYPTO": 1})
    other.space.description += " (hAVE_CRYPTO=0 fixed)"  # a label that was never the campaign's
    refused = interrupted(history, bdbc, runner=other)
    with pytest.raises(ValueError, match="changed since it started"):
        Campaign.resume(history, refused)


def test_a_campaign_the_cli_labelled_twice_warm_starts_a_new_one(sqlite_url, bdbc):
    """--warm-start same learns from the twice-labelled records of pinned campaigns too: the same space,
    workload and device, under the fingerprint `tune --fix` recorded until 2026-11-27."""
    history = History(sqlite_url)
    runner = make_runner("dataset", dataset=str(bdbc))
    runner.space = runner.space.fix({"hAVE_CRYPTO": 1})
    runner.space.description += " (hAVE_CRYPTO=1 fixed)"  # what the second pinning added
    old = interrupted(history, bdbc, runner=runner)
    told = len({t.config_hash for t in history.trials(old) if t.status == "SUCCEEDED"})
    assert told > 0  # measured before the interrupt
    new = Campaign.create(history, spec(bdbc, budget=2, seed=5, fixed={"hAVE_CRYPTO": 1}, warm_start="same"))
    assert new.run().warm_started == told


def test_resuming_a_finished_campaign_runs_nothing_more(sqlite_url, bdbc):
    history = History(sqlite_url)
    summary = Campaign.create(history, spec(bdbc, budget=4)).run()
    again = Campaign.resume(history, summary.campaign).run()
    assert again.evaluated == 4 and len(history.trials(summary.campaign)) == 4


def test_a_batch_is_measured_in_parallel_worker_processes(sqlite_url, bdbc):
    from storetune.tuner.execution.local import ProcessExecutor
    from storetune.tuner.execution.jobs import repeat_seeds

    history = History(sqlite_url)
    campaign = Campaign.create(history, spec(bdbc, budget=12, batch_size=4, repeats=2), executor=ProcessExecutor(2))
    summary = campaign.run()
    trials = history.trials(campaign.id, measurements=True)
    assert summary.trials_by_status == {"SUCCEEDED": 12}
    assert len({t.config_hash for t in trials}) == 12 and all(len(t.measurements) == 2 for t in trials)
    local = make_runner("dataset", dataset=str(bdbc))  # the workers measure exactly what this process would
    for t in trials:
        for m, seed in zip(t.measurements, repeat_seeds(t.seed, 2)):
            assert local.run(Config(t.config), local.workload, seed=seed).metrics == m.metrics


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["random", "ga"])
def test_a_parallel_campaign_keeps_its_trials_in_flight_unless_the_algorithm_needs_whole_batches(
        sqlite_url, tmp_path, algorithm):
    """Evaluations of 0, 1 or 2 s (by seed) on two workers: random search is asked for the next
    configuration as each one finishes, so a trial starts while one started earlier still runs; a GA
    breeds from whole generations, so its batches never overlap."""
    from storetune.tuner.execution.local import ProcessExecutor

    bench = tmp_path / "bench.sh"
    bench.write_text("#!/bin/sh\nsleep $(( STORETUNE_SEED % 3 ))\necho '{\"ops\": 1}'\n")
    bench.chmod(0o755)
    history = History(sqlite_url)
    spec = CampaignSpec(runner="command", runner_settings={"command": str(bench), "space": "storage_v1"},
                        algorithm=algorithm, budget=10, batch_size=2, seed=4, metric="ops", direction="max",
                        algorithm_params={"population_size": 4} if algorithm == "ga" else {})
    campaign = Campaign.create(history, spec, executor=ProcessExecutor(2))
    assert campaign.run().trials_by_status == {"SUCCEEDED": 10}
    trials = history.trials(campaign.id)
    overlapping = [(a.number, b.number) for a in trials for b in trials
                   if a.started_at < b.started_at and (b.started_at - a.started_at).total_seconds() > 0.3
                   and b.started_at < a.finished_at]
    if algorithm == "random":
        assert overlapping, [(t.number, t.started_at, t.finished_at) for t in trials]
    else:
        assert not overlapping


def test_a_device_runner_refuses_parallel_workers(sqlite_url):
    from storetune.tuner.execution.local import ProcessExecutor

    runner = make_runner("device", dry_run=True, echo=lambda line: None)
    spec = CampaignSpec(runner="device", runner_settings=runner.settings(), algorithm="random", budget=4)
    history = History(sqlite_url)
    with pytest.raises(ValueError, match="one configuration at a time"):
        Campaign.create(history, spec, runner=runner, executor=ProcessExecutor(2))
    assert history.campaigns() == []


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_objective_fails_its_trial_and_never_becomes_the_best(value):
    from storetune.runners import Status
    from storetune.tuner.objectives.objective import Objective

    objective = Objective("ops", "max")
    status, outcome, reason = objective.outcome([Measurement(Status.SUCCEEDED, {"ops": 10.0}),
                                                 Measurement(Status.SUCCEEDED, {"ops": value})])
    assert status is Status.FAILED and outcome is None
    assert reason == f"the runner reported ops = 10.0, {value}: a value must be a finite number"
    assert objective.outcome([Measurement(Status.SUCCEEDED, {"ops": 10.0})]) == (Status.SUCCEEDED, 10.0, None)


def test_a_warm_started_campaign_shows_its_own_best_and_how_many_trials_were_told(sqlite_url):
    """The progress bar showed the history's best while the summary showed the campaign's."""
    history = History(sqlite_url)
    settings = {"dataset": str(shared("moot_configs/BDBC.csv"))}
    first = Campaign.create(history, CampaignSpec(runner="dataset", runner_settings=settings, budget=60, seed=1))
    first_best = first.run().best_value
    second = Campaign.create(history, CampaignSpec(runner="dataset", runner_settings=settings, budget=3, seed=2,
                                                   warm_start="same"))
    seen = []
    summary = second.run(on_trial=seen.append)
    assert summary.warm_started == 60 and {r.warm_started for r in seen} == {60}
    own = [r.value for r in seen if r.value is not None]
    assert [r.best_value for r in seen][-1] == min(own) == summary.best_value
    assert summary.best_value > first_best  # 3 evaluations do not reach what 60 found: the two must differ
    cold = Campaign.create(history, CampaignSpec(runner="dataset", runner_settings=settings, budget=2, seed=3)).run()
    assert cold.warm_started is None and "warm_started" in cold.to_dict()
