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

from dataclasses import dataclass
from pathlib import Path

import numpy as np

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

    def __len__(self) -> int:
        return len(self.ts_ms)

    @property
    def has_latency(self) -> bool:
        return bool(np.isfinite(self.latency_us).any())


def detect_format(path: Path) -> str:
    with open(path) as f:
        for line in f:
            if line.strip():
                fields = line.strip().split(",")
                if len(fields) == 7:
                    return "msr-csv" if not _is_number(fields[1]) else "flashnet"
                if len(line.split()) == 5:
                    return "msr"
                raise TraceError(f"{path}: line 1: neither FlashNet (7 comma-separated columns) nor MSR "
                                 f"(5 space-separated columns): {line.strip()[:80]!r}")
    raise TraceError(f"{path}: the trace is empty")


def read_trace(path: str | Path, fmt: str | None = None) -> Trace:
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")
    rows = []
    width = {"flashnet": 7, "msr": 5, "msr-csv": 7}[fmt]
    with open(path) as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            fields = line.strip().split(" " if fmt == "msr" else ",")
            fields = [x for x in fields if x != ""]
            if len(fields) != width:
                raise TraceError(f"{path}: line {number}: expected {width} fields for {fmt}, got {len(fields)}: "
                                 f"{line.strip()[:80]!r}")
            try:
                rows.append(_parse(fmt, fields))
            except ValueError:
                raise TraceError(f"{path}: line {number}: not a {fmt} record: {line.strip()[:80]!r}") from None
    if not rows:
        raise TraceError(f"{path}: the trace is empty")
    a = np.array(rows, dtype=float)
    if fmt == "msr-csv":  # FILETIME ticks: relative ms, and response time in us
        a[:, 0] = (a[:, 0] - a[0, 0]) / 1e4
    return Trace(a[:, 0], a[:, 1] == 1, a[:, 2].astype(np.int64), a[:, 3].astype(np.int64), a[:, 4], a[:, 5],
                 a[:, 6].astype(np.int64), source=str(path))


def _parse(fmt: str, f: list[str]) -> tuple[float, ...]:
    nan = float("nan")
    if fmt == "flashnet":  # ts, latency, type, size, offset, submit, returned
        op = int(f[2])
        if op not in (0, 1) or int(f[3]) <= 0 or int(f[4]) < 0:
            raise ValueError
        return float(f[0]), op, int(f[3]), int(f[4]), float(f[1]), float(f[5]), int(f[6])
    if fmt == "msr":  # ts, devno, offset, size, op
        op = int(f[4])
        if op not in (0, 1) or int(f[3]) <= 0 or int(f[2]) < 0:
            raise ValueError
        return float(f[0]), op, int(f[3]), int(f[2]), nan, nan, -1
    kind = f[3].strip().lower()  # msr-csv: ts, host, disk, type, offset, size, response
    if kind not in ("read", "write"):
        raise ValueError
    return float(f[0]), kind == "read", int(f[5]), int(f[4]), float(f[6]) / 10.0, nan, -1


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
