"""The service's campaign workers: a queue in the history, and at most ``max_campaigns`` worker
processes draining it.

Campaigns and comparisons the API launches are recorded ``queued`` (origin ``api``). A thread of
the service claims the oldest queued one whenever a slot is free (an atomic conditional UPDATE that
records the service as its driver), starts a worker process for it (``api/worker.py``), and reaps
the workers that end. Nothing runs in a request handler, and each campaign's worker is its only
writer. The queue lives in the history, so it survives the service:

- at start, the service's campaigns left RUNNING under a dead driver (the service was killed) go
  back to the queue; their worker resumes them exactly as ``storetune tune --resume`` does;
- at a clean stop (Ctrl-C, SIGTERM), the workers are interrupted (they record their last trial),
  and their campaigns are queued again for the next start;
- a worker that dies on its own (killed, out of memory) has its campaign re-queued, up to
  ``RETRIES`` times, then ``failed`` with the exit status.

Campaigns of an exclusive runner (the device runner: it owns a disk, and Filebench switches ASLR
machine-wide) run one at a time, whatever ``max_campaigns`` says.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from runners import runner_class
from tuner import History
from tuner.campaign import driver_alive

log = logging.getLogger(__name__)

RETRIES = 2  # a campaign whose worker died this many times more is failed, not re-queued
POLL_S = 0.2
STOP_GRACE_S = 20.0  # how long an interrupted worker may take to record its last trial


@dataclass
class Worker:
    kind: str  # campaign | comparison
    id: int
    process: subprocess.Popen
    exclusive: bool = False


class Scheduler:
    def __init__(self, history: History, database_url: str, max_running: int, comparison_workers: int = 1):
        self.history, self.url = history, database_url
        self.max_running, self.comparison_workers = max_running, comparison_workers
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.workers: dict[tuple[str, int], Worker] = {}
        self.deaths: dict[tuple[str, int], int] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        self.adopt()
        self._thread = threading.Thread(target=self._run, name="storetune-scheduler", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Look at the queue now (a campaign was launched, cancelled or resumed)."""
        self._wake.set()

    def stop(self) -> None:
        """Interrupt the workers; their campaigns are queued again for the next start. The thread
        that started the workers stops them: the kernel's parent-death signal (api/worker.py) is
        tied to that thread, so it must outlive them."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_GRACE_S + 15)

    def running(self) -> int:
        with self._lock:
            return len(self.workers)

    # --- the queue ------------------------------------------------------------------------------
    def adopt(self) -> None:
        """The service's campaigns left running by a driver that is gone go back to the queue; its
        comparisons, which do not resume, are marked interrupted."""
        for c in self.history.campaigns(origin="api", states=("running",)):
            if self._was_mine(c.driver_host, c.driver_pid) or not driver_alive(c.driver_host, c.driver_pid):
                log.info("campaign %s: left running by a service that is gone; queued to resume", c.id)
                self.history.transition(c.id, ["running"], state="queued",
                                        note="the service stopped while it ran; resumed at the next start")
        for k in self.history.comparisons(origin="api", states=("running",)):
            driver = k.settings.get("driver") or {}
            if self._was_mine(driver.get("host"), driver.get("pid")) or not driver_alive(driver.get("host"),
                                                                                         driver.get("pid")):
                self.history.finish_comparison(k.id, "interrupted", None,
                                               "the service stopped while it ran; launch it again")

    def _was_mine(self, host: str | None, pid: int | None) -> bool:
        """A driver recorded with this service's own host and pid, seen at start, is a predecessor
        that had the same pid (a container's service is pid 1 every time): it is gone."""
        return host == self.host and pid == self.pid

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._reap()
                self._dispatch()
            except Exception:  # a database hiccup must not kill the scheduler: log, retry
                log.exception("scheduler")
            self._wake.wait(POLL_S)
            self._wake.clear()
        self._stop_workers()

    def _dispatch(self) -> None:
        while self.running() < self.max_running and not self._stop.is_set():
            if not (self._next_campaign() or self._next_comparison()):
                return

    def _next_campaign(self) -> bool:
        with self._lock:
            device_busy = any(w.exclusive for w in self.workers.values())
        for c in self.history.campaigns(origin="api", states=("queued",), limit=16):
            exclusive = bool(getattr(runner_class(c.runner), "exclusive", False))
            if exclusive and device_busy:
                continue  # waits for the device campaign that runs
            # claimed atomically, with this service as its driver until the worker takes over:
            # two services on one history never run a campaign twice
            if self.history.transition(c.id, ["queued"], state="running", driver_host=self.host,
                                       driver_pid=self.pid, note=None):
                self._spawn("campaign", c.id, exclusive)
                return True
        return False

    def _next_comparison(self) -> bool:
        for k in self.history.comparisons(origin="api", states=("queued",), limit=1):
            settings = {**k.settings, "driver": {"host": self.host, "pid": self.pid}}
            if self.history.transition_comparison(k.id, ["queued"], state="running", settings=settings):
                self._spawn("comparison", k.id)
                return True
        return False

    def _spawn(self, kind: str, item: int, exclusive: bool = False) -> None:
        argv = [sys.executable, "-m", "api.worker", kind, str(item), "--handed-by", str(self.pid),
                "--comparison-workers", str(self.comparison_workers)]
        # the history's URL goes by the environment: a password in argv is readable by every local user
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "STORETUNE_DATABASE_URL": self.url}
        try:
            process = subprocess.Popen(argv, env=env, cwd=os.getcwd())
        except OSError as e:
            log.error("%s %s: cannot start a worker: %s", kind, item, e)
            if kind == "campaign":
                self.history.finish_campaign(item, "failed", f"the service could not start its worker: {e}")
            else:
                self.history.finish_comparison(item, "failed", None, f"the service could not start its worker: {e}")
            return
        with self._lock:
            self.workers[(kind, item)] = Worker(kind, item, process, exclusive)
        log.info("%s %s: worker %s started", kind, item, process.pid)

    def _reap(self) -> None:
        with self._lock:
            ended = [w for w in self.workers.values() if w.process.poll() is not None]
            for w in ended:
                del self.workers[(w.kind, w.id)]
        for w in ended:
            code = w.process.returncode
            if w.kind == "comparison":
                record = self.history.comparison(w.id)
                if record.state == "running":
                    self.history.finish_comparison(w.id, "failed", None, f"its worker died (exit status {code})")
                log.info("comparison %s: %s", w.id, self.history.comparison(w.id).state)
                continue
            record = self.history.campaign(w.id)
            key = (w.kind, w.id)
            if record.state != "running":  # finished, cancelled or failed, as the worker recorded
                log.info("campaign %s: %s%s", w.id, record.state, f" ({record.note})" if record.note else "")
                self.deaths.pop(key, None)
                continue
            self.deaths[key] = self.deaths.get(key, 0) + 1
            if self.deaths[key] > RETRIES:
                self.deaths.pop(key)
                self.history.finish_campaign(w.id, "failed", f"its worker died {RETRIES + 1} times "
                                                             f"(last exit status {code}); resume it to try again")
            else:
                log.warning("campaign %s: worker died (exit status %s); resuming it", w.id, code)
                self.history.transition(w.id, ["running"], state="queued",
                                        note=f"its worker died (exit status {code}); resumed")

    def _stop_workers(self) -> None:
        with self._lock:
            workers = list(self.workers.values())
        for w in workers:
            if w.process.poll() is None:
                w.process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_S
        for w in workers:
            try:
                w.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                w.process.kill()
                w.process.wait()
            log.info("%s %s: stopped with the service (worker exit status %s)", w.kind, w.id, w.process.returncode)
            if w.kind == "campaign":
                self.history.transition(w.id, ["running", "interrupted"], state="queued",
                                        note="the service stopped; resumed at its next start")
            else:
                self.history.transition_comparison(w.id, ["running", "queued"], state="interrupted",
                                                   note="the service stopped while it ran; launch it again")
        with self._lock:
            self.workers.clear()
