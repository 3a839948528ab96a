"""What every runner shares: the outcome of a run, the workload it ran, and the Runner protocol."""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from search_spaces import Config, SearchSpace

Direction = Literal["min", "max"]


class Status(str, Enum):
    """The state of a trial, and the outcome of one measurement (the terminal ones)."""

    PENDING = "PENDING"  # asked, not started
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"  # the benchmark or the tools crashed
    INVALID = "INVALID"  # the configuration is refused: outside the space, not in the table, rejected by mkfs
    TIMEOUT = "TIMEOUT"
    STALE = "STALE"  # was RUNNING when its driver died; re-run on resume, never counted

    @property
    def terminal(self) -> bool:
        """A finished evaluation, which counts towards the budget."""
        return self in (Status.SUCCEEDED, Status.FAILED, Status.INVALID, Status.TIMEOUT)


@dataclass(frozen=True)
class Workload:
    """What runs against a configuration: a benchmark personality, a trace, or a dataset slice."""

    kind: str  # "dataset", "command", "fio", "filebench", "trace"
    name: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def fingerprint(self) -> str:
        """Stable across runs and machines: campaigns with the same fingerprint ran the same workload."""
        blob = json.dumps({"kind": self.kind, "name": self.name, "params": self.params}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "params": dict(self.params)}


@dataclass(frozen=True)
class Measurement:
    """The metrics of one run, or why there are none. Runners return failures, never raise them."""

    status: Status
    metrics: Mapping[str, float] = field(default_factory=dict)
    reason: str | None = None
    env: Mapping[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0

    @classmethod
    def failed(cls, status: Status, reason: str, **kw: Any) -> Measurement:
        return cls(status=status, reason=reason, **kw)


@runtime_checkable
class Runner(Protocol):
    """Measures one configuration. ``run`` returns a Measurement for every outcome, including
    invalid configurations, crashes and timeouts: it does not raise out of a campaign."""

    name: ClassVar[str]
    space: SearchSpace
    workload: Workload

    def run(self, config: Config, workload: Workload, *, seed: int) -> Measurement: ...

    def metrics(self) -> dict[str, Direction]:
        """The metrics this runner reports, each with the direction that is better."""
        ...

    def settings(self) -> dict[str, Any]:
        """The keyword arguments that rebuild this runner with ``make_runner`` (for resume)."""
        ...

    def close(self) -> None:
        """Release what the runner holds (a loop device); it may be used again afterwards."""
        ...


# Metric names and the direction that is better, by substring; the first match wins.
_DIRECTION_HINTS: tuple[tuple[str, Direction], ...] = (
    ("latency", "min"),
    ("lat_", "min"),
    ("time", "min"),
    ("_us", "min"),
    ("_ms", "min"),
    ("cost", "min"),
    ("throughput", "max"),
    ("iops", "max"),
    ("ops", "max"),
    ("mbps", "max"),
    ("bandwidth", "max"),
    ("tpm", "max"),
)


def guess_direction(metric: str) -> Direction | None:
    """min for latencies and times, max for throughputs; None when the name does not say."""
    lowered = metric.lower()
    for hint, direction in _DIRECTION_HINTS:
        if hint in lowered:
            return direction
    return None


def host_environment() -> dict[str, Any]:
    """What every measurement records about the machine that ran it."""
    return {
        "host": platform.node(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
