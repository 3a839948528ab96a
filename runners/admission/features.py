"""The features of an I/O at submission, in groups, and the chronological splits.

Every feature is known to a kernel when the I/O is submitted: the latencies of I/Os that have
completed (not merely been submitted), and what is outstanding (how many, how many bytes, since
when). The queue length is derived from submission times and latencies when the trace has no queue
column: the I/Os submitted earlier and not yet done. Writes shape the features; admission and failover
apply to reads. The groups (GROUPS) are what `storetune admission explain` drops and keeps alone; a
feature set (FEATURE_SETS) is what the `features` knob of the admission space chooses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from storetune.runners.traces import Trace

MIN_READS = 200  # per part of a split: fewer cannot train or judge a model


class AdmissionDataError(ValueError):
    """A trace the admission pipeline cannot use; the message says why."""


@dataclass(frozen=True)
class IOs:
    """The trace in submission order, with times in microseconds."""

    submit_us: np.ndarray
    latency_us: np.ndarray
    size: np.ndarray
    is_read: np.ndarray
    queue: np.ndarray  # I/Os outstanding at submission
    throughput: np.ndarray  # bytes per microsecond (= MB/s) of each I/O
    offset: np.ndarray | None = None  # bytes; None: the locality group is all zeros

    def __len__(self) -> int:
        return len(self.latency_us)


def prepare(trace: Trace) -> IOs:
    if not trace.has_latency:
        raise AdmissionDataError(f"{trace.source}: the trace has no latencies; replay it first (storetune replay)")
    unmeasured = np.flatnonzero(~np.isfinite(trace.latency_us))
    if len(unmeasured):
        more = f", and {len(unmeasured) - 1} more I/Os lack one" if len(unmeasured) > 1 else ""
        raise AdmissionDataError(f"{trace.where(int(unmeasured[0]))}: no latency (-1){more}; admission learns from "
                                 "every I/O's latency")
    submit = np.where(np.isfinite(trace.submit_ms), trace.submit_ms, trace.ts_ms) * 1000.0
    order = np.argsort(submit, kind="stable")
    # from the first submission: cumulative sums of epoch microseconds (1.7e15) would lose milliseconds
    submit, latency = submit[order] - submit[order][0], np.maximum(trace.latency_us[order], 1.0)
    done = np.sort(submit + latency)
    queue = np.maximum(np.arange(len(submit)) - np.searchsorted(done, submit, side="right"), 0)
    size = trace.size[order].astype(float)
    return IOs(submit, latency, size, trace.is_read[order], queue.astype(float), size / latency,
               trace.offset[order].astype(float))


GROUPS = {
    "heimdall": "queue length and size at submission; latency, queue length and throughput of the last N "
                "completed I/Os (HEIMDALL 3.3, its Fig. 7 features)",
    "pending": "the reads and the writes outstanding at submission: how many, how many bytes, and how long the "
               "oldest and the average one have waited",
    "locality": "the distance from the previous I/O's end to this offset, and the time since this offset was "
                "last read or written",
    "recent": "the device's recent work: I/Os and bytes completed in the last 1, 5 and 20 ms, the mean latency of "
              "the last 8, 32 and 128 completed, the time since the last completion",
    "linnos": "LinnOS's digitised inputs: queue length (3 digits), the last 4 completed latencies (4 digits each) "
              "and their queue lengths at submission (3 digits each)",
}
FEATURE_SETS = {"heimdall": ("heimdall",), "linnos": ("linnos",), "extended": ("heimdall", "pending", "locality")}
NEVER_US = 1e8  # "this offset was never seen": 100 s, longer than any gap a trace slice holds


class _Clock:
    """What has completed by each submission: the I/Os in finishing order, and how many finished
    at or before each I/O's submission (all of them submitted earlier, since latencies are >= 1 us)."""

    def __init__(self, ios: IOs):
        self.finish = ios.submit_us + ios.latency_us
        self.by_finish = np.argsort(self.finish, kind="stable")
        self.finished = np.searchsorted(self.finish[self.by_finish], ios.submit_us, side="right")

    def last(self, source: np.ndarray, k: int) -> np.ndarray:
        """``source`` of the k-th last I/O completed before each submission (0 when none)."""
        at = self.finished - k
        return np.where(at >= 0, source[self.by_finish[np.maximum(at, 0)]], 0.0)

    def outstanding(self, values: np.ndarray) -> np.ndarray:
        """The sum of ``values`` over the I/Os submitted earlier and not yet completed."""
        submitted = np.concatenate([[0.0], np.cumsum(values)])[:-1]
        completed = np.concatenate([[0.0], np.cumsum(values[self.by_finish])])[self.finished]
        return submitted - completed


def _heimdall(ios: IOs, clock: _Clock, depth: int) -> list[np.ndarray]:
    history = [clock.last(source, k) for source in (ios.latency_us, ios.queue, ios.throughput)
               for k in range(1, depth + 1)]
    return [ios.queue, ios.size] + history


def _pending(ios: IOs, clock: _Clock) -> list[np.ndarray]:
    columns = []
    for kind in (ios.is_read, ~ios.is_read):
        columns += [clock.outstanding(kind.astype(float)), clock.outstanding(ios.size * kind)]
    submitted_at = clock.outstanding(ios.submit_us)  # summed over the ios.queue I/Os outstanding
    mean_age = np.where(ios.queue > 0, ios.submit_us - submitted_at / np.maximum(ios.queue, 1), 0.0)
    # the oldest outstanding I/O is the first, in submission order, to finish after this submission
    first = np.minimum(np.searchsorted(np.maximum.accumulate(clock.finish), ios.submit_us, side="right"),
                       np.arange(len(ios)))
    return columns + [ios.submit_us - ios.submit_us[first], mean_age]


def _locality(ios: IOs) -> list[np.ndarray]:
    n = len(ios)
    if ios.offset is None:
        return [np.zeros(n), np.zeros(n)]
    end = np.concatenate([[ios.offset[0]], (ios.offset + ios.size)[:-1]])
    distance = np.abs(ios.offset - end)
    by_offset = np.lexsort((ios.submit_us, ios.offset))
    gap = np.full(n, NEVER_US)
    same = ios.offset[by_offset][1:] == ios.offset[by_offset][:-1]
    gap[by_offset[1:][same]] = np.diff(ios.submit_us[by_offset])[same]
    return [np.log10(1 + distance), np.log10(1 + gap)]  # logarithmic: spans of bytes and of microseconds


def _recent(ios: IOs, clock: _Clock) -> list[np.ndarray]:
    finished_at = clock.finish[clock.by_finish]
    done_bytes = np.concatenate([[0.0], np.cumsum(ios.size[clock.by_finish])])
    done_latency = np.concatenate([[0.0], np.cumsum(ios.latency_us[clock.by_finish])])
    columns = []
    for window_us in (1_000, 5_000, 20_000):
        since = np.searchsorted(finished_at, ios.submit_us - window_us, side="right")
        columns += [(clock.finished - since).astype(float), done_bytes[clock.finished] - done_bytes[since]]
    for k in (8, 32, 128):
        since = np.maximum(clock.finished - k, 0)
        columns.append((done_latency[clock.finished] - done_latency[since]) / np.maximum(clock.finished - since, 1))
    last = finished_at[np.maximum(clock.finished - 1, 0)]
    columns.append(np.where(clock.finished > 0, ios.submit_us - last, 0.0))
    return columns


def digits(values: np.ndarray, count: int) -> list[np.ndarray]:
    """LinnOS's encoding: a value as ``count`` decimal digits, most significant first, capped at 10^count - 1."""
    capped = np.clip(np.floor(values), 0, 10**count - 1)
    return [np.floor(capped / 10**k) % 10 for k in range(count - 1, -1, -1)]


def _linnos(ios: IOs, clock: _Clock) -> list[np.ndarray]:
    columns = digits(ios.queue, 3)
    for k in range(1, 5):
        columns += digits(clock.last(ios.latency_us, k), 4) + digits(clock.last(ios.queue, k), 3)
    return columns


def features(ios: IOs, depth: int, groups: tuple[str, ...] = ("heimdall",)) -> np.ndarray:
    """One row per I/O, the columns of each group in turn. The heimdall group is [queue, size,
    latency x depth, queue x depth, throughput x depth]; depth applies to it alone (LinnOS looks at 4)."""
    if depth < 1:
        raise AdmissionDataError("the history depth must be at least 1")
    unknown = [g for g in groups if g not in GROUPS]
    if unknown or not groups:
        named = unknown[0] if unknown else "(none)"
        raise AdmissionDataError(f"unknown feature group {named}; known: {', '.join(GROUPS)}")
    clock = _Clock(ios)
    build = {"heimdall": lambda: _heimdall(ios, clock, depth), "pending": lambda: _pending(ios, clock),
             "locality": lambda: _locality(ios), "recent": lambda: _recent(ios, clock),
             "linnos": lambda: _linnos(ios, clock)}
    return np.column_stack([column for group in groups for column in build[group]()])


@dataclass(frozen=True)
class Split:
    """Chronological: the first ``train`` share of the trace trains, the rest tests. While tuning, the
    last ``validation`` share of the training part judges configurations, so the test part stays
    untouched until the end."""

    fit: np.ndarray  # indices of I/Os the models learn from
    validation: np.ndarray
    test: np.ndarray

    @classmethod
    def chronological(cls, ios: IOs, train: float = 0.8, validation: float = 0.2) -> Split:
        if not 0.1 <= train <= 0.9:
            raise AdmissionDataError(f"the training share must be between 0.1 and 0.9, not {train}")
        n = len(ios)
        cut = int(n * train)
        inner = int(cut * (1 - validation))
        split = cls(np.arange(0, inner), np.arange(inner, cut), np.arange(cut, n))
        for name, part in (("training", split.fit), ("validation", split.validation), ("test", split.test)):
            reads = int(ios.is_read[part].sum())
            if reads < MIN_READS:
                raise AdmissionDataError(f"the trace has too few I/Os to split: its {name} part holds {reads} reads, "
                                         f"at least {MIN_READS} are needed (the whole trace has {n} I/Os)")
        return split

    @property
    def train(self) -> np.ndarray:
        """The whole training part (fit + validation)."""
        return np.concatenate([self.fit, self.validation])


class MinMax:
    """Min-max scaling fitted on the training rows only."""

    def __init__(self, rows: np.ndarray):
        self.low = rows.min(axis=0)
        self.span = np.where(rows.max(axis=0) > self.low, rows.max(axis=0) - self.low, 1.0)

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        return ((rows - self.low) / self.span).astype(np.float32)
