"""Block I/O traces: the formats StoreTune reads and writes.

- ``flashnet``: 7 comma-separated columns, no header, as FlashNet's and HEIMDALL's replayers write
  them: ts_record (ms, the trace's arrival time), latency (us, measured), io_type (1 read, 0 write),
  size (bytes), offset (bytes), ts_submit (ms since the replay started), size_after_replay (bytes
  the system call returned). The device runner's replay output is this format.
- ``msr``: the HEIMDALL replayer's input: 5 space-separated columns, timestamp (ms), devno, offset,
  size, op (1 read, 0 write); no latency.
- ``msr-csv``: the original MSR Cambridge CSV: Timestamp (Windows FILETIME, 100 ns ticks), Hostname,
  DiskNumber, Type (Read/Write), Offset, Size, ResponseTime (100 ns ticks).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from storetune.runners.text import decode

FORMATS = ("flashnet", "msr", "msr-csv")


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and the line."""


@dataclass
class Trace:
    """One I/O per element; times in ms, latencies in us (NaN where the trace has none)."""

    ts_ms: np.ndarray
    is_read: np.ndarray  # bool
    size: np.ndarray  # bytes, int64
    offset: np.ndarray  # bytes, int64
    latency_us: np.ndarray
    submit_ms: np.ndarray
    returned: np.ndarray  # bytes the system call returned, int64 (-1 where unknown)
    source: str = ""
    line: np.ndarray | None = None  # each I/O's line in the file it was read from

    def where(self, i: int) -> str:
        """The file and line of I/O ``i``, for messages."""
        return f"{self.source}: line {self.line[i]}" if self.line is not None else f"{self.source}: I/O {i + 1}"

    def __len__(self) -> int:
        return len(self.ts_ms)

    @property
    def has_latency(self) -> bool:
        return bool(np.isfinite(self.latency_us).any())


def detect_format(path: Path) -> str:
    return _detect(path, _text(path))


def _lines(text: str) -> list[str]:
    """Lines as files have them (str.splitlines also splits at U+2028 and its kin, which would
    shift every line number after one)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _header(path: Path, number: int, line: str) -> TraceError | None:
    """A line of names, not numbers (a CSV export's header): said as such, not as a bad field."""
    fields = [x for x in re.split(r"[,\s]+", line.strip()) if x]
    if len(fields) in {len(c) for c in COLUMNS.values()} and not any(_is_number(x) for x in fields):
        return TraceError(f"{path}: line {number} is a header, {line.strip()[:80]!r}: a FlashNet or MSR trace has "
                          "none (every line is one I/O); remove it")
    return None


def _detect(path: Path, text: str) -> str:
    for number, line in enumerate(_lines(text), start=1):
        if line.strip():
            header = _header(path, number, line)
            if header:
                raise header
            fields = line.strip().split(",")
            if len(fields) == 7:
                return "msr-csv" if not _is_number(fields[1]) else "flashnet"
            if len(line.split()) == 5:
                return "msr"
            raise TraceError(f"{path}: line {number}: neither FlashNet (7 comma-separated columns) nor MSR "
                             f"(5 space-separated columns): {line.strip()[:80]!r}")
    raise TraceError(f"{path}: the trace is empty")


def read_trace(path: str | Path, fmt: str | None = None) -> Trace:
    """Every line checked: its field count, numbers where numbers belong, finite values, operation
    codes, sizes above 0, sizes and offsets in whole 512-byte sectors, offsets and latencies not below 0
    (-1: not measured), and arrival times
    in order. A coarse clock stamps I/Os that straddle a tick out of order (FlashNet's Tencent
    traces, stamped in whole seconds, go back by 1 s now and then), so a step back of at most one
    tick of the trace's clock is taken as its resolution; a larger one is an error."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    text = _text(path)
    fmt = fmt or _detect(path, text)
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")
    rows, lines = [], []
    columns = COLUMNS[fmt]
    for number, line in enumerate(_lines(text), start=1):
        if not line.strip():
            continue
        fields = [x for x in line.strip().split(" " if fmt == "msr" else ",") if x != ""]
        if len(fields) != len(columns):
            raise TraceError(f"{path}: line {number}: expected {len(columns)} fields for {fmt}, got {len(fields)}: "
                             f"{line.strip()[:80]!r}")
        try:
            rows.append(_parse(fmt, fields))
        except _BadField as e:
            header = None if rows else _header(path, number, line)
            if header:
                raise header from None
            raise TraceError(f"{path}: line {number}: {fmt} field {columns[e.column]} is {fields[e.column][:40]!r}, "
                             f"{e.rule}") from None
        lines.append(number)
    if not rows:
        raise TraceError(f"{path}: the trace is empty")
    if not text.endswith(("\n", "\r")):
        raise TraceError(f"{path}: line {lines[-1]}, the last, has no newline at its end: the file looks cut short")
    a = np.array(rows, dtype=float)
    _check_sectors(path, fmt, a, np.array(lines))
    _check_order(path, a[:, 0], np.array(lines), "100 ns ticks" if fmt == "msr-csv" else "ms")
    if fmt == "flashnet":  # a replayer's threads submit a little out of order (11 ms at most in the Tencent traces)
        _check_order(path, a[:, 5], np.array(lines), "ms", "ts_submit", SUBMIT_SLACK_MS)
    if fmt == "msr-csv":  # FILETIME ticks: relative ms, and response time in us
        a[:, 0] = (a[:, 0] - a[0, 0]) / 1e4
    return Trace(a[:, 0], a[:, 1] == 1, a[:, 2].astype(np.int64), a[:, 3].astype(np.int64), a[:, 4], a[:, 5],
                 a[:, 6].astype(np.int64), source=str(path), line=np.array(lines))


SECTOR = 512  # bytes: the block layer's unit; every size and offset of a block trace is a multiple of it


def _check_sectors(path: Path, fmt: str, a: np.ndarray, lines: np.ndarray) -> None:
    """Sizes and offsets in whole sectors. Columns in the wrong order (a FlashNet trace with latency and
    size swapped) otherwise read as a valid trace of 120-byte I/Os, and train a model on nonsense."""
    for column, name in ((2, "size"), (3, "offset")):
        bad = np.flatnonzero(np.mod(a[:, column], SECTOR))
        if len(bad):
            i = bad[0]
            raise TraceError(f"{path}: line {lines[i]}: {fmt} {name} {int(a[i, column])} is not a multiple of "
                             f"{SECTOR} bytes, as every block I/O's is ({len(bad)} such I/Os): are the columns in "
                             f"{fmt}'s order, {', '.join(COLUMNS[fmt])}?")


COLUMNS = {
    "flashnet": ("ts_record", "latency", "io_type", "size", "offset", "ts_submit", "size_after_replay"),
    "msr": ("timestamp", "devno", "offset", "size", "op"),
    "msr-csv": ("Timestamp", "Hostname", "DiskNumber", "Type", "Offset", "Size", "ResponseTime"),
}


class _BadField(ValueError):
    def __init__(self, column: int, rule: str):
        self.column, self.rule = column, rule


def _text(path: Path) -> str:
    return decode(path, path.read_bytes(), TraceError, "a trace is a text file")


def _number(fields: list[str], i: int, minimum: float, unknown: float | None = None) -> float:
    """Field ``i`` as a finite number >= ``minimum``, or NaN where it is ``unknown`` (-1: not measured)."""
    try:
        value = float(fields[i]) if "_" not in fields[i] else math.nan  # Python reads 1_0.5 as 10.5
    except ValueError:
        raise _BadField(i, "not a number") from None
    if "_" in fields[i]:
        raise _BadField(i, "not a number")
    if not math.isfinite(value):
        raise _BadField(i, "not a finite number")
    if unknown is not None and value == unknown:
        return math.nan
    if value < minimum:
        raise _BadField(i, f"below {minimum:g}" + (f" (and not {unknown:g}, which means unknown)" if unknown else ""))
    return value


def _integer(fields: list[str], i: int, minimum: int, allowed: tuple[int, ...] = ()) -> int:
    try:
        value = int(fields[i])
    except ValueError:
        raise _BadField(i, "not an integer") from None
    if "_" in fields[i]:
        raise _BadField(i, "not an integer")
    if allowed and value not in allowed:
        raise _BadField(i, f"not one of {', '.join(map(str, allowed))}")
    if value < minimum:
        raise _BadField(i, f"below {minimum}")
    return value


def _parse(fmt: str, f: list[str]) -> tuple[float, ...]:
    """One record as (ts, is_read, size, offset, latency_us, submit_ms, returned)."""
    nan = math.nan
    if fmt == "flashnet":  # ts, latency, type, size, offset, submit, returned
        ts, latency = _number(f, 0, 0), _number(f, 1, 0, unknown=-1)
        op, size, offset = _integer(f, 2, 0, (0, 1)), _integer(f, 3, 1), _integer(f, 4, 0)
        return ts, op, size, offset, latency, _number(f, 5, 0, unknown=-1), _integer(f, 6, -1)
    if fmt == "msr":  # ts, devno, offset, size, op
        ts, _, offset, size, op = _number(f, 0, 0), _integer(f, 1, 0), _integer(f, 2, 0), _integer(f, 3, 1), \
            _integer(f, 4, 0, (0, 1))
        return ts, op, size, offset, nan, nan, -1
    kind = f[3].strip().lower()  # msr-csv: ts, host, disk, type, offset, size, response
    if kind not in ("read", "write"):
        raise _BadField(3, "neither Read nor Write")
    ts, _, offset, size = _integer(f, 0, 0), _integer(f, 2, 0), _integer(f, 4, 0), _integer(f, 5, 1)
    return ts, kind == "read", size, offset, _number(f, 6, 0) / 10.0, nan, -1


def _check_order(path: Path, ts: np.ndarray, lines: np.ndarray, unit: str, field: str = "timestamp",
                 slack: float | None = None) -> None:
    """No time lies more than ``slack`` before the latest one so far (checked against the latest:
    step by step, a slow slide backwards would pass). For arrival times the slack is one tick of
    the trace's clock, its resolution. The message names both lines: either may be the wrong one."""
    if slack is None:
        slack = next((t for t in TICKS if np.allclose(np.round(ts / t) * t, ts, rtol=0, atol=t * 1e-6)), 0.0)
        allowed = f"arrival times may go back by one tick of the trace's clock at most ({slack:g} {unit})"
    else:
        allowed = f"{field} may go back by {slack:g} {unit} at most"
    present = np.isfinite(ts)
    ts, lines = ts[present], lines[present]
    latest = np.maximum.accumulate(ts) if len(ts) else ts
    back = np.flatnonzero(ts < latest - slack * (1 + 1e-9))
    if len(back):
        i = int(back[0])
        j = int(np.flatnonzero(ts[:i] == latest[i])[0])
        raise TraceError(f"{path}: line {lines[i]}: {field} {ts[i]:g} is {latest[i] - ts[i]:g} {unit} before line "
                         f"{lines[j]}'s ({latest[i]:g}); {allowed}")


SUBMIT_SLACK_MS = 1000.0
TICKS = (1000.0, 100.0, 10.0, 1.0, 0.1, 0.01, 0.001)  # a trace's clock resolution: the coarsest that fits


def write_flashnet(path: str | Path, trace: Trace) -> None:
    """The 7-column FlashNet format; a latency StoreTune did not measure is written as -1."""
    latency = np.where(np.isfinite(trace.latency_us), np.round(trace.latency_us), -1).astype(np.int64)
    submit = np.where(np.isfinite(trace.submit_ms), trace.submit_ms, -1)
    with open(path, "w") as f:
        for i in range(len(trace)):
            f.write(f"{trace.ts_ms[i]:.3f},{latency[i]},{int(trace.is_read[i])},{trace.size[i]},{trace.offset[i]},"
                    f"{submit[i]:.3f},{trace.returned[i]}\n")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
