"""The service's worker stops when it is told to, wherever the stop lands: inside a library, in a finaliser that
swallows it, or with the service; the campaign is then resumed or cancelled, nothing lost."""

from __future__ import annotations

import time

import pytest

from rest_client import client_for, wait_for
from test_api import bdbc_campaign


def test_a_stop_that_lands_inside_a_library_still_interrupts_the_worker(tmp_path, monkeypatch):
    """The service's stop raises KeyboardInterrupt wherever the worker is; inside SQLAlchemy's flush, its
    rollback raised ResourceClosedError instead, and the worker called its campaign failed (exit 1). A
    worker whose stop was requested reports the stop (130), so the campaign is queued for the next start."""
    import signal

    import storetune.api.service.worker as worker

    def run(history, *args):
        interrupt = args[-1]
        try:
            interrupt.handler(signal.SIGINT, None)
        except KeyboardInterrupt:
            raise RuntimeError("This transaction is closed") from None

    monkeypatch.setattr(worker, "run_campaign", run)
    monkeypatch.setattr(worker, "die_with_parent", lambda: None)
    previous = signal.getsignal(signal.SIGINT)
    try:
        assert worker.main(["campaign", "1", "--db", f"sqlite:///{tmp_path / 'h.sqlite'}"]) == 130
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
def test_a_clean_stop_interrupts_the_workers_and_the_next_start_resumes(tmp_path, bdbc, caplog, monkeypatch):
    import storetune.api.service.scheduler as scheduler_module

    # a loaded CI host once took the worker past the service's 20 s grace (killed, -9): what is tested here is
    # that the stop is recorded, not how fast
    monkeypatch.setattr(scheduler_module, "STOP_GRACE_S", 90.0)
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    caplog.set_level("INFO", logger="storetune.api.service.scheduler")
    with client_for(url, tmp_path) as client:
        campaign = client.post("/campaigns", json=bdbc_campaign(bdbc, budget=2500)).json()
        deadline = time.monotonic() + 60
        while client.get(f"/campaigns/{campaign['id']}").json()["progress"]["evaluated"] < 5:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    # the worker was interrupted (exit status 130: it recorded its stop), not killed with the thread
    assert f"campaign {campaign['id']}: stopped with the service (worker exit status 130)" in caplog.text
    with client_for(url, tmp_path) as client:
        stopped = client.get(f"/campaigns/{campaign['id']}").json()
        assert "RUNNING" not in stopped["progress"]["trials_by_status"]  # the interrupted worker said so itself
        assert client.post(f"/campaigns/{campaign['id']}/cancel").status_code == 200
        assert wait_for(client, f"/campaigns/{campaign['id']}", ("cancelled",))["state"] == "cancelled"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_stop_that_a_finaliser_swallowed_is_raised_at_the_next_trial(tmp_path, bdbc):
    """The service's SIGINT can land in a finaliser (CI saw it in SQLAlchemy's InstanceState._cleanup),
    where Python drops the KeyboardInterrupt: the worker must still stop after its next trial."""
    import gc
    import os
    import signal

    from storetune.api.service.worker import Interrupt, run_campaign
    from storetune.tuner import Campaign, CampaignSpec, History

    class Finalised:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100_000):  # the handler runs here, and its exception is dropped
                pass

    history = History(f"sqlite:///{tmp_path / 'h.sqlite'}")
    campaign = Campaign.create(history, CampaignSpec(runner="dataset", runner_settings={"dataset": str(bdbc)},
                                                     budget=500, seed=1), state="queued")
    interrupt, previous = Interrupt(), signal.getsignal(signal.SIGINT)
    interrupt.install()
    try:
        Finalised()
        gc.collect()
        assert interrupt.requested  # the signal arrived, and its exception went nowhere
        with pytest.raises(KeyboardInterrupt):
            run_campaign(history, campaign.id, 1, None, interrupt)
        os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C does not cut the recording short
    finally:
        signal.signal(signal.SIGINT, previous)
    record = history.campaign(campaign.id)
    assert record.state == "interrupted"
    assert len(history.trials(campaign.id)) == 1  # stopped after its first recorded trial
