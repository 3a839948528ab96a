"""Where trials are measured. The campaign hands a batch of jobs to an executor and records what
comes back; the local executor runs them here, one after another. A Ray executor plugs in at the
same seam and runs a batch on the cluster."""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from runners import Measurement, Runner, Status, Workload
from search_spaces import Config

log = logging.getLogger(__name__)

Recorder = Callable[["Job", int, Measurement], None]
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Job:
    """One trial to measure: its configuration and one seed per repeat."""

    trial_id: int
    config: Config
    seeds: tuple[int, ...]


def repeat_seeds(trial_seed: int, repeats: int) -> tuple[int, ...]:
    """Independent seeds for the repeats of one trial."""
    states = np.random.SeedSequence(trial_seed).spawn(repeats)
    return tuple(int(s.generate_state(1)[0]) for s in states)


def measure(runner: Runner, workload: Workload, job: Job, record: Recorder | None = None) -> list[Measurement]:
    """Run the job's repeats, stopping at the first that does not succeed."""
    out: list[Measurement] = []
    for repeat, seed in enumerate(job.seeds):
        try:
            m = runner.run(job.config, workload, seed=seed)
        except Exception as e:  # a runner that raises broke its contract: keep the trial as data, and say so
            log.exception("runner %s raised on trial %s", runner.name, job.trial_id)
            m = Measurement.failed(Status.FAILED, f"runner raised {type(e).__name__}: {e}")
        if record is not None:
            record(job, repeat, m)
        out.append(m)
        if m.status is not Status.SUCCEEDED:
            break
    return out


class Executor(Protocol):
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

    def run(
        self, runner: Runner, workload: Workload, jobs: Sequence[Job], record: Recorder | None = None
    ) -> Iterator[tuple[Job, list[Measurement]]]:
        for job in jobs:
            yield job, measure(runner, workload, job, record)

    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        return map(fn, items)


def _one_thread_per_worker() -> None:
    """Workers share the machine's cores: BLAS and torch each get one thread per worker."""
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


class ProcessExecutor(LocalExecutor):
    """Runs independent tasks (such as the seeds of a comparison) in worker processes."""

    def __init__(self, workers: int | None = None):
        self.workers = workers or os.cpu_count() or 1

    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        # forkserver: workers start clean, never as forks of a process that may hold torch threads
        context = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(self.workers, mp_context=context, initializer=_one_thread_per_worker) as pool:
            pending: set[Future[Any]] = set()
            queue = iter(items)
            for item in queue:  # keep two tasks per worker in flight: results stream back in order of completion
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
