"""The driver's side of device runners on Ray: the actors that keep a runner holding a loop slot or a disk for a
campaign (``DeviceHolder``, in tuner/execution/ray_workers.py), and the stream that gives them jobs, for
``RayExecutor.stream``."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from storetune.runners import Measurement, Workload
from storetune.tuner.execution.jobs import ExecutorLost, Job, Recorder, record_all
from storetune.tuner.execution.ray_workers import DeviceHolder


class Driver(Protocol):
    """What a held stream asks of its executor (``RayExecutor``): to wait for a result while the head answers, and
    to read a job's measurements (None: its holder died and ``retried`` ran it again)."""

    max_retries: int

    def _wait(self, ray: Any, refs: list[Any]) -> Any: ...

    def _result(self, ray: Any, ref: Any, runner_name: str,
                retried: Callable[[], bool] | None = None) -> list[Measurement] | None: ...

RELEASE_S = 60.0  # how long closing waits for the holders to detach their devices (a run ends first)


@dataclass(eq=False)
class Hold:
    actor: Any
    ready: Any | None  # the reference to its first answer, while Ray places it; None once it answered
    busy: bool = False


class Holders:
    """The actors that keep a device runner for a campaign, at most one per job in flight, each holding the loop
    slot or disk its runner needs for its whole life. A job goes only to one that is placed and idle, so a holder
    Ray cannot place (a node gone, its slot with it) never keeps a job waiting while another is free."""

    def __init__(self, ray: Any, name: str, settings: dict, needed: dict[str, float], size: int):
        self.ray, self.name, self.settings, self.needed, self.size = ray, name, settings, needed, size
        self.all: list[Hold] = []
        self.lost = 0

    def grow(self) -> None:
        """Up to ``size`` holders, the new ones waiting for Ray to place them (for a free slot)."""
        while len(self.all) < self.size:
            actor = self.ray.remote(DeviceHolder).options(num_cpus=0, resources=self.needed, max_restarts=0).remote(
                self.name, self.settings)
            self.all.append(Hold(actor, actor.node.remote()))

    def idle(self) -> Hold | None:
        return next((h for h in self.all if h.ready is None and not h.busy), None)

    def placing(self) -> dict[Any, Hold]:
        return {h.ready: h for h in self.all if h.ready is not None}

    def answered(self, hold: Hold) -> None:
        """Its first answer came: placed, or dead before it measured anything (another takes its place)."""
        try:
            self.ray.get(hold.ready)
            hold.ready = None
        except self.ray.exceptions.RayError:
            self.drop(hold)

    def drop(self, hold: Hold) -> None:
        """A dead holder (its worker or its node died): forgotten, and another asked for in its place."""
        self.all.remove(hold)
        self.lost += 1
        if self.lost > 4 * self.size + 4:  # every one dies: the cluster cannot keep an actor there
            raise ExecutorLost(f"the Ray cluster lost {self.lost} of the actors that hold {self.name}'s devices")
        try:
            self.ray.kill(hold.actor, no_restart=True)
        except Exception:  # already gone
            pass
        self.grow()

    def release(self) -> None:
        """Each holder closes its runner (detaches its device), then ends: waited for up to ``RELEASE_S`` (what
        is still attached after that is the next start's reaper's, which says so)."""
        placed = [h.actor.release.remote() for h in self.all if h.ready is None]
        if placed:
            self.ray.wait(placed, num_returns=len(placed), timeout=RELEASE_S)
        for hold in self.all:
            try:
                self.ray.kill(hold.actor, no_restart=True)
            except Exception:
                pass
        self.all = []


class HeldStream:
    """A device runner's jobs on its holders: queued here until one is placed and idle, so a queued job can
    still be withdrawn; a job whose holder died is run again on another, up to ``max_retries`` times."""

    def __init__(self, executor: Driver, ray: Any, holders: Holders, workload: Workload,
                 record: Recorder | None, board: Any = None):
        self.executor, self.ray, self.holders, self.workload, self.record = executor, ray, holders, workload, record
        self.board, self.name = board, holders.name
        self._queue: deque[tuple[Job, int]] = deque()  # with the times it was tried
        self._refs: dict[Any, tuple[Job, Hold, int]] = {}

    @property
    def pending(self) -> int:
        return len(self._queue) + len(self._refs)

    def submit(self, job: Job) -> None:
        self._queue.append((job, 0))
        self._dispatch()

    def _dispatch(self) -> None:
        self.holders.grow()
        while self._queue and (hold := self.holders.idle()) is not None:
            job, tries = self._queue.popleft()
            board = self.board if job.rungs is not None or job.race else None
            hold.busy = True
            self._refs[hold.actor.measure.remote(self.workload, job, board)] = (job, hold, tries)

    def next(self) -> tuple[Job, list[Measurement]]:
        while True:
            self._dispatch()
            placing = self.holders.placing()
            ref = self.executor._wait(self.ray, [*self._refs, *placing])
            if ref in placing:
                self.holders.answered(placing[ref])
                continue
            job, hold, tries = self._refs.pop(ref)

            def retried() -> bool:
                self.holders.drop(hold)
                if tries < self.executor.max_retries:
                    self._queue.appendleft((job, tries + 1))
                    return True
                return False

            measurements = self.executor._result(self.ray, ref, self.name, retried)
            if measurements is None:
                continue
            hold.busy = False
            record_all(self.record, job, measurements)
            return job, measurements

    def drop_queued(self) -> None:
        """The jobs no holder has taken yet; those measuring run on, and the loop waits for them."""
        self._queue.clear()
