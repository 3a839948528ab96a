"""What runs in a Ray cluster's workers for ``RayExecutor`` (tuner/execution/ray.py): a job as a task, the actors
that hold a device runner or the campaign's rung record, and the handle a task judges its runs on. Ray is imported
inside the functions, in the worker that runs them."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any, TypeVar

from storetune.runners import Measurement, Workload
from storetune.tuner.execution.jobs import (
    Job, measure, name_this_node, one_thread_each, release_runner, worker_measure, worker_runner,
)

T = TypeVar("T")
R = TypeVar("R")


def task_node() -> str:
    """This task's Ray node id; the worker process names its machine after it from now on (and keeps to one
    thread of BLAS and torch: a node's worker processes share its cores)."""
    import ray

    one_thread_each()
    node = ray.get_runtime_context().get_node_id()
    name_this_node(node_name(node))
    return node


def node_name(node_id: str) -> str:
    """A Ray node as measurements name it: its host, and the start of its id (two nodes may share a host)."""
    return f"{socket.gethostname()}/{node_id[:6]}"


def measure_task(name: str, settings: dict, workload: Workload, job: Job,
                  board: Any = None) -> tuple[list[Measurement], str]:
    """One job in a Ray worker, as in a pool worker; its measurements name the node."""
    node = task_node()
    return [with_node(m, node) for m in worker_measure(name, settings, workload, job, board=board)], node


class DeviceHolder:
    """A Ray actor that keeps a runner that holds a device (a loop device, a disk) for a campaign, as the local
    executor keeps its runner: its device is set up, and warmed up, once. The runner is built at the first job, so
    that a runner that cannot be built fails that job, as a task would."""

    def __init__(self, name: str, settings: dict):
        self.name, self.settings, self.key = name, settings, None

    def node(self) -> str:
        return task_node()

    def measure(self, workload: Workload, job: Job, board: Any = None) -> tuple[list[Measurement], str]:
        node = task_node()
        self.key, runner = worker_runner(self.name, self.settings)
        return [with_node(m, node) for m in measure(runner, workload, job, board=board)], node

    def release(self) -> None:
        if self.key is not None:
            release_runner(self.key)
            self.key = None


class BoardActor:
    """The campaign's rung record, held by a Ray actor (its methods run one at a time)."""

    def __init__(self, board: Any):
        self.board = board

    def judge(self, rung: int, value: float) -> bool:
        return self.board.judge(rung, value)

    def learn(self, judged: list[float], value: float) -> None:
        self.board.learn(judged, value)

    def counts(self) -> list[int]:
        return self.board.counts()

    def race(self, runs: list[float]) -> str | None:
        return self.board.race(runs)

    def offer(self, runs: list[float]) -> None:
        self.board.offer(runs)


class ActorBoard:
    """A task's handle on the campaign's rung record (a Ray actor): one call a rung."""

    def __init__(self, actor: Any):
        self.actor = actor

    def judge(self, rung: int, value: float) -> bool:
        import ray

        return bool(ray.get(self.actor.judge.remote(rung, value)))

    def learn(self, judged: list[float], value: float) -> None:
        import ray

        ray.get(self.actor.learn.remote(judged, value))

    def counts(self) -> list[int]:
        import ray

        return list(ray.get(self.actor.counts.remote()))

    def race(self, runs: list[float]) -> str | None:
        import ray

        return ray.get(self.actor.race.remote(runs))

    def offer(self, runs: list[float]) -> None:
        import ray

        ray.get(self.actor.offer.remote(runs))


def with_node(m: Measurement, node: str) -> Measurement:
    from dataclasses import replace

    return replace(m, env={**m.env, "ray_node": node, "executor": "ray"})


def call_task(fn: Callable[[T], R], item: T) -> tuple[R, str]:
    node = task_node()  # first: what ``fn`` measures names this node
    return fn(item), node
