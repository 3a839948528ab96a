"""The local executors: this process (``LocalExecutor``), and this machine's worker processes
(``ProcessExecutor``, a process pool that lives as long as the executor)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing.managers import BaseManager
from typing import Any, TypeVar

from storetune.runners import Measurement, Runner, Workload
from storetune.tuner.execution.jobs import (
    AnyBoard, Board, Job, RaceBoard, Recorder, Stream, measure, one_thread_each, record_all, run_jobs, worker_measure,
)

DRIVER_POLL_S = 0.5
T = TypeVar("T")
R = TypeVar("R")


class LocalExecutor:
    """Runs everything in this process, in order; each measurement is recorded as soon as it exists."""

    kind = "local"
    workers = 1
    asynchronous = False  # one job at a time, here: the loop asks for whole batches
    remote = False

    def describe(self) -> dict[str, Any]:
        """What ran the campaign, for its summary."""
        return {"kind": self.kind, "nodes": 1, "workers": self.workers}

    def start(self) -> None:
        """Get ready (a cluster executor joins its cluster here); nothing to do locally."""

    def fit(self, runner: Runner) -> str | None:
        """Check this executor can run the runner's measurements, and cap what it runs at once to what
        it has; returns a note when it caps. Locally nothing to check (an exclusive runner is refused
        by the campaign)."""
        return None

    def stream(self, runner: Runner, workload: Workload, record: Recorder | None = None,
               board: Board | RaceBoard | None = None) -> Stream:
        return _LocalStream(runner, workload, record, board)

    def board(self, halving: AnyBoard) -> AnyBoard:
        """Runs are measured here: they are judged on the campaign's own record."""
        return halving

    def run(
        self, runner: Runner, workload: Workload, jobs: Sequence[Job], record: Recorder | None = None
    ) -> Iterator[tuple[Job, list[Measurement]]]:
        return run_jobs(self.stream(runner, workload, record), jobs, self.workers)

    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        return map(fn, items)

    def close(self) -> None:
        """Nothing held."""


def _start_worker(driver: int) -> None:
    """A pool worker: one thread each (``one_thread_each``), and it ends when its driver dies, however it dies
    (a SIGKILLed `tune` or service worker)."""
    one_thread_each()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle; it shuts the pool down
    threading.Thread(target=_exit_with_driver, args=(driver,), name="storetune-driver-watch", daemon=True).start()


def _exit_with_driver(driver: int) -> None:
    """Polled by hand: pool workers are children of the forkserver, not of the driver, so the
    kernel's parent-death signal cannot tie them to it. A measurement the driver will never record
    would only disturb the next one."""
    while True:
        time.sleep(DRIVER_POLL_S)
        try:
            os.kill(driver, 0)
        except ProcessLookupError:
            os._exit(1)
        except PermissionError:  # alive, under another user (a reused pid at worst)
            pass


class ProcessExecutor(LocalExecutor):
    """Runs independent tasks (the seeds of a comparison, the trials of a batch) in worker processes.

    The pool starts on first use and lives until ``close()``, so a campaign pays the workers' start
    (importing torch, loading a trace) once, not per batch. Each worker rebuilds a runner from its
    name and settings once and keeps it.
    """

    def __init__(self, workers: int | None = None):
        self.workers = workers or os.cpu_count() or 1
        self._pool: ProcessPoolExecutor | None = None
        self._manager: _BoardManager | None = None

    def _start(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # forkserver: workers start clean, never as forks of a process that may hold torch threads
            context = multiprocessing.get_context("forkserver")
            self._pool = ProcessPoolExecutor(self.workers, mp_context=context, initializer=_start_worker,
                                             initargs=(os.getpid(),))
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
        if self._manager is not None:
            self._manager.shutdown()
            self._manager = None

    def board(self, halving: Any) -> Any:
        """The campaign's record in a manager process, which the workers reach through a proxy: each judgement is
        one round trip there, once a rung, a few a second at most."""
        if self._manager is None:
            self._manager = _BoardManager(ctx=multiprocessing.get_context("forkserver"))
            self._manager.start(initializer=signal.signal, initargs=(signal.SIGINT, signal.SIG_IGN))  # the driver's
        return self._manager.Board(halving)  # type: ignore[attr-defined]

    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        pool = self._start()
        pending: set[Future[Any]] = set()
        queue = iter(items)
        for item in queue:  # keep two tasks per worker in flight: results stream back as they complete
            pending.add(pool.submit(fn, item))
            if len(pending) >= 2 * self.workers:
                break
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield future.result()
                nxt = next(queue, None)
                if nxt is not None:
                    pending.add(pool.submit(fn, nxt))

    asynchronous = True

    def stream(self, runner: Runner, workload: Workload, record: Recorder | None = None,
               board: Board | RaceBoard | None = None) -> Stream:
        """Jobs measured in the workers; measurements are recorded here, by the only writer."""
        return _PoolStream(self._start(), runner.name, runner.settings(), workload, record, board)


class _BoardManager(BaseManager):
    """Holds a campaign's rung record for the pool's workers (multiprocessing's own proxies: the workers judge their
    runs against each other's)."""


class _Held:
    """The record, unpickled in the manager process, is the one its proxies call, one call at a time (the manager
    serves each worker's connection in a thread of its own)."""

    def __init__(self, board: Any):  # a Board or a RaceBoard: the proxy exposes both kinds' methods
        self.board, self.lock = board, threading.Lock()

    def judge(self, rung: int, value: float) -> bool:
        with self.lock:
            return self.board.judge(rung, value)

    def learn(self, judged: list[float], value: float) -> None:
        with self.lock:
            self.board.learn(judged, value)

    def counts(self) -> list[int]:
        with self.lock:
            return self.board.counts()

    def race(self, runs: list[float]) -> str | None:
        with self.lock:
            return self.board.race(runs)

    def offer(self, runs: list[float]) -> None:
        with self.lock:
            self.board.offer(runs)


_BoardManager.register("Board", _Held, exposed=("judge", "learn", "counts", "race", "offer"))


class _LocalStream:
    """Measured here when taken back: one at a time, each measurement recorded as soon as it exists."""

    def __init__(self, runner: Runner, workload: Workload, record: Recorder | None,
                 board: Board | RaceBoard | None = None):
        self.runner, self.workload, self.record, self.board = runner, workload, record, board
        self._jobs: deque[Job] = deque()

    @property
    def pending(self) -> int:
        return len(self._jobs)

    def submit(self, job: Job) -> None:
        self._jobs.append(job)

    def next(self) -> tuple[Job, list[Measurement]]:
        job = self._jobs.popleft()
        return job, measure(self.runner, self.workload, job, self.record, board=self.board)

    def drop_queued(self) -> None:
        self._jobs.clear()  # measured one at a time when taken back: none has started


class _PoolStream:
    def __init__(self, pool: ProcessPoolExecutor, name: str, settings: dict, workload: Workload,
                 record: Recorder | None, board: Board | RaceBoard | None = None):
        self.pool, self.name, self.settings, self.workload, self.record = pool, name, settings, workload, record
        self.board = board
        self._futures: set[Future[Any]] = set()

    @property
    def pending(self) -> int:
        return len(self._futures)

    def submit(self, job: Job) -> None:
        watched = job.rungs is not None or job.race
        self._futures.add(self.pool.submit(_measure_in_worker, (self.name, self.settings, self.workload, job,
                                                                self.board if watched else None)))

    def next(self) -> tuple[Job, list[Measurement]]:
        done, _ = wait(self._futures, return_when=FIRST_COMPLETED)
        future = next(iter(done))
        self._futures.discard(future)
        job, measurements = future.result()
        record_all(self.record, job, measurements)
        return job, measurements

    def drop_queued(self) -> None:
        # only those the pool has not yet moved to its call queue (workers + 1 of them) can be cancelled
        self._futures = {f for f in self._futures if not f.cancel()}


def _measure_in_worker(task: tuple[str, dict, Workload, Job, Any]) -> tuple[Job, list[Measurement]]:
    name, settings, workload, job, board = task
    return job, worker_measure(name, settings, workload, job, board=board)
