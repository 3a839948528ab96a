"""What every runner shares: the outcome of a run, the workload it ran, and the Runner protocol."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from storetune.search_spaces import Config, InvalidConfig, SearchSpace
from storetune.search_spaces.status import Direction, Status
from storetune.runners.series import Series

log = logging.getLogger(__name__)


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
    node: str | None = None  # the machine that measured it, set by the executor that ran the runner
    series: Series | None = None  # what the run did interval by interval, where the benchmark says (fio's logs)

    @classmethod
    def failed(cls, status: Status, reason: str, **kw: Any) -> Measurement:
        return cls(status=status, reason=reason, **kw)


@runtime_checkable
class Runner(Protocol):
    """Measures one configuration. ``run`` returns a Measurement for every outcome, including
    invalid configurations, crashes and timeouts: it does not raise out of a campaign, except
    HostUnavailable, which is no outcome of the configuration's."""

    name: ClassVar[str]
    exclusive: ClassVar[bool]  # owns a disk: its measurements never run beside each other on one machine
    replays: ClassVar[bool]  # answers from recorded measurements: its runs take no time of their own
    space: SearchSpace
    workload: Workload
    device: str  # what the history compares campaigns by, beside the workload (warm starts): the runner's name,
    # or the device it formats

    def run(self, config: Config, workload: Workload, *, seed: int) -> Measurement: ...

    def resources(self) -> dict[str, float]:
        """What one measurement occupies beyond a CPU, as cluster resources (a loop slot, a disk); {} for none."""
        ...

    def check_pins(self, fixed: dict[str, Any]) -> None:
        """Refuse (ValueError) pins under which every configuration would measure the same."""
        ...

    def workload_fingerprint(self) -> dict[str, Any] | None:
        """The features of its workload when the runner knows them (a trace it replays, a dataset that ships
        its workloads' fingerprints); None otherwise."""
        ...

    def label(self) -> str:
        """What a person calls what it measures on, in titles and listings: its space's name, or a replayed
        dataset's."""
        ...

    def metrics(self) -> dict[str, Direction]:
        """The metrics this runner reports, each with the direction that is better."""
        ...

    def settings(self) -> dict[str, Any]:
        """The keyword arguments that rebuild this runner with ``make_runner`` (for resume)."""
        ...

    def notes(self) -> tuple[str, ...]:
        """Warnings about the runner's inputs (a table's), for a caller that cannot show Python's (REST)."""
        ...

    def close(self) -> None:
        """Release what the runner holds (a loop device); it may be used again afterwards."""
        ...


# Whether a watched run goes on past a rung: the rung's index and what the run measured up to it.
GoOn = Callable[[int, Mapping[str, float]], bool]


@runtime_checkable
class WatchedRunner(Protocol):
    """A runner whose run can be judged as it goes and stopped at a rung (multi-fidelity search): the rungs are
    run lengths in seconds, the last its full length. ``run_watched`` returns what the run measured up to where
    it stopped, with ``run_length_s`` (and ``stopped_at_rung`` where ``go_on`` stopped it) in its environment
    and the seconds it ran as its duration."""

    def full_length_s(self) -> float:
        """The length of a whole run: the last rung."""
        ...

    def watched_metrics(self) -> tuple[str, ...]:
        """The metrics ``go_on`` is given at a rung: the ones a run can be judged by."""
        ...

    def interval_s(self) -> float:
        """How often a run says how it goes (its series' interval): rungs are whole multiples of it."""
        ...

    def run_watched(self, config: Config, workload: Workload, *, seed: int, rungs: Sequence[float],
                    go_on: GoOn) -> Measurement: ...


class HostUnavailable(Exception):
    """The host cannot measure now, through no fault of the configuration (another measurement kept the
    host-wide settings too long). Not a measurement: a FAILED trial's configuration is never proposed
    again, and this one did nothing wrong. It stops the campaign instead; its running trials are
    measured again when it is resumed."""


class DatasetError(ValueError):
    """A table that cannot be read or sliced as asked; the message says which file and line."""


class TableWarning(UserWarning):
    """Something about a table that may be wrong but cannot be told from right (a cut last line). Here, not
    beside the checks that raise it (runners/table_checks.py), so that the CLI can show it as one line without
    importing pandas at start-up."""


def raised(runner: str, error: BaseException) -> Measurement:
    """The FAILED measurement of a runner that raised instead of returning its failure."""
    log.error("runner %s raised", runner, exc_info=error)
    return Measurement.failed(Status.FAILED, f"runner raised {type(error).__name__}: {error}")


# Cluster resources a measurement may occupy (Runner.resources): one of a node's loop devices, or a disk.
LOOP_SLOT = "loop_slot"


def device_resource(path: str) -> str:
    return f"device:{path}"


def hardware_resource(kind: str) -> str:
    """The resource of a class of disk (``disk:ssd-a``): the nodes whose disks are of that class advertise
    it, one unit per measurement they may run at once, so a campaign that names it never mixes two kinds."""
    return f"disk:{kind}"


class RunnerBase:
    """What the runners share, written once: ``run`` validates the configuration against the space
    (INVALID with the space's words) and turns an exception of ``measure`` into a FAILED
    measurement (HostUnavailable excepted), so that a runner implements only ``measure`` and never
    raises out of a campaign but to stop it.

    A runner is built from its settings model (runners/settings.py); ``settings()`` gives back what
    rebuilds it with ``make_runner`` (on resume, and in worker processes).
    """

    name: ClassVar[str]
    exclusive: ClassVar[bool] = False  # owns a disk: measurements must not run beside each other
    replays: ClassVar[bool] = False  # answers from recorded measurements (a table), taking no time of its own
    space: SearchSpace
    workload: Workload

    def __init__(self, settings: Any):
        self._settings = settings
        self.device = self.name

    def run(self, config: Config, workload: Workload, *, seed: int) -> Measurement:
        try:
            config = self.space.validate(config)
        except InvalidConfig as e:
            return Measurement.failed(Status.INVALID, str(e))
        try:
            return self.measure(config, workload, seed=seed)
        except HostUnavailable:  # not the configuration's doing: the campaign stops, the trial is re-run
            raise
        except Exception as e:  # a crash is data about the configuration: keep the trial, say why
            return raised(self.name, e)

    def measure(self, config: Config, workload: Workload, *, seed: int) -> Measurement:
        """Measure a configuration already validated against the space."""
        raise NotImplementedError

    def settings(self) -> dict[str, Any]:
        return self._settings.model_dump(mode="json")

    def notes(self) -> tuple[str, ...]:
        return ()

    def check_pins(self, fixed: dict[str, Any]) -> None:
        """Refuse (ValueError) pins under which every configuration would measure the same; none by default."""

    def workload_fingerprint(self) -> dict[str, Any] | None:
        """The workload's features, when the runner can tell them; not by default."""
        return None

    def label(self) -> str:
        """Its space's name by default."""
        return self.space.name

    def resources(self) -> dict[str, float]:
        """What one measurement occupies beyond a CPU, as cluster resources: none by default; a disk
        for the device runner (a Ray executor schedules by them, one task per unit)."""
        return {}

    def close(self) -> None:
        """Release what the runner holds; nothing by default."""


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


def kill_group(proc: Any) -> None:
    """Kill a benchmark's whole process group (it runs in its own session) and reap it: after a timeout or an
    interruption.
    A Ctrl-C that lands inside ``communicate()`` can leave the Popen half set up, so that a second
    ``communicate()`` raises AttributeError (CPython; CI saw it swallow a Ctrl-C): then it is only waited for.
    One that lands as the command ends finds its group gone: killpg's ProcessLookupError, an OSError, replaced
    the KeyboardInterrupt, the device runner recorded a FAILED trial, and a sweep under load ran on."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # the command and everything it started have ended already
        pass
    try:
        proc.communicate()
    except Exception:
        proc.wait()
