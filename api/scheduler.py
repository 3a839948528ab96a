"""The service's campaign workers: a queue in the history, and at most ``max_campaigns`` worker
processes draining it.

Campaigns and comparisons the API launches are recorded ``queued`` (origin ``api``). A thread of
the service claims the oldest queued one whenever a slot is free (an atomic conditional UPDATE that
records the service as its driver), starts a worker process for it (``api/worker.py``), and reaps
the workers that end. Nothing runs in a request handler, and each campaign's worker is its only
writer. The queue lives in the history, so it survives the service:

- at start, and every few seconds after, the service's campaigns and comparisons left RUNNING with no
  live driver (the service was killed; a claim whose worker never started) go back to the queue; their
  worker resumes them exactly as ``storetune tune --resume`` does;
- at a clean stop (Ctrl-C, SIGTERM), the workers are interrupted (they record their last trial),
  and their campaigns are queued again for the next start;
- a worker that dies on its own (killed, out of memory) has its campaign re-queued at once; one whose
  worker dies ``DEATHS`` times in a row, with no trial finished in between, is ``failed`` with the reason;
- a campaign measured on the Ray cluster waits in the queue while the cluster is unreachable, and one
  whose cluster went away mid-campaign goes back to the queue (its running trials are re-run): neither
  counts as a death.

Campaigns of an exclusive runner (the device runner: it owns a disk, and Filebench switches ASLR
machine-wide) measured on this machine run one at a time, whatever ``max_campaigns`` says; on the Ray
cluster, their measurements hold a loop slot or a disk, which the cluster hands out one at a time.
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

from api.cluster import ClusterMonitor
from runners import runner_class
from tuner import History
from tuner.campaign import driver_alive

log = logging.getLogger(__name__)

DEATHS = 3  # a campaign whose worker died this many times in a row, finishing nothing in between, is failed
POLL_S = 0.2
SWEEP_S = 5.0  # how often running campaigns without a live driver are looked for
STOP_GRACE_S = 20.0  # how long an interrupted worker may take to record its last trial
EXIT_CLUSTER_LOST = 69  # EX_UNAVAILABLE: the worker's Ray cluster went away (api/worker.py)
EXIT_DATABASE_LOST = 74  # EX_IOERR: the history did not answer within STORETUNE_DB_RETRY_S (api/worker.py)


@dataclass
class Worker:
    kind: str  # campaign | comparison
    id: int
    process: subprocess.Popen
    exclusive: bool = False  # holds this machine's disk
    on_ray: bool = False


RELEASE_WAIT_S = 10.0  # how long resume or delete waits for a worker that is ending


class Scheduler:
    def __init__(self, history: History, database_url: str, max_running: int, comparison_workers: int = 1,
                 cluster: ClusterMonitor | None = None, worker_env: dict[str, str] | None = None):
        self.history, self.url = history, database_url
        self.worker_env = dict(worker_env or {})  # settings the workers read from their environment
        self.max_running, self.comparison_workers = max_running, comparison_workers
        self.cluster = cluster
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.workers: dict[tuple[str, int], Worker] = {}
        self.deaths: dict[tuple[str, int], tuple[int, int]] = {}  # (deaths in a row, evaluations at the last)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._swept = 0.0

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

    def holding(self) -> list[tuple[str, int]]:
        """The campaigns and comparisons this service's workers run now (or ended, and are not yet settled)."""
        with self._lock:
            return list(self.workers)

    def holds(self, kind: str, item: int) -> bool:
        with self._lock:
            return (kind, item) in self.workers

    def released(self, kind: str, item: int, timeout: float = RELEASE_WAIT_S) -> bool:
        """True once no worker holds it. A worker that was cancelled records its end a moment before its
        process exits and is settled: wait that moment (up to `timeout`) rather than refuse the caller."""
        deadline = time.monotonic() + timeout
        while self.holds(kind, item):
            if time.monotonic() >= deadline:
                return False
            self.wake()
            time.sleep(0.05)
        return True

    # --- the queue ------------------------------------------------------------------------------
    def adopt(self) -> None:
        """The service's campaigns and comparisons left running by a driver that is gone go back to the
        queue: at start (the service was killed), and every SWEEP_S after (a claim whose worker never
        started, or was forgotten while the history did not answer)."""
        held = set(self.holding())
        for c in self.history.campaigns(origin="api", states=("running",)):
            if ("campaign", c.id) not in held and self._orphaned(c.driver_host, c.driver_pid):
                log.info("campaign %s: left running by a driver that is gone; queued to resume", c.id)
                self.history.transition(c.id, ["running"], state="queued",
                                        note="its driver stopped while it ran; resumed")
        for k in self.history.comparisons(origin="api", states=("running",)):
            driver = k.settings.get("driver") or {}
            if ("comparison", k.id) not in held and self._orphaned(driver.get("host"), driver.get("pid")):
                log.info("comparison %s: left running by a driver that is gone; queued to resume", k.id)
                self.history.transition_comparison(k.id, ["running"], state="queued",
                                                   note="its driver stopped while it ran; resumed")

    def _orphaned(self, host: str | None, pid: int | None) -> bool:
        """A driver recorded as this service with no worker of it (a claim left behind; at start, a predecessor
        that had the same pid, as a container's service is pid 1 every time), or one that is dead."""
        return (host == self.host and pid == self.pid) or not driver_alive(host, pid)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._reap()
                if time.monotonic() - self._swept > SWEEP_S:
                    self.adopt()
                    self._swept = time.monotonic()
                self._dispatch()
            except Exception:  # the history may not answer for a while: log, try again
                log.exception("scheduler")
                self._stop.wait(1.0)
            self._wake.wait(POLL_S)
            self._wake.clear()
        self._stop_workers()

    def _dispatch(self) -> None:
        while self.running() < self.max_running and not self._stop.is_set():
            if not (self._next_campaign() or self._next_comparison()):
                return

    def _cluster_ready(self) -> bool:
        return self.cluster is not None and self.cluster.state.ready

    def _waits_for_cluster(self, on_ray: bool) -> bool:
        """A Ray campaign waits in the queue while the cluster is not there (or this service has none)."""
        return on_ray and not self._cluster_ready()

    def _next_campaign(self) -> bool:
        with self._lock:
            device_busy = any(w.exclusive for w in self.workers.values())
        for c in self.history.campaigns(origin="api", states=("queued",)):  # Ray's wait: local ones go past
            on_ray = (c.executor or {}).get("kind") == "ray"
            if self._waits_for_cluster(on_ray):
                self._say_waiting(c)
                continue
            exclusive = not on_ray and bool(getattr(runner_class(c.runner), "exclusive", False))
            if exclusive and device_busy:
                continue  # waits for the device campaign that runs
            # claimed atomically, with this service as its driver until the worker takes over:
            # two services on one history never run a campaign twice
            if self.history.transition(c.id, ["queued"], state="running", driver_host=self.host,
                                       driver_pid=self.pid, note=None):
                self._spawn("campaign", c.id, exclusive, on_ray)
                return True
        return False

    def _say_waiting(self, c) -> None:  # type: ignore[no-untyped-def]
        """Why a Ray campaign waits, in its note (once per reason)."""
        if self.cluster is None:
            note = "waits for a Ray cluster: this service has none (its operator starts it with RAY_ADDRESS)"
        else:
            state = self.cluster.state
            note = f"waits for the Ray cluster at {state.address}" + (f": {state.reason}" if state.reason else "")
        if "Ray cluster" not in (c.note or ""):  # a note that says the cluster was lost says enough
            self.history.transition(c.id, ["queued"], note=note)

    def _next_comparison(self) -> bool:
        for k in self.history.comparisons(origin="api", states=("queued",)):
            on_ray = (k.settings.get("executor") or "local") == "ray"
            if self._waits_for_cluster(on_ray):
                continue
            settings = {**k.settings, "driver": {"host": self.host, "pid": self.pid}}
            if self.history.transition_comparison(k.id, ["queued"], state="running", settings=settings, note=None):
                self._spawn("comparison", k.id, on_ray=on_ray)
                return True
        return False

    def _spawn(self, kind: str, item: int, exclusive: bool = False, on_ray: bool = False) -> None:
        argv = [sys.executable, "-m", "api.worker", kind, str(item), "--handed-by", str(self.pid),
                "--comparison-workers", str(self.comparison_workers)]
        # the history's URL goes by the environment: a password in argv is readable by every local user
        env = {**os.environ, **self.worker_env, "PYTHONUNBUFFERED": "1", "STORETUNE_DATABASE_URL": self.url}
        env.pop("RAY_ADDRESS", None)
        if on_ray and self.cluster is not None:
            env["RAY_ADDRESS"] = self.cluster.address
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
            self.workers[(kind, item)] = Worker(kind, item, process, exclusive, on_ray)
        log.info("%s %s: worker %s started%s", kind, item, process.pid, " (on the Ray cluster)" if on_ray else "")

    # --- workers that ended ---------------------------------------------------------------------
    def _reap(self) -> None:
        """Settle every worker that ended. One is forgotten only once its campaign is settled in the
        history: while the history does not answer, it is tried again at the next round."""
        with self._lock:
            ended = [w for w in self.workers.values() if w.process.poll() is not None]
        for w in ended:
            try:
                if w.kind == "comparison":
                    self._settle_comparison(w)
                else:
                    self._settle_campaign(w)
            except LookupError:  # deleted meanwhile: nothing left to settle
                pass
            except Exception:  # the history does not answer: this one is settled at a later round
                log.exception("%s %s: could not settle its worker; trying again", w.kind, w.id)
                continue
            with self._lock:
                self.workers.pop((w.kind, w.id), None)

    def _settle_comparison(self, w: Worker) -> None:
        record = self.history.comparison(w.id)
        if record.state in ("interrupted", "running"):
            progress = len(self.history.comparison_campaigns(w.id))
            self._requeue(w, record.state, record.note, progress, self.history.transition_comparison)
        else:
            self.deaths.pop((w.kind, w.id), None)
            log.info("comparison %s: %s%s", w.id, record.state, f" ({record.note})" if record.note else "")

    def _settle_campaign(self, w: Worker) -> None:
        record = self.history.campaign(w.id)
        if record.state in ("interrupted", "running"):
            progress = self.history.evaluations(w.id, record.repeats)
            self._requeue(w, record.state, record.note, progress, self.history.transition)
        else:  # finished, cancelled or failed, as the worker recorded
            self.deaths.pop((w.kind, w.id), None)
            log.info("campaign %s: %s%s", w.id, record.state, f" ({record.note})" if record.note else "")

    def _requeue(self, w: Worker, state: str, note: str | None, progress: int, transition) -> None:  # type: ignore[no-untyped-def]
        """A worker that ended with its campaign (or comparison) unfinished: queued again, or failed when its
        worker died DEATHS times in a row. ``progress`` (evaluations, seeds) tells a row from a fresh start."""
        code, key = w.process.returncode, (w.kind, w.id)
        if code == EXIT_CLUSTER_LOST or self._lost_cluster(w):  # the cluster's doing, not the worker's
            log.warning("%s %s: its Ray cluster was lost; queued until it is back", w.kind, w.id)
            address = self.cluster.address if self.cluster is not None else "its Ray cluster"
            transition(w.id, [state], state="queued", note=f"the Ray cluster at {address} was lost mid-run; it "
                                                           "resumes here when the cluster answers again")
            return
        if state == "interrupted" and code in (130, -signal.SIGINT):  # a Ctrl-C reached it first: the service stops
            transition(w.id, [state], state="queued", note="the service stopped; resumed at its next start")
            return
        if code == EXIT_DATABASE_LOST:
            log.warning("%s %s: its worker lost the history's database for too long; queued again", w.kind, w.id)
        deaths, at = self.deaths.get(key, (0, -1))
        deaths = deaths + 1 if progress == at else 1  # in a row: progress in between starts the count again
        if deaths >= DEATHS:
            self.deaths.pop(key, None)
            log.error("%s %s: its worker died %d times in a row; failed", w.kind, w.id, deaths)
            transition(w.id, [state], state="failed", note=f"its worker died {deaths} times in a row with nothing "
                                                           f"finished in between (last exit status {code}); resume "
                                                           "it to try again")
            return
        self.deaths[key] = (deaths, progress)
        log.warning("%s %s: worker died (exit status %s); resuming it", w.kind, w.id, code)
        transition(w.id, [state], state="queued", note=f"its worker died (exit status {code}); resumed")

    def _lost_cluster(self, w: Worker) -> bool:
        return w.on_ray and not self._cluster_ready()

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
            try:
                if w.kind == "campaign":
                    self.history.transition(w.id, ["running", "interrupted"], state="queued",
                                            note="the service stopped; resumed at its next start")
                else:
                    self.history.transition_comparison(w.id, ["running", "interrupted"], state="queued",
                                                       note="the service stopped; resumed at its next start")
            except Exception:  # the history does not answer: the next start finds it running and adopts it
                log.exception("%s %s: could not queue it again", w.kind, w.id)
        with self._lock:
            self.workers.clear()
