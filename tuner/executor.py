"""Where trials are measured. The campaign hands a batch of jobs to an executor and records what
comes back; the local executor runs them here, one after another. A Ray executor plugs in at the
same seam and runs a batch on the cluster."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from runners import Measurement, Runner, Status, Workload
from search_spaces import Config

log = logging.getLogger(__name__)

Recorder = Callable[["Job", int, Measurement], None]


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


class LocalExecutor:
    """Runs the jobs in this process, in order; each measurement is recorded as soon as it exists."""

    def run(
        self, runner: Runner, workload: Workload, jobs: Sequence[Job], record: Recorder | None = None
    ) -> Iterator[tuple[Job, list[Measurement]]]:
        for job in jobs:
            yield job, measure(runner, workload, job, record)
