"""What every executor shares: a job (one trial's repeats), measuring it with a runner in any process, the
Stream and Executor protocols, and the errors that stop a campaign through no configuration's fault. The
engines are ``local`` (this process, this machine's worker processes) and ``ray`` (a Ray cluster);
``tuner.execution.make_executor`` picks one."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from storetune.runners import HostUnavailable, Measurement, Runner, Status, WatchedRunner, Workload, raised
from storetune.search_spaces import Config

log = logging.getLogger(__name__)

Recorder = Callable[["Job", int, Measurement], None]
T = TypeVar("T")
R = TypeVar("R")


@runtime_checkable
class Board(Protocol):
    """Where the runs of one campaign are judged at their rungs (multi-fidelity search): the driver's record itself
    (tuner/objectives/fidelity.py's SuccessiveHalving), or a handle on it from another process (``Executor.board``),
    so that every run is judged against every other wherever it is measured."""

    def judge(self, rung: int, value: float) -> bool:
        """Record a run's ``value`` at ``rung`` (an index into the run lengths) and say whether it goes on."""
        ...

    def learn(self, judged: list[float], value: float) -> None:
        """A run measured whole, with its value at each rung it was judged at: which rungs may stop runs."""
        ...

    def counts(self) -> list[int]:
        """How many runs were judged at each rung."""
        ...


@runtime_checkable
class RaceBoard(Protocol):
    """Where a campaign's configurations race the incumbent on repeats (tuner/objectives/intensify.py's
    RepeatRace), reachable from the workers as a ``Board`` is."""

    def race(self, runs: list[float]) -> str | None:
        """None while a configuration's first ``runs`` may still beat the incumbent; else why they stop."""
        ...

    def offer(self, runs: list[float]) -> None:
        """A configuration measured with every repeat: the incumbent if it is better."""
        ...

    def counts(self) -> list[int]:
        """The incumbent's runs (for the campaign's summary)."""
        ...


AnyBoard = TypeVar("AnyBoard", Board, RaceBoard)  # an executor hands back a handle of the kind it was given


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
    repeats) carries the seeds of the repeats after the ``first_repeat`` it already has. With ``rungs``
    (multi-fidelity search), each run is watched: judged by its ``metric`` at each rung on the campaign's board,
    and stopped where the board says."""

    trial_id: int
    config: Config
    seeds: tuple[int, ...]
    first_repeat: int = 0
    rungs: tuple[float, ...] | None = None  # run lengths in seconds, the last the whole run
    metric: str | None = None
    race: bool = False  # its repeats race the incumbent's on the board, and stop when they lose


def repeat_seeds(trial_seed: int, repeats: int) -> tuple[int, ...]:
    """Independent seeds for the repeats of one trial: repeat k's seed is the same whatever ``repeats`` is
    (SeedSequence's k-th child), so a re-measurement draws what a longer fixed-repeat trial would have."""
    states = np.random.SeedSequence(trial_seed).spawn(repeats)
    return tuple(int(s.generate_state(1)[0]) for s in states)


def measure(runner: Runner, workload: Workload, job: Job, record: Recorder | None = None,
            node: str | None = None, board: Board | RaceBoard | None = None) -> list[Measurement]:
    """Run the job's repeats, stopping at the first that does not succeed (or is stopped at a rung); each names
    ``node`` (default: this machine) as the one that measured it. A job with rungs is judged on ``board``."""
    node = node or this_node()
    out: list[Measurement] = []
    for repeat, seed in enumerate(job.seeds, start=job.first_repeat):
        try:  # RunnerBase.run raises only HostUnavailable; a runner that only follows the protocol may raise more
            m = _run(runner, workload, job, seed, board)
        except HostUnavailable:
            raise
        except Exception as e:
            m = raised(runner.name, e)
        m = on_node([m], node)[0]
        lost = _lost_race(job, out + [m], board) if repeat - job.first_repeat < len(job.seeds) - 1 else None
        if lost is not None:  # the next runs are not taken: the configuration lost its race
            m = dataclasses.replace(m, env={**m.env, "raced_out": lost})
        if record is not None:
            record(job, repeat, m)
        out.append(m)
        if m.status is not Status.SUCCEEDED or lost is not None:
            break
    return out


def board_lost(error: Exception) -> HostUnavailable:
    """A board whose process is gone (a manager, a Ray actor) says nothing of any configuration: the campaign stops
    as for a busy host, its running trials re-run at its resume."""
    if isinstance(error, HostUnavailable):
        return error
    return HostUnavailable(f"the campaign's board (its rung record, its race) could not be reached "
                           f"({type(error).__name__}: {error})")


def _lost_race(job: Job, runs: list[Measurement], board: Any) -> str | None:
    if not job.race or board is None or job.metric is None or runs[-1].status is not Status.SUCCEEDED:
        return None
    values = [float(m.metrics[job.metric]) for m in runs if job.metric in m.metrics]
    if len(values) < len(runs):
        return None
    try:
        return board.race(values)
    except Exception as e:  # the board's process is gone: no fault of the configuration's
        raise board_lost(e) from e


def _run(runner: Runner, workload: Workload, job: Job, seed: int, board: Board | None) -> Measurement:
    if job.rungs is None:
        return runner.run(job.config, workload, seed=seed)
    if board is None or job.metric is None or not isinstance(runner, WatchedRunner):
        raise ValueError("a job with rungs needs a watched runner, a metric and a board to judge it on")
    metric, judged = job.metric, []

    def go_on(rung: int, metrics: Mapping[str, float]) -> bool:
        if metric not in metrics:  # a run that does not report the metric cannot be ranked: it goes on whole
            return True
        judged.append(float(metrics[metric]))
        try:
            return board.judge(rung, judged[-1])
        except Exception as e:  # the board's process is gone: no fault of the configuration's
            raise board_lost(e) from e

    m = runner.run_watched(job.config, workload, seed=seed, rungs=job.rungs, go_on=go_on)
    if judged:  # what it was judged on at each rung: a resumed campaign's record is rebuilt from them
        m = dataclasses.replace(m, env={**m.env, "judged": judged})
    if m.status is not Status.SUCCEEDED or "stopped_at_rung" not in m.env:
        return m
    rung = int(m.env["stopped_at_rung"])
    return dataclasses.replace(m, status=Status.STOPPED, reason=(
        f"stopped after {job.rungs[rung]:g} s of {job.rungs[-1]:g} (rung {rung + 1} of {len(job.rungs)}): the runs "
        "judged there did better"))


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
    remote: bool  # measures elsewhere, placing each measurement by its resources: the driver sets no device up

    def start(self) -> None:
        """Get ready: a cluster executor joins its cluster, so its errors come before anything is recorded."""
        ...

    def fit(self, runner: Runner) -> str | None:
        """Check the runner's measurements can run here; cap the jobs at once to what there is (a note)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What ran the campaign, for its summary."""
        ...

    def stream(self, runner: Runner, workload: Workload, record: Recorder | None = None,
               board: Board | RaceBoard | None = None) -> Stream:
        """Where the loop submits jobs and takes them back as they finish; jobs with rungs or a race are judged on
        ``board`` (one of this executor's ``board``)."""
        ...

    def board(self, halving: AnyBoard) -> AnyBoard:
        """The campaign's record (its ``SuccessiveHalving``, or its ``RepeatRace``) where this executor's workers can
        reach it: itself here, a proxy or an actor elsewhere, with the same methods. Released by ``close``."""
        ...

    def run(
        self, runner: Runner, workload: Workload, jobs: Sequence[Job], record: Recorder | None = None
    ) -> Iterator[tuple[Job, list[Measurement]]]:
        """Measure every job; yield each with its measurements as it completes."""
        ...

    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        """Apply a picklable top-level ``fn`` to every item; yield results as they complete."""
        ...

    def close(self) -> None:
        """Release what it holds (its worker processes, its cluster connection); it may start again."""
        ...


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


_WORKER_RUNNERS: dict[str, Runner] = {}


def worker_runner(name: str, settings: dict) -> tuple[str, Runner]:
    """The runner a worker process (the pool's or Ray's) builds once from the declared settings and
    keeps, with its key. Its table's warnings are not repeated: the driver built it first and showed them."""
    from storetune.runners import make_runner
    from storetune.runners.tables import TableWarning

    key = f"{name}:{json.dumps(settings, sort_keys=True, default=str)}"
    if key not in _WORKER_RUNNERS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TableWarning)
            _WORKER_RUNNERS[key] = make_runner(name, settings)
    return key, _WORKER_RUNNERS[key]


def release_runner(key: str) -> None:
    """Close a worker's runner (its device detached, its files removed) and forget it."""
    runner = _WORKER_RUNNERS.pop(key, None)
    if runner is not None:
        runner.close()


def worker_measure(name: str, settings: dict, workload: Workload, job: Job,
                   node: str | None = None, board: Board | RaceBoard | None = None) -> list[Measurement]:
    """A job in a worker process, with its worker's runner, except that one that holds a disk is
    closed after each job (idle workers live on, and would keep a loop device attached: on Ray such
    runners are kept by actors for a campaign instead, ``tuner/execution/ray.py``)."""
    key, runner = worker_runner(name, settings)
    try:
        return measure(runner, workload, job, node=node, board=board)
    finally:
        if runner.resources():
            release_runner(key)
