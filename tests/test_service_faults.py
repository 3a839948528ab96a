"""The service rides out what goes wrong beneath it, with real processes: its own PostgreSQL server restarted
mid-campaign, and campaign workers killed (requeued within seconds; failed after three deaths in a row).

`storetune serve` runs as a real process (tests/test_api_restart.py's ``Service``); its campaigns use the
command runner on a benchmark script of the test's.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import PrivatePostgres
from test_api_restart import Service

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

# Sleeps, then prints a deterministic function of the configuration; while ``here/hold`` exists it holds
# instead (saying its pid in ``here/held-<pid>``), so the test can kill a worker with a trial running.
BENCH = textwrap.dedent(
    """
    import json, os, pathlib, time, zlib
    here = pathlib.Path({here!r})
    if (here / "hold").exists():
        (here / f"held-{{os.getpid()}}").touch()
        deadline = time.monotonic() + 120
        while (here / "hold").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    time.sleep({sleep})
    config = json.loads(os.environ["STORETUNE_CONFIG"])
    print(json.dumps({{"ops": zlib.crc32(json.dumps(config, sort_keys=True).encode()) % 1000 + 1}}))
    """
)


@pytest.fixture
def server():
    pg = PrivatePostgres()
    try:
        yield pg
    finally:
        pg.stop()


def bench(tmp_path: Path, sleep: float = 0.05) -> tuple[Path, str]:
    here = tmp_path / "bench"
    here.mkdir()
    (here / "bench.py").write_text(BENCH.format(here=str(here), sleep=sleep))
    return here, f"{sys.executable} {here / 'bench.py'}"


def launch(service: Service, command: str, budget: int) -> int:
    response = service.client.post("/campaigns", json={
        "runner": "command", "runner_settings": {"command": command, "space": "storage_v1"}, "metric": "ops",
        "direction": "max", "algorithm": "random", "budget": budget, "seed": 1})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def evaluated(service: Service, campaign: int) -> int:
    return service.campaign(campaign)["progress"]["evaluated"]


def worker_of(service: Service, campaign: int, timeout: float = 30, other: int | None = None) -> int:
    """The pid of the service's worker process that runs ``campaign`` (one that is not ``other``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if parent == service.process.pid and b"storetune.api.service.worker" in argv \
                    and argv[argv.index(b"storetune.api.service.worker") + 1:][:2] == [b"campaign", str(campaign).encode()] \
                    and int(entry.name) != other:
                return int(entry.name)
        time.sleep(0.05)
    raise AssertionError(f"no worker runs campaign {campaign}:\n{service.output()}")


def test_a_postgres_restart_mid_campaign_strands_nothing_and_records_every_trial_once(server, tmp_path):
    """pg_ctl stop -m fast with a campaign running, and start 2 s later: the service and its worker ride it out
    (their calls are retried), the campaign finishes by itself, and every trial is recorded once, with one
    measurement. The 2 s outage makes sure the worker (a trial every ~0.1 s) calls the history while it is down:
    a bare restart can fall between two calls, and then there is nothing to retry."""
    _, command = bench(tmp_path)
    service = Service(tmp_path, server.url, "service.log")
    try:
        campaign = launch(service, command, budget=80)
        deadline = time.monotonic() + 60
        while evaluated(service, campaign) < 15:
            assert time.monotonic() < deadline, service.output()
            time.sleep(0.05)
        server.restart(down_s=2)
        assert service.client.get("/health").status_code == 200  # the service answers again at once
        done = service.wait(campaign, lambda c: c["state"] in ("finished", "failed"), "finished", timeout=120)
        assert done["state"] == "finished", (done["note"], service.output())
        trials = service.trials(campaign)
        assert [t["number"] for t in trials] == list(range(80))
        assert Counter(t["status"] for t in trials) == {"SUCCEEDED": 80}  # none STALE: the worker never died
        assert len({t["config_hash"] for t in trials}) == 80
        assert "worker died" not in service.output() and "ERROR" not in service.output()
        from storetune.tuner import History

        history = History(server.url)
        assert all(t.runs == 1 and len(t.measurements) == 1 for t in history.trials(campaign, measurements=True))
        assert "the history's database did not answer" in service.output()  # it was retried, and said so
    finally:
        service.kill()


def test_a_worker_that_dies_is_requeued_in_seconds_and_failed_after_three_deaths_in_a_row(server, tmp_path):
    here, command = bench(tmp_path)
    service = Service(tmp_path, server.url, "service.log")
    try:
        campaign = launch(service, command, budget=30)
        deadline = time.monotonic() + 60
        while evaluated(service, campaign) < 3:
            assert time.monotonic() < deadline, service.output()
            time.sleep(0.05)
        (here / "hold").touch()  # from now on each run holds: no trial finishes between the kills
        for death in range(1, 4):
            while not list(here.glob("held-*")):
                assert time.monotonic() < deadline + 60 * death, service.output()
                time.sleep(0.05)
            worker, progress = worker_of(service, campaign), evaluated(service, campaign)
            for held in here.glob("held-*"):
                held.unlink()
            os.kill(worker, signal.SIGKILL)
            killed = time.monotonic()
            if death < 3:  # requeued and running again under a new worker within seconds
                worker_of(service, campaign, timeout=20, other=worker)
                assert time.monotonic() - killed < 10
                assert evaluated(service, campaign) == progress
        failed = service.wait(campaign, lambda c: c["state"] == "failed", "failed", timeout=30)
        assert "died 3 times in a row" in failed["note"] and "resume it" in failed["note"]
        (here / "hold").unlink()
        # a resume through the API finishes it: each configuration once, the killed workers' trials re-run
        assert service.client.post(f"/campaigns/{campaign}/resume").status_code == 200
        done = service.wait(campaign, lambda c: c["state"] == "finished", "finished", timeout=120)
        assert done["progress"]["evaluated"] == 30
        trials = service.trials(campaign)
        succeeded = [t for t in trials if t["status"] == "SUCCEEDED"]
        assert len(succeeded) == 30 and len({t["config_hash"] for t in succeeded}) == 30
        assert {t["status"] for t in trials} <= {"SUCCEEDED", "STALE"}
    finally:
        (here / "hold").unlink(missing_ok=True)
        service.kill()
