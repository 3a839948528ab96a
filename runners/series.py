"""A measurement's per-interval series: what a benchmark did second by second, read from fio's per-second logs,
checked, and tested for steady state.

One figure per run hides the two things that decide whether a short run can stand for a long one: the warm-up
(the page cache fills, then writeback starts) and whether the run ever settles. The series keeps them, so a
campaign can stop a hopeless run early and a dataset can answer "what would t seconds have shown".
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# The steady-state rule of SNIA's Solid State Storage Performance Test Specification (PTS 2.0, section 3):
# over a window of 5 rounds, the values' range is within 20% of their mean and the least-squares line's
# excursion across the window within 10% of it. Here a round is one interval of the series. fio's own `ss`
# options test the same, but end the job when they are met; a run's length must stay what was asked.
WINDOW = 5
RANGE = 0.20
SLOPE = 0.10
SERIES_METRICS = ("ops_per_s", "mb_per_s")


class SeriesError(ValueError):
    """A series that cannot be used: a missing or non-finite value, metrics of different lengths, a log line that
    does not parse or a second value for one interval.
    The message names the file and line, or the interval."""


@dataclass(frozen=True)
class SteadyState:
    """Where a series settles by SNIA's rule (``WINDOW`` intervals, range within ``RANGE`` of the mean,
    excursion within ``SLOPE``), or that it never does."""

    reached: bool
    from_s: float | None  # the start of the first window that meets the rule
    rule: str = f"SNIA PTS: {WINDOW} intervals, range <= {RANGE:.0%} and slope excursion <= {SLOPE:.0%} of the mean"


@dataclass(frozen=True)
class Series:
    """One value per interval from the run's start, per metric (ops/s and MB/s over all of the run's jobs)."""

    interval_s: float
    values: Mapping[str, tuple[float, ...]]

    def __post_init__(self) -> None:
        if not (self.interval_s > 0 and math.isfinite(self.interval_s)):
            raise SeriesError(f"a series' interval must be a positive number of seconds, not {self.interval_s!r}")
        lengths = {len(v) for v in self.values.values()}
        if len(lengths) > 1:
            raise SeriesError(f"a series' metrics differ in length: {', '.join(f'{k} {len(v)}' for k, v in self.values.items())}")
        for metric, values in self.values.items():
            bad = next((i for i, v in enumerate(values) if not (isinstance(v, (int, float)) and math.isfinite(v))), None)
            if bad is not None:
                raise SeriesError(f"{metric}: interval {bad + 1} ({bad * self.interval_s:g}-{(bad + 1) * self.interval_s:g} s) "
                                  f"is {values[bad]!r}, not a finite number")

    def __len__(self) -> int:
        return len(next(iter(self.values.values()), ()))

    @property
    def seconds(self) -> float:
        return len(self) * self.interval_s

    def steady(self, metric: str = "ops_per_s") -> SteadyState:
        return steady_state(self.values[metric], self.interval_s)

    def mean(self, metric: str, seconds: float, skip_s: float = 0.0) -> float:
        """The mean of the intervals from ``skip_s`` to ``skip_s + seconds``: what a run of that length after
        that warm-up would have reported (whole intervals; at least one)."""
        first = int(round(skip_s / self.interval_s))
        count = max(1, int(round(seconds / self.interval_s)))
        values = self.values[metric][first:first + count]
        if len(values) < count:
            raise SeriesError(f"{metric}: {seconds:g} s after {skip_s:g} s asks for more than the series' "
                              f"{self.seconds:g} s")
        return float(np.mean(values))

    def head(self, seconds: float) -> Series:
        """The run's first ``seconds`` (whole intervals): what a run stopped there recorded."""
        count = max(1, int(round(seconds / self.interval_s)))
        return Series(self.interval_s, {k: tuple(v[:count]) for k, v in self.values.items()})

    def to_dict(self) -> dict[str, Any]:
        """As the history keeps it, with its steady state."""
        steady = self.steady() if "ops_per_s" in self.values and len(self) else None
        return {"interval_s": self.interval_s, **{k: list(v) for k, v in self.values.items()},
                **({"steady": {"reached": steady.reached, "from_s": steady.from_s, "rule": steady.rule}} if steady else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Series:
        try:
            interval = float(data["interval_s"])
        except (KeyError, TypeError, ValueError):
            raise SeriesError(f"a series needs interval_s, a number of seconds; got {dict(data)!r:.80}") from None
        values = {k: tuple(v) for k, v in data.items() if k not in ("interval_s", "steady")}
        for k, v in values.items():
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
                raise SeriesError(f"{k}: a series holds numbers, one per interval")
        return cls(interval, values)


def steady_state(values: Sequence[float], interval_s: float = 1.0, window: int = WINDOW) -> SteadyState:
    """The first window of ``window`` intervals whose range is within ``RANGE`` of its mean and whose
    least-squares line moves by at most ``SLOPE`` of it across the window (SNIA PTS's rule, rounds as
    intervals); not reached where none does, or the series is shorter than a window."""
    a = np.asarray(values, dtype=float)
    if len(a) < window:
        return SteadyState(False, None)
    x = np.arange(window) - (window - 1) / 2
    for start in range(len(a) - window + 1):
        w = a[start:start + window]
        mean = w.mean()
        if mean <= 0:
            continue
        slope = float(x @ (w - mean) / (x @ x))
        if w.max() - w.min() <= RANGE * mean and abs(slope) * (window - 1) <= SLOPE * mean:
            return SteadyState(True, start * interval_s)
    return SteadyState(False, None)


_LOG_NAME = re.compile(r"_(iops|bw)\.(\d+)\.log$")


def read_fio_logs(paths: Sequence[Path], interval_ms: int = 1000) -> Series:
    """fio's per-interval logs (``write_iops_log`` / ``write_bw_log`` with ``log_avg_msec``; one file per job
    thread; lines of time in ms, the interval's mean, direction, block size, offset) summed over threads and
    directions into one value per interval. A thread that ended early (fileserver's appenders, done with their
    bytes in the first second, log nothing) adds nothing from then on. A thread that completed nothing in a
    window (blocked in fsync, say) logs no line for it, so an interval missing between two of its lines counts
    as 0 for that thread, not as a broken log. The last interval is left out where a
    thread that logged the one before did not log it: the run ended just before that thread's mark, and the
    interval would count it as idle."""
    per_kind: dict[str, dict[int, dict[int, float]]] = {"iops": {}, "bw": {}}  # kind -> thread -> interval -> sum
    for path in paths:
        match = _LOG_NAME.search(path.name)
        if not match:
            continue
        kind, thread = match.group(1), int(match.group(2))
        sums = per_kind[kind].setdefault(thread, {})
        entries = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            fields = [f.strip() for f in line.split(",")]
            try:
                ms, value, direction = int(fields[0]), float(fields[1]), fields[2] if len(fields) > 2 else ""
            except (IndexError, ValueError):
                raise SeriesError(f"{path}: line {number}: {line[:60]!r} is not fio's 'time, value, direction, "
                                  "size, offset'") from None
            if not math.isfinite(value) or value < 0:
                raise SeriesError(f"{path}: line {number}: {value!r} is not a rate")
            entries.append((number, ms, value, direction))
        last = {direction: number for number, _, _, direction in entries}
        seen: dict[str, dict[int, int]] = {}  # direction -> interval -> its line
        for number, ms, value, direction in entries:
            interval = max(0, int(round(ms / interval_ms)) - 1)
            mine = seen.setdefault(direction, {})
            if interval in mine:
                if number == last[direction]:  # the run's end: a last, partial window beside a whole one, not counted
                    continue
                raise SeriesError(f"{path}: line {number}: a second value for the interval of {ms} ms (line "
                                  f"{mine[interval]} has one)")
            mine[interval] = number
            sums[interval] = sums.get(interval, 0.0) + value
    if not per_kind["iops"]:
        raise SeriesError(f"fio wrote no per-interval IOPS log among {len(paths)} file(s)")
    values = {}
    for kind, metric, scale in (("iops", "ops_per_s", 1.0), ("bw", "mb_per_s", 1024 / 1e6)):  # bw logs KiB/s
        threads = per_kind[kind]
        if not threads:
            continue
        length = max((max(t) + 1 for t in threads.values() if t), default=0)
        if length >= 2 and any(length - 2 in t and length - 1 not in t for t in threads.values()):
            length -= 1
        values[metric] = tuple(sum(t.get(i, 0.0) for t in threads.values()) * scale for i in range(length))
    length = min(len(v) for v in values.values())
    if not length:
        raise SeriesError("fio logged no whole interval (a run ended or interrupted within its first second or two)")
    return Series(interval_ms / 1000, {k: v[:length] for k, v in values.items()})
