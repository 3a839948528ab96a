"""The features of an I/O at submission (HEIMDALL section 3.3) and the chronological splits.

For each I/O: the queue length at its submission, its size, and the latency, queue length and
throughput of the last N I/Os that had completed by then. (Completed, not merely submitted: at
submission a kernel knows only finished latencies.) The queue length is derived from submission
times and latencies when the trace has no queue column: the I/Os submitted earlier and not yet done.
Writes shape the features; admission and failover apply to reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runners.traces import Trace

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

    def __len__(self) -> int:
        return len(self.latency_us)


def prepare(trace: Trace) -> IOs:
    if not trace.has_latency:
        raise AdmissionDataError(f"{trace.source}: the trace has no latencies; replay it first (storetune replay)")
    unmeasured = np.flatnonzero(~np.isfinite(trace.latency_us))
    if len(unmeasured):
        raise AdmissionDataError(f"{trace.where(int(unmeasured[0]))}: no latency (-1), and {len(unmeasured) - 1} more "
                                 "I/Os lack one; admission learns from every I/O's latency")
    submit = np.where(np.isfinite(trace.submit_ms), trace.submit_ms, trace.ts_ms) * 1000.0
    order = np.argsort(submit, kind="stable")
    submit, latency = submit[order], np.maximum(trace.latency_us[order], 1.0)
    done = np.sort(submit + latency)
    queue = np.maximum(np.arange(len(submit)) - np.searchsorted(done, submit, side="right"), 0)
    size = trace.size[order].astype(float)
    return IOs(submit, latency, size, trace.is_read[order], queue.astype(float), size / latency)


def features(ios: IOs, depth: int) -> np.ndarray:
    """One row per I/O: [queue, size, latency x depth, queue x depth, throughput x depth]."""
    if depth < 1:
        raise AdmissionDataError("the history depth must be at least 1")
    finish = ios.submit_us + ios.latency_us
    by_finish = np.argsort(finish, kind="stable")
    finished = np.searchsorted(finish[by_finish], ios.submit_us, side="right")  # completed before each submission
    columns = [ios.queue, ios.size]
    history = []
    for source in (ios.latency_us, ios.queue, ios.throughput):
        for k in range(1, depth + 1):
            at = finished - k
            value = source[by_finish[np.maximum(at, 0)]]
            history.append(np.where(at >= 0, value, 0.0))
    return np.column_stack(columns + history)


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
