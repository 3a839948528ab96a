"""Where trials are measured. The campaign hands a batch of jobs to an executor and records what
comes back. Two engines behind one seam: the local ones (this process, or this machine's worker
processes) here, and Ray (an embedded cluster, or an existing one) in tuner/ray_executor.py."""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from runners import HostUnavailable, Measurement, Runner, Status, Workload, raised
from search_spaces import Config

log = logging.getLogger(__name__)
DRIVER_POLL_S = 0.5

Recorder = Callable[["Job", int, Measurement], None]
T = TypeVar("T")
R = TypeVar("R")


class ExecutorLost(Exception):
    """The executor lost what it measures on (a Ray cluster's head went away) through no fault of the
    configurations: like HostUnavailable, no trial is condemned. The campaign stops with its running
    trials re-run at its resume; the service queues it until its cluster is back."""


_node_name: str | None = None  # this process's name for its machine (a Ray worker's: host/node id)


def this_node() -> str:
    """The machine this process measures on, as measurements name it: the host, or what the executor set."""
    return _node_name or socket.gethostname()


def name_this_node(name: str) -> None:
    """Set how this worker process names its machine (a Ray node: several may share one host)."""
    global _node_name
    _node_name = name


def on_node(measurements: list[Measurement], node: str) -> list[Measurement]:
    """The measurements, each naming the machine that took it (``Measurement.node``)."""
    return [m if m.node is not None else dataclasses.replace(m, node=node) for m in measurements]


@dataclass(frozen=True)
class Job:
    """One trial to measure: its configuration and one seed per repeat. A re-measurement (adaptive
    repeats) carries the seeds of the repeats after the ``first_repeat`` it already has."""

    trial_id: int
    config: Config
    seeds: tuple[int, ...]
    first_repeat: int = 0


def repeat_seeds(trial_seed: int, repeats: int) -> tuple[int, ...]:
    """Independent seeds for the repeats of one trial: repeat k's seed is the same whatever ``repeats`` is
    (SeedSequence's k-th child), so a re-measurement draws what a longer fixed-repeat trial would have."""
    states = np.random.SeedSequence(trial_seed).spawn(repeats)
    return tuple(int(s.generate_state(1)[0]) for s in states)


def measure(runner: Runner, workload: Workload, job: Job, record: Recorder | None = None,
            node: str | None = None) -> list[Measurement]:
    """Run the job's repeats, stopping at the first that does not succeed; each names ``node`` (default:
    this machine) as the one that measured it."""
    node = node or this_node()
    out: list[Measurement] = []
    for repeat, seed in enumerate(job.seeds, start=job.first_repeat):
        try:  # RunnerBase.run raises only HostUnavailable; a runner that only follows the protocol may raise more
            m = runner.run(job.config, workload, seed=seed)
        except HostUnavailable:
            raise
        except Exception as e:
            m = raised(runner.name, e)
        m = on_node([m], node)[0]
        if record is not None:
            record(job, repeat, m)
        out.append(m)
        if m.status is not Status.SUCCEEDED:
            break
    return out


class Stream(Protocol):
    """Jobs in flight on an executor: the campaign loop submits one as another finishes."""

    pending: int  # submitted, not yet handed back by next()

    def submit(self, job: Job) -> None: ...

    def next(self) -> tuple[Job, list[Measurement]]:
        """The next job to finish, with its measurements (recorded before it is handed back). A job that
        raises is no longer pending: the loop drains on ``pending`` after a HostUnavailable."""
        ...

    def drop_queued(self) -> None:
        """Forget what can still be withdrawn of the jobs submitted (the host cannot measure now); the
        others are measured and handed back."""
        ...


class Executor(Protocol):
    kind: str  # local or ray
    workers: int  # jobs it runs at once
    asynchronous: bool  # measures jobs side by side: the loop keeps them in flight, not in batches

    def start(self) -> None:
        """Get ready: a cluster executor joins its cluster, so its errors come before anything is recorded."""
        ...

    def fit(self, runner: Runner) -> str | None:
        """Check the runner's measurements can run here; cap the jobs at once to what there is (a note)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What ran the campaign, for its summary."""
        ...

    def stream(self, runner: Runner, workload: Workload, record: Recorder | None = None) -> Stream:
        """Where the loop submits jobs and takes them back as they finish."""
        ...

    def run(
        self, runner: Runner, workload: Workload, jobs: Sequence[Job], record: Recorder | None = None
    ) -> Iterator[tuple[Job, list[Measurement]]]:
        """Measure every job; yield each with its measurements as it completes."""
        ...

    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        """Apply a picklable top-level ``fn`` to every item; yield results as they complete."""
        ...


class LocalExecutor:
    """Runs everything in this process, in order; each measurement is recorded as soon as it exists."""

    kind = "local"
    workers = 1
    asynchronous = False  # one job at a time, here: the loop asks for whole batches

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

    def stream(self, runner: Runner, workload: Workload, record: Recorder | None = None) -> Stream:
        return _LocalStream(runner, workload, record)

    def run(
        self, runner: Runner, workload: Workload, jobs: Sequence[Job], record: Recorder | None = None
    ) -> Iterator[tuple[Job, list[Measurement]]]:
        return run_jobs(self.stream(runner, workload, record), jobs, self.workers)

    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        return map(fn, items)


_one_thread = False


def one_thread_each() -> None:
    """Workers share the machine's cores: BLAS and torch each get one thread per worker process (set once per
    process, and inherited by what it starts)."""
    global _one_thread
    if _one_thread:
        return
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    _one_thread = True


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

    def stream(self, runner: Runner, workload: Workload, record: Recorder | None = None) -> Stream:
        """Jobs measured in the workers; measurements are recorded here, by the only writer."""
        return _PoolStream(self._start(), runner.name, runner.settings(), workload, record)


def run_jobs(stream: Stream, jobs: Sequence[Job], in_flight: int) -> Iterator[tuple[Job, list[Measurement]]]:
    """Every job through a stream, ``in_flight`` at a time, yielded as each finishes."""
    queue = iter(jobs)
    for job in queue:
        stream.submit(job)
        if stream.pending >= in_flight:
            break
    while stream.pending:
        yield stream.next()
        nxt = next(queue, None)
        if nxt is not None:
            stream.submit(nxt)


def record_all(record: Recorder | None, job: Job, measurements: list[Measurement]) -> None:
    if record is not None:
        for repeat, m in enumerate(measurements, start=job.first_repeat):
            record(job, repeat, m)


class _LocalStream:
    """Measured here when taken back: one at a time, each measurement recorded as soon as it exists."""

    def __init__(self, runner: Runner, workload: Workload, record: Recorder | None):
        self.runner, self.workload, self.record = runner, workload, record
        self._jobs: deque[Job] = deque()

    @property
    def pending(self) -> int:
        return len(self._jobs)

    def submit(self, job: Job) -> None:
        self._jobs.append(job)

    def next(self) -> tuple[Job, list[Measurement]]:
        job = self._jobs.popleft()
        return job, measure(self.runner, self.workload, job, self.record)

    def drop_queued(self) -> None:
        self._jobs.clear()  # measured one at a time when taken back: none has started


class _PoolStream:
    def __init__(self, pool: ProcessPoolExecutor, name: str, settings: dict, workload: Workload,
                 record: Recorder | None):
        self.pool, self.name, self.settings, self.workload, self.record = pool, name, settings, workload, record
        self._futures: set[Future[Any]] = set()

    @property
    def pending(self) -> int:
        return len(self._futures)

    def submit(self, job: Job) -> None:
        self._futures.add(self.pool.submit(_measure_in_worker, (self.name, self.settings, self.workload, job)))

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


_WORKER_RUNNERS: dict[str, Runner] = {}


def worker_runner(name: str, settings: dict) -> tuple[str, Runner]:
    """The runner a worker process (the pool's or Ray's) builds once from the declared settings and
    keeps, with its key. Its table's warnings are not repeated: the driver built it first and showed them."""
    from runners import make_runner
    from runners.tables import TableWarning

    key = f"{name}:{json.dumps(settings, sort_keys=True, default=str)}"
    if key not in _WORKER_RUNNERS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TableWarning)
            _WORKER_RUNNERS[key] = make_runner(name, settings)
    return key, _WORKER_RUNNERS[key]


def worker_measure(name: str, settings: dict, workload: Workload, job: Job,
                   node: str | None = None) -> list[Measurement]:
    """A job in a worker process, with its worker's runner, except that one that holds a disk is
    closed after each job (idle workers live on, and would keep a loop device attached)."""
    key, runner = worker_runner(name, settings)
    try:
        return measure(runner, workload, job, node=node)
    finally:
        if runner.resources():
            _WORKER_RUNNERS.pop(key).close()


def _measure_in_worker(task: tuple[str, dict, Workload, Job]) -> tuple[Job, list[Measurement]]:
    name, settings, workload, job = task
    return job, worker_measure(name, settings, workload, job)


EXECUTORS = ("local", "ray")


def make_executor(kind: str | None, workers: int | None, *, address: str | None = None,
                  max_retries: int = 2) -> Executor:
    """The executor a command asked for. ``kind``: 'local' (this process for one worker, else this
    machine's worker processes) or 'ray' (the cluster at ``address``, else an embedded one); None
    picks Ray when an address is given. ``workers``: tasks in flight (None: one per core, or the
    cluster's CPUs)."""
    kind = kind or ("ray" if address else "local")
    if kind not in EXECUTORS:
        raise ValueError(f"unknown executor {kind!r}: {' or '.join(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise ValueError(f"--parallel must be at least 1, not {workers}")
    if kind == "ray":
        from tuner.ray_executor import RayExecutor

        return RayExecutor(workers, address=address, max_retries=max_retries)
    if workers == 1:
        return LocalExecutor()
    return ProcessExecutor(workers)
