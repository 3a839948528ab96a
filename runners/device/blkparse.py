"""What a traced run gives, and the parsers that make it: blkparse's output (from blktrace, or from the
kernel's blk tracer through tracefs, turned into blkparse's lines) and fio's own per-I/O log (the fallback).

Each I/O is one request the block layer issued to the device (a D event) and its completion (C):
- ``ts_ms``: arrival, the queue (Q) event of the bio at the request's first sector (the last one before
  the issue), in ms from the first event of the trace; the issue time where no Q was seen (``meta``
  counts them). A request built from several bios (merges) arrives with the bio at its first sector.
- ``submit_ms``: the issue (D) time; ``latency_us``: C - D, the device's service time (the time in the
  block layer's queue is ``submit_ms - ts_ms``); NaN where the trace ended before the completion.
- ``is_read`` from blkparse's RWBS ('R'); ``size`` = sectors * 512; ``offset`` = sector * 512, on the
  device; ``returned`` = size, or -1 where the completion is missing or reported an error.
Flushes without data and discards are not I/Os here (``meta`` counts them). A block trace records the whole
device: the file system's journal and metadata I/O and the kernel's writeback are in the trace beside the
workload's (``meta["by_command"]`` counts I/Os per submitting command, e.g. fio, jbd2/loop0-8,
kworker/...; ``meta["metadata_ios"]`` those RWBS marks metadata).

fio's log (``source="fio-log"``) holds offsets in each file, not on the device, so sequentiality is within
files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from storetune.runners.device.target import DeviceError
from storetune.runners.traces import Trace

# one line per event: action, RWBS, sector, sectors, seconds, nanoseconds, pid, error, command (last:
# a command may hold spaces). blkparse prints 0 for the sector and size of events without them (P, U).
BLKPARSE_FORMAT = "%a %d %S %n %T %t %p %e %C\\n"
FIELDS = 9


class TraceUnavailable(DeviceError):
    """The tracer cannot trace here: not installed, or refused by the kernel. One line: what to do."""


@dataclass
class TracedRun:
    trace: Trace
    source: str  # "blktrace", "tracefs" or "fio-log"
    meta: dict[str, Any] = field(default_factory=dict)
    pid: np.ndarray | None = None  # per I/O: the submitting process (blktrace) or fio's job thread (fio-log)


# --- blkparse's output --------------------------------------------------------------------------------
def parse_blkparse(text: str, source: str = "blkparse") -> TracedRun:
    """Requests from blkparse's output in BLKPARSE_FORMAT (events in any order: blkparse sorts by time)."""
    rows = [line.split(None, FIELDS - 1) for line in text.splitlines()]
    rows = [r for r in rows if len(r) == FIELDS or (len(r) == FIELDS - 1 and r[0] in ("Q", "D", "C"))]
    if not rows:
        raise ValueError(f"{source}: no blkparse events (expected lines of {BLKPARSE_FORMAT.strip()!r})")
    rows = [r if len(r) == FIELDS else [*r, ""] for r in rows]  # an empty command name
    a = np.array(rows, dtype=object)
    action, rwbs, command = a[:, 0].astype(str), a[:, 1].astype(str), a[:, 8].astype(str)
    sector, sectors = a[:, 2].astype(np.int64), a[:, 3].astype(np.int64)
    t = a[:, 4].astype(np.int64) * 1_000_000_000 + a[:, 5].astype(np.int64)  # ns
    pid, error = a[:, 6].astype(np.int64), a[:, 7].astype(np.int64)
    t0 = t.min()

    is_d, is_c, is_q = action == "D", action == "C", action == "Q"
    data = np.char.find(rwbs, "R") >= 0
    data |= np.char.find(rwbs, "W") >= 0
    discard = np.char.find(rwbs, "D") >= 0
    issue = np.flatnonzero(is_d & data & ~discard & (sectors > 0))
    # each issue's completion: the next C of the same sector and size after it
    comp = np.flatnonzero(is_c & (sectors > 0))
    c_of = _next_of(sector, sectors, t, issue, comp)
    # each issue's arrival: the last Q of a bio at its first sector, at or before it
    queued = np.flatnonzero(is_q)
    q_of = _last_of(sector, t, issue, queued)

    d_ns = t[issue]
    has_q = q_of >= 0
    q_ns = np.where(has_q, t[np.maximum(q_of, 0)], d_ns)
    has_c = c_of >= 0
    c_ns = t[np.maximum(c_of, 0)]
    latency_us = np.where(has_c, (c_ns - d_ns) / 1e3, np.nan)
    ok = has_c & (error[np.maximum(c_of, 0)] == 0)
    size = sectors[issue] * 512
    submitter = np.where(has_q, pid[np.maximum(q_of, 0)], pid[issue])
    who = np.where(has_q, command[np.maximum(q_of, 0)], command[issue])

    order = np.argsort(q_ns, kind="stable")
    trace = Trace(
        ts_ms=((q_ns - t0) / 1e6)[order], is_read=(np.char.find(rwbs[issue], "R") >= 0)[order],
        size=size[order], offset=(sector[issue] * 512)[order], latency_us=latency_us[order],
        submit_ms=((d_ns - t0) / 1e6)[order], returned=np.where(ok, size, -1)[order], source=source,
    )
    commands, counts = np.unique(who, return_counts=True)
    meta = {
        "events": len(rows), "ios": len(issue), "reads": int(trace.is_read.sum()),
        "writes": int((~trace.is_read).sum()),
        "without_completion": int((~has_c).sum()), "without_queue_event": int((~has_q).sum()),
        "errors": int((has_c & ~ok).sum()), "metadata_ios": int((np.char.find(rwbs[issue], "M") >= 0).sum()),
        "flushes_without_data": int((is_d & (sectors == 0)).sum()), "discards": int((is_d & discard).sum()),
        "by_command": {str(c) or "?": int(n) for c, n in zip(commands, counts)},
        "submitters": int(len(np.unique(submitter))),
        "latency": "C - D: the device's service time (the block layer's queueing is submit_ms - ts_ms)",
        "arrival": "Q of the bio at the request's first sector (D where none was seen)",
    }
    return TracedRun(trace, "blktrace", meta, pid=submitter[order])


def _next_of(sector: np.ndarray, sectors: np.ndarray, t: np.ndarray, issue: np.ndarray,
             comp: np.ndarray) -> np.ndarray:
    """For each issue event, the index of the first completion of the same sector and size after it (-1)."""
    idx = np.concatenate([issue, comp])
    kind = np.concatenate([np.zeros(len(issue), np.int8), np.ones(len(comp), np.int8)])
    order = np.lexsort((kind, t[idx], sectors[idx], sector[idx]))  # by sector, size, time; D before C at a tie
    idx, kind = idx[order], kind[order]
    nxt = np.full(len(idx), -1)
    if len(idx) > 1:
        same = (sector[idx[1:]] == sector[idx[:-1]]) & (sectors[idx[1:]] == sectors[idx[:-1]])
        pair = (kind[:-1] == 0) & (kind[1:] == 1) & same
        nxt[:-1][pair] = idx[1:][pair]
    out = np.full(len(issue), -1)
    out[np.searchsorted(issue, idx[kind == 0])] = nxt[kind == 0]  # issue is in ascending order
    return out


def _last_of(sector: np.ndarray, t: np.ndarray, issue: np.ndarray, queued: np.ndarray) -> np.ndarray:
    """For each issue event, the index of the last queue event at its sector at or before it (-1)."""
    idx = np.concatenate([queued, issue])
    kind = np.concatenate([np.zeros(len(queued), np.int8), np.ones(len(issue), np.int8)])
    order = np.lexsort((kind, t[idx], sector[idx]))  # Q before D at a tie
    idx, kind = idx[order], kind[order]
    seen_q = np.where(kind == 0, np.arange(len(idx)), -1)
    last_q = np.maximum.accumulate(seen_q) if len(idx) else seen_q
    valid = last_q >= 0
    same = np.zeros(len(idx), bool)
    same[valid] = sector[idx[last_q[valid]]] == sector[idx[valid]]
    result = np.where(same, idx[np.maximum(last_q, 0)], -1)
    out = np.full(len(issue), -1)
    out[np.searchsorted(issue, idx[kind == 1])] = result[kind == 1]  # issue is in ascending order
    return out


# --- fio's own log (the fallback) ---------------------------------------------------------------------
def parse_fio_lat_logs(paths: list[Path], source: str = "fio-log") -> TracedRun:
    """fio's per-I/O total-latency logs (``write_lat_log`` with ``log_offset=1``; one file per job thread):
    time of completion (ms from the job's start), latency (ns), direction (0 read, 1 write), size, the
    offset in the file. Arrival is completion minus latency; syncs and trims are not I/Os here."""
    columns, threads = [], []
    for thread, path in enumerate(sorted(paths, key=_thread_number)):
        text = path.read_text()
        if not text.strip():
            continue
        a = np.loadtxt(path, delimiter=",", ndmin=2, usecols=(0, 1, 2, 3, 4))
        columns.append(a)
        threads.append(np.full(len(a), _thread_number(path) or thread + 1))
    if not columns:
        raise ValueError(f"{source}: fio logged no I/O")
    a, thread = np.concatenate(columns), np.concatenate(threads)
    keep = np.isin(a[:, 2], (0, 1))
    a, thread = a[keep], thread[keep]
    arrival = a[:, 0] - a[:, 1] / 1e6
    order = np.argsort(arrival, kind="stable")
    a, thread, arrival = a[order], thread[order], arrival[order]
    arrival = arrival - min(0.0, arrival.min()) if len(arrival) else arrival
    size = a[:, 3].astype(np.int64)
    trace = Trace(ts_ms=arrival, is_read=a[:, 2] == 0, size=size, offset=a[:, 4].astype(np.int64),
                  latency_us=a[:, 1] / 1e3, submit_ms=arrival.copy(), returned=size, source=source)
    meta = {
        "ios": len(trace), "reads": int(trace.is_read.sum()), "writes": int((~trace.is_read).sum()),
        "submitters": int(len(np.unique(thread))),
        "offsets": "file offsets, not block numbers: sequentiality is within each file",
        "latency": "fio's total latency (submission to completion of the system call, page cache included)",
        "arrival": "completion minus latency; fio's log clock has 1 ms resolution",
        "sees": "the workload's own I/O only: no journal, metadata or writeback I/O",
    }
    return TracedRun(trace, "fio-log", meta, pid=thread)


def _thread_number(path: Path) -> int:
    match = re.search(r"\.(\d+)\.log$", path.name)
    return int(match.group(1)) if match else 0
