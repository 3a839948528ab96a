"""The REST service as a real process: SIGKILLed mid-campaign and started again, or asked to cancel.

`storetune serve` runs on a free port over a SQLite history in tmp_path. Its campaigns use the
command runner on a benchmark script of the test's: each run sleeps a little, and one chosen run
holds (RUNNING) for as long as the test keeps a ``hold`` file, so the test kills or cancels the
service with a trial running, deterministically, and then lets that run finish.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx2
import pytest

from conftest import ROOT, STORETUNE

SLEEP_S = 0.1
BUDGET = 12
HOLD_AT = 3  # the 4th run holds: three trials are done when the test acts
TERMINAL = ("SUCCEEDED", "FAILED", "INVALID", "TIMEOUT")

# The user's benchmark: counts its runs in ``here``, holds on run ``hold_at`` while ``here/hold``
# exists (saying so in ``here/held``), sleeps, then prints a deterministic function of the configuration.
BENCH = textwrap.dedent(
    """
    import json, os, pathlib, time, zlib
    config = json.loads(os.environ["STORETUNE_CONFIG"])
    here = pathlib.Path({here!r})
    run = 0
    while True:
        try:
            os.close(os.open(here / f"run-{{run}}", os.O_CREAT | os.O_EXCL))
            break
        except FileExistsError:
            run += 1
    if run == {hold_at} and (here / "hold").exists():
        (here / "held").write_text(str(os.getpid()))
        deadline = time.monotonic() + 60
        while (here / "hold").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    time.sleep({sleep})
    base = zlib.crc32(json.dumps(config, sort_keys=True).encode()) % 1000
    print(json.dumps({{"throughput_ops": base + config["block_size"] / 100}}))
    """
)


class Bench:
    """The benchmark script in ``tmp_path/bench`` and its hold."""

    def __init__(self, tmp_path: Path, hold_at: int = HOLD_AT):
        self.here = tmp_path / "bench"
        self.here.mkdir()
        self.script = self.here / "bench.py"
        self.script.write_text(BENCH.format(here=str(self.here), hold_at=hold_at, sleep=SLEEP_S))
        (self.here / "hold").touch()
        self.command = f"{sys.executable} {self.script}"

    def wait_held(self, service: Service, timeout: float = 45) -> None:
        deadline = time.monotonic() + timeout
        while not (self.here / "held").exists():
            if time.monotonic() > deadline:
                raise AssertionError(f"run {HOLD_AT} of the benchmark never started:\n{service.output()}")
            time.sleep(0.02)

    def release(self) -> None:
        (self.here / "hold").unlink(missing_ok=True)


class Service:
    """One `storetune serve` process; ``kill()`` is SIGKILL, as an OOM killer or a power cut would."""

    def __init__(self, tmp_path: Path, db: str, log_name: str):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = tmp_path / log_name
        env = {**os.environ, "PYTHONPATH": str(ROOT), "STORETUNE_DATABASE_URL": db, "STORETUNE_ALLOW_COMMANDS": "1",
               "STORETUNE_DATA_DIRS": str(tmp_path), "STORETUNE_MAX_CAMPAIGNS": "1"}
        env.pop("STORETUNE_TOKEN", None)
        with open(self.log, "w") as log:
            self.process = subprocess.Popen([*STORETUNE, "serve", "--host", "127.0.0.1", "--port", str(self.port),
                                             "--db", db, "--log-level", "warning"],
                                            env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        self.client = httpx2.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10)
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"storetune serve exited ({self.process.returncode}):\n{self.output()}")
            try:
                if self.client.get("/health").status_code == 200:
                    return
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"storetune serve did not answer /health within 30 s:\n{self.output()}")
            time.sleep(0.1)

    def output(self) -> str:
        return self.log.read_text()[-3000:]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        self.client.close()

    def launch(self, bench: Bench, budget: int = BUDGET, parallel: int = 1) -> int:
        response = self.client.post("/campaigns", json={
            "runner": "command", "runner_settings": {"command": bench.command, "space": "storage_v1"},
            "metric": "throughput_ops", "direction": "max", "algorithm": "random", "budget": budget, "seed": 1,
            "parallel": parallel})
        assert response.status_code == 201, response.text
        assert response.headers["location"] == f"/campaigns/{response.json()['id']}"
        return response.json()["id"]

    def campaign(self, campaign_id: int) -> dict[str, Any]:
        response = self.client.get(f"/campaigns/{campaign_id}")
        assert response.status_code == 200, response.text
        return response.json()

    def trials(self, campaign_id: int) -> list[dict[str, Any]]:
        response = self.client.get(f"/campaigns/{campaign_id}/trials", params={"limit": 1000})
        assert response.status_code == 200, response.text
        page = response.json()
        assert page["total"] == len(page["items"])
        return page["items"]

    def wait(self, campaign_id: int, ready, what: str, timeout: float = 45) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            campaign = self.campaign(campaign_id)
            if ready(campaign):
                return campaign
            if time.monotonic() > deadline:
                raise AssertionError(f"campaign {campaign_id} never {what}: {campaign}\n{self.output()}")
            time.sleep(0.05)

    def wait_ended(self, campaign_id: int) -> dict[str, Any]:
        return self.wait(campaign_id, lambda c: c["state"] not in ("queued", "running"), "ended")


def workers(db: str, campaign_id: int) -> list[int]:
    """The live `python -m storetune.api.service.worker campaign <id>` processes of the history ``db`` (which a worker
    gets in its environment, not its argv; a zombie has no cmdline)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if b"storetune.api.service.worker" in argv and b"STORETUNE_DATABASE_URL=" + db.encode() in environ \
                and argv[argv.index(b"storetune.api.service.worker") + 1:][:2] == [b"campaign", str(campaign_id).encode()]:
            assert db.encode() not in argv  # the history's URL (and any password in it) stays out of argv
            found.append(int(entry))
    return found


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (its children, theirs...), read from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        below = [p for p, parent in parents.items() if parent in frontier]
        found += below
        frontier = below
    return found


def alive(pid: int) -> bool:
    """A running process (a zombie, whose cmdline is empty, is not)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return bool(f.read())
    except OSError:
        return False


def no_worker_left(db: str, campaign_id: int, timeout: float = 10) -> bool:
    """Whether every worker of the campaign is gone within ``timeout`` (one that recorded the end of
    its campaign still has to close the history and exit; one whose service died, to be killed)."""
    deadline = time.monotonic() + timeout
    while workers(db, campaign_id):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def rows(path: Path, campaign_id: int) -> list[tuple]:
    """(id, number, status, config_hash, retry_of) of the campaign's trials, from the history itself
    (retry_of is a trial id there; the API shows the retried trial's number)."""
    with sqlite3.connect(path) as c:
        return c.execute("SELECT id, number, status, config_hash, retry_of FROM trials WHERE campaign_id = ? "
                         "ORDER BY number", (campaign_id,)).fetchall()


def evaluated(campaign: dict[str, Any]) -> int:
    return campaign["progress"]["evaluated"]


def stop(*services: Service | None) -> None:
    for s in services:
        if s is not None:
            s.kill()


def test_sigkill_the_service_mid_campaign_then_restart_finishes_it_exactly(tmp_path: Path):
    path = tmp_path / "history.sqlite"
    db = f"sqlite:///{path}"
    bench = Bench(tmp_path)
    first = second = None
    try:
        first = Service(tmp_path, db, "first.log")
        campaign_id = first.launch(bench)
        bench.wait_held(first)
        running = first.campaign(campaign_id)
        assert running["state"] == "running" and evaluated(running) == HOLD_AT, running
        assert running["progress"]["trials_by_status"].get("RUNNING") == 1, running
        (worker,) = workers(db, campaign_id)
        first.kill()  # the kernel kills the worker with its parent (PR_SET_PDEATHSIG)
        assert no_worker_left(db, campaign_id), f"worker {worker} outlived the service it belonged to"
        bench.release()  # the held benchmark (its own session) ends; its result has nowhere to go

        at_kill = rows(path, campaign_id)
        left_running = {t[0] for t in at_kill if t[2] == "RUNNING"}
        assert [t[2] for t in at_kill] == ["SUCCEEDED"] * HOLD_AT + ["RUNNING"], at_kill

        second = Service(tmp_path, db, "second.log")
        finished = second.wait_ended(campaign_id)
        assert finished["state"] == "finished", (finished, second.output())
        assert evaluated(finished) == BUDGET
        by_status = finished["progress"]["trials_by_status"]
        assert sum(n for s, n in by_status.items() if s in TERMINAL) == BUDGET
        assert by_status == {"SUCCEEDED": BUDGET, "STALE": len(left_running)}, by_status

        api = second.trials(campaign_id)
        numbers = [t["number"] for t in api]
        assert len(set(numbers)) == len(numbers) == BUDGET + len(left_running)
        assert numbers == list(range(len(numbers)))

        history = rows(path, campaign_id)
        number_of = {t[0]: t[1] for t in history}
        assert [(t[1], t[2], t[3], number_of.get(t[4])) for t in history] == \
               [(t["number"], t["status"], t["config_hash"], t["retry_of"]) for t in api]
        stale = {t[0]: t for t in history if t[2] == "STALE"}
        assert set(stale) == left_running  # exactly the trials the kill left RUNNING became STALE
        for trial_id, s in stale.items():  # and each was measured again, once, after it
            (retry,) = [t for t in history if t[4] == trial_id]
            assert retry[3] == s[3] and retry[2] == "SUCCEEDED" and retry[1] > s[1]
        assert sorted(t[4] for t in history if t[4] is not None) == sorted(stale)
        counted = [t for t in history if t[2] != "STALE"]
        assert len(counted) == BUDGET
        twice = [h for h, n in Counter(t[3] for t in counted).items() if n > 1]
        assert twice == [], f"configurations measured twice: {twice}"
        assert no_worker_left(db, campaign_id)  # the second service's worker ended with the campaign
    finally:
        bench.release()
        stop(first, second)


def test_cancel_drains_a_running_campaign_then_resume_finishes_it(tmp_path: Path):
    path = tmp_path / "history.sqlite"
    db = f"sqlite:///{path}"
    bench = Bench(tmp_path)
    service = None
    try:
        service = Service(tmp_path, db, "service.log")
        campaign_id = service.launch(bench)
        bench.wait_held(service)

        cancel = service.client.post(f"/campaigns/{campaign_id}/cancel")
        assert cancel.status_code == 200, cancel.text
        assert cancel.json()["cancel_requested"] is True and cancel.json()["state"] == "running"
        time.sleep(0.5)  # the held trial is still running: the campaign waits for it
        draining = service.campaign(campaign_id)
        assert draining["state"] == "running" and draining["cancel_requested"] is True, draining
        assert [t["status"] for t in service.trials(campaign_id)] == ["SUCCEEDED"] * HOLD_AT + ["RUNNING"]
        bench.release()

        cancelled = service.wait(campaign_id, lambda c: c["state"] != "running", "drained")
        assert cancelled["state"] == "cancelled", cancelled
        trials = service.trials(campaign_id)
        # the trial running at the cancel finished and was recorded; none started after it
        assert [t["status"] for t in trials] == ["SUCCEEDED"] * (HOLD_AT + 1)
        assert trials[HOLD_AT]["value"] is not None and trials[HOLD_AT]["finished_at"] is not None
        assert evaluated(cancelled) == HOLD_AT + 1
        assert service.client.post(f"/campaigns/{campaign_id}/cancel").status_code == 409  # nothing to cancel
        assert no_worker_left(db, campaign_id)

        resumed = service.client.post(f"/campaigns/{campaign_id}/resume")
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["state"] in ("queued", "running") and resumed.json()["cancel_requested"] is False
        finished = service.wait_ended(campaign_id)
        assert finished["state"] == "finished" and evaluated(finished) == BUDGET, finished
        assert finished["progress"]["trials_by_status"] == {"SUCCEEDED": BUDGET}
        trials = service.trials(campaign_id)
        assert [t["number"] for t in trials] == list(range(BUDGET))
        assert all(t["retry_of"] is None for t in trials)  # a drained campaign has nothing to re-run
        assert len({t["config_hash"] for t in trials}) == BUDGET  # nor anything measured twice
        assert service.client.post(f"/campaigns/{campaign_id}/resume").status_code == 409  # finished is final
        assert no_worker_left(db, campaign_id)
    finally:
        bench.release()
        stop(service)


def test_sigkill_the_service_leaves_no_process_of_a_parallel_campaign(tmp_path: Path):
    """A parallel campaign's pool (forkserver children, not the worker's) outlived a SIGKILL until
    its processes watched the driver."""
    path = tmp_path / "history.sqlite"
    db = f"sqlite:///{path}"
    bench = Bench(tmp_path, hold_at=-1)  # nothing holds
    service, below = None, []
    try:
        service = Service(tmp_path, db, "service.log")
        campaign_id = service.launch(bench, budget=40, parallel=2)
        service.wait(campaign_id, lambda c: c["state"] == "running" and evaluated(c) >= 4, "measured 4 trials")
        (worker,) = workers(db, campaign_id)
        below = descendants(worker)  # the pool's processes, and the benchmarks they run
        service.kill()
        assert no_worker_left(db, campaign_id)
        deadline = time.monotonic() + 5  # a benchmark running at the kill ends within SLEEP_S
        while [p for p in below if alive(p)] and time.monotonic() < deadline:
            time.sleep(0.1)
        left = {p: open(f"/proc/{p}/cmdline", "rb").read()[:80] for p in below if alive(p)}
        assert left == {}, f"processes of campaign {campaign_id} outlived its worker {worker}: {left}"
    finally:
        stop(service)
        for p in below:  # what the worker started and left behind, by pid
            if alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
