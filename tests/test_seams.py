"""The seams the CLI, the service and workers share: runner settings models, the shared
validate-and-never-raise wrapper, frozen views, the one "better", and the dry run's path."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import run_cli, shared
from storetune.runners import RUNNERS, Measurement, RunnerBase, Status, make_runner
from storetune.runners.settings import SETTINGS, DeviceSettings
from storetune.search_spaces import format_config, load_space
from storetune.search_spaces.status import better, loss, within_of_best
from storetune.tuner import Campaign, CampaignSpec, History, make_tuner


def test_a_runner_is_built_from_its_settings_model_and_gives_them_back():
    table = str(shared("moot_configs/BDBC.csv"))
    runner = make_runner("dataset", {"dataset": table})
    again = make_runner("dataset", runner.settings())
    assert again.settings() == runner.settings() and again.workload.fingerprint() == runner.workload.fingerprint()
    with pytest.raises(ValueError, match=r"dataset runner: colour: not a setting of this runner"):
        make_runner("dataset", {"dataset": table, "colour": "red"})
    with pytest.raises(ValueError, match=r"dataset runner: .*color.*not a setting"):
        make_runner("dataset", dataset=table, color="red")
    assert set(SETTINGS) == set(RUNNERS) >= {"dataset", "command", "device", "admission"}  # one registry


def test_the_device_settings_have_one_set_of_defaults():
    runner = make_runner("device", dry_run=True, echo=lambda _line: None)
    assert runner.settings() == DeviceSettings().model_dump(mode="json")
    assert runner.runtime_s == DeviceSettings().runtime_s and str(runner.loop_dir) == DeviceSettings().loop_dir


@pytest.mark.parametrize("runtime", [0.2, 1.9, 2.5])
def test_a_device_run_lasts_whole_seconds(tmp_path, runtime):
    """fio reads runtime=1.9s as 1 s and 0.2s as no runtime at all: every run failed and its configuration was
    blamed, with exit status 0. A runtime that is not a whole number of seconds is refused before anything runs,
    in one line, and nothing is written."""
    with pytest.raises(ValueError, match=r"^device runner: runtime_s: fio and Filebench run for whole seconds: "
                                         r"give 1 or more, e\.g\. \d+, not " + str(runtime) + "$"):
        make_runner("device", dry_run=True, echo=lambda _line: None, runtime_s=runtime)
    db = tmp_path / "h.sqlite"
    out = run_cli("tune", "--runner", "device", "--runtime", str(runtime), "--budget", "1", "--dry-run",
                  db=f"sqlite:///{db}")
    assert out.returncode == 2 and "whole seconds" in out.stderr and "Traceback" not in out.stderr
    assert not db.exists()
    assert make_runner("device", dry_run=True, echo=lambda _line: None, runtime_s=2.0).runtime_s == 2


class Exploding(RunnerBase):
    name = "exploding"

    def __init__(self) -> None:
        super().__init__(None)
        self.space = load_space("storage_v1")
        self.workload = None  # type: ignore[assignment]
        self.calls = 0

    def measure(self, config, workload, *, seed):  # type: ignore[no-untyped-def]
        self.calls += 1
        raise RuntimeError("disk on fire")


def test_the_shared_wrapper_validates_once_and_never_raises():
    runner = Exploding()
    outside = runner.space.default().replace(no_such_knob=1)
    m = runner.run(outside, None, seed=0)  # type: ignore[arg-type]
    assert m.status is Status.INVALID and "no_such_knob" in m.reason and runner.calls == 0
    m = runner.run(runner.space.default(), None, seed=0)  # type: ignore[arg-type]
    assert (m.status, m.reason, runner.calls) == (Status.FAILED, "runner raised RuntimeError: disk on fire", 1)


def test_the_history_hands_out_frozen_views(sqlite_url):
    history = History(sqlite_url)
    spec = CampaignSpec(runner="dataset", runner_settings={"dataset": str(shared("moot_configs/BDBC.csv"))},
                        budget=3)
    campaign = Campaign.create(history, spec)
    campaign.run()
    record, trials = history.campaign(campaign.id), history.trials(campaign.id, measurements=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.state = "running"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        trials[0].value = 0.0  # type: ignore[misc]
    assert trials[0].measurements and trials[0].measurements[0].env["engine"] == "dataset"
    assert history.trials(campaign.id)[0].measurements is None  # read without them, and it says so
    assert history.campaign(campaign.id).state == "finished"


def test_one_helper_decides_better_in_both_directions():
    assert better(1.0, 2.0, "min") and not better(2.0, 1.0, "min") and not better(1.0, 1.0, "min")
    assert better(2.0, 1.0, "max") and loss(3.0, "max") == -3.0
    assert within_of_best(99.0, 100.0, "max", 0.99) and not within_of_best(98.9, 100.0, "max", 0.99)
    assert within_of_best(101.0, 100.0, "min", 0.99) and not within_of_best(101.1, 100.0, "min", 0.99)
    with pytest.raises(ValueError, match="direction must be 'min' or 'max'"):
        better(1.0, 2.0, "up")


def test_a_measurement_is_data_not_an_exception():
    assert Measurement.failed(Status.TIMEOUT, "slow").status is Status.TIMEOUT


def test_the_dry_run_goes_through_the_campaign_path(sqlite_url):
    """The dry run honours --fix and --repeats, and shows the configurations the campaign would run."""
    proc = run_cli("tune", "--runner", "device", "--dry-run", "--fix", "fs=xfs", "--repeats", "2",
                   "--algorithm", "random", "--seed", "4", "--budget", "5", db=sqlite_url, check=True)
    headers = [line for line in proc.stdout.splitlines() if line.startswith("# evaluation")]
    assert len(headers) == 3 and all("fs=xfs" in h for h in headers), proc.stdout
    assert proc.stdout.count("mkfs.xfs") >= 3 and "2 repeats each" in proc.stdout
    assert "# teardown" in proc.stdout and History(sqlite_url).campaigns() == []

    # the same configurations a real campaign with the same seed asks first
    space = load_space("storage_v2").fix({"fs": "xfs"})
    first = make_tuner("random", space, seed=4, direction="max").ask(3)
    for header, config in zip(headers, first):
        assert header.endswith(format_config(config))


def test_convergence_counts_finished_trials_and_keeps_the_best_in_both_directions():
    from datetime import datetime, timedelta, timezone

    from storetune.tuner.analysis.summary import convergence

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = [(0, "SUCCEEDED", 5.0, t0, t0 + timedelta(seconds=1)),
            (1, "STALE", None, t0, t0 + timedelta(seconds=2)),
            (2, "FAILED", None, t0, t0 + timedelta(seconds=3)),
            (3, "SUCCEEDED", 7.0, t0, t0 + timedelta(seconds=4)),
            (4, "SUCCEEDED", 3.0, t0, t0 + timedelta(seconds=5)),
            (5, "RUNNING", None, t0, None)]
    low = convergence(rows, "min")
    assert (low.evaluation, low.trial, low.value) == ([1, 2, 3, 4], [0, 2, 3, 4], [5.0, None, 7.0, 3.0])
    assert low.best == [5.0, 5.0, 5.0, 3.0] and low.elapsed_s == [1.0, 3.0, 4.0, 5.0]
    assert convergence(rows, "max").best == [5.0, 5.0, 7.0, 7.0]
    assert convergence([(0, "FAILED", None, t0, t0)], "max").best == [None]


def test_resuming_a_cancelled_campaign_withdraws_the_cancel(sqlite_url):
    """A campaign cancelled through the API can be finished by `storetune tune --resume`."""
    history = History(sqlite_url)
    spec = CampaignSpec(runner="dataset", runner_settings={"dataset": str(shared("moot_configs/BDBC.csv"))},
                        budget=6)
    campaign = Campaign.create(history, spec)
    history.transition(campaign.id, ["running"], cancel_requested=True)
    assert campaign.run().state == "cancelled" and history.campaign(campaign.id).note.startswith("cancelled after 0")
    summary = Campaign.resume(history, campaign.id).run()
    assert (summary.state, summary.evaluated) == ("finished", 6)
    assert history.campaign(campaign.id).cancel_requested is False


def test_an_interrupted_benchmark_is_killed_and_reaped_even_if_popen_was_left_half_set_up():
    """CI saw a Ctrl-C land inside communicate(): the second communicate() of the runner's clean-up raised
    AttributeError ('_fileobj2output'), which replaced the KeyboardInterrupt, and the campaign went on.
    kill_group kills the benchmark's session and, if communicate() fails so, waits for it instead."""
    import subprocess

    from storetune.runners.base import kill_group

    proc = subprocess.Popen(["sleep", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)

    def broken(*_args, **_kwargs):
        raise AttributeError("'Popen' object has no attribute '_fileobj2output'")

    proc.communicate = broken  # type: ignore[method-assign]
    kill_group(proc)
    assert proc.returncode == -9


def test_an_interrupt_as_the_benchmark_ends_is_not_turned_into_a_failed_trial():
    """A Ctrl-C that lands as the command ends finds its process group gone: killpg's ProcessLookupError
    replaced the KeyboardInterrupt, and a sweep under load went on to its end (exit 0)."""
    import subprocess

    from storetune.runners.base import kill_group

    proc = subprocess.Popen(["true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    proc.communicate()  # ended and reaped: its group is empty
    kill_group(proc)  # must not raise
    assert proc.returncode == 0


def test_a_new_runner_is_its_module_its_settings_model_and_one_registry_entry(monkeypatch, tmp_path):
    """A fifth runner, registered by its settings model alone: the command line offers its settings as options
    and the server polices its fields as the model marks them, with no edit anywhere else."""
    import typer
    from typer.testing import CliRunner

    from storetune.api.cli.common import runner_settings, with_runner_options
    from storetune.api.service.policy import Refused, apply_policy
    from storetune.api.settings import Settings
    from storetune.runners.settings import SETTINGS, RunnerSettings, setting

    class ProbeSettings(RunnerSettings):
        """A runner of the test's."""

        runner = "tests.probe:ProbeRunner"
        probe_file: str = setting(policy="path", description="A file the probe reads.")
        probe_depth: int = setting(3, flag="--depth", ge=1, description="How deep it probes.")

    monkeypatch.setitem(SETTINGS, "probe", ProbeSettings)
    seen = {}
    app = typer.Typer()

    @app.command()
    @with_runner_options()
    def tune(runner: str = "probe", runner_options: dict | None = None) -> None:
        seen.update(runner_settings(runner, runner_options or {}).model_dump())

    result = CliRunner().invoke(app, ["--probe-file", "/data/x.bin", "--depth", "5"])
    assert result.exit_code == 0, result.output
    assert seen == {"probe_file": "/data/x.bin", "probe_depth": 5}
    server = Settings(data_dirs=str(tmp_path))
    with pytest.raises(Refused, match="outside the data directories"):
        apply_policy(server, "probe", {"probe_file": "/elsewhere/x.bin"})
    (tmp_path / "x.bin").write_bytes(b"")
    assert apply_policy(server, "probe", {"probe_file": str(tmp_path / "x.bin")})["probe_file"] == str(tmp_path / "x.bin")
