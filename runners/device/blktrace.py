"""A short traced run: the device set up as a measurement sets it up, the workload run with blktrace
recording the block device during the timed run alone, and blkparse's output read into a ``Trace``.

Each I/O is one request the block layer issued to the device (a D event) and its completion (C):
- ``ts_ms``: arrival, the queue (Q) event of the bio at the request's first sector (the last one before
  the issue), in ms from the first event of the trace; the issue time where no Q was seen (``meta``
  counts them). A request built from several bios (merges) arrives with the bio at its first sector.
- ``submit_ms``: the issue (D) time; ``latency_us``: C - D, the device's service time (the time in the
  block layer's queue is ``submit_ms - ts_ms``); NaN where the trace ended before the completion.
- ``is_read`` from blkparse's RWBS ('R'); ``size`` = sectors * 512; ``offset`` = sector * 512, on the
  device; ``returned`` = size, or -1 where the completion is missing or reported an error.
Flushes without data and discards are not I/Os here (``meta`` counts them). blktrace records the whole
device: the file system's journal and metadata I/O and the kernel's writeback are in the trace beside the
workload's (``meta["by_command"]`` counts I/Os per submitting command, e.g. fio, jbd2/loop0-8,
kworker/...; ``meta["metadata_ios"]`` those RWBS marks metadata).

``tracer="tracefs"`` records the same kernel events through ftrace's blk tracer (for kernels whose lockdown
refuses blktrace its debugfs files): its text, turned into blkparse's lines, goes through the same parser
(``source="tracefs"``); ``Tracefs`` says which host-wide ftrace settings it changes and restores.

Where blktrace is missing or the kernel refuses it, ``traced_run`` raises ``TraceUnavailable`` (one line:
how to install it, or why the kernel said no); with ``fallback=True`` and the fio engine it records fio's
own per-I/O latency log instead (``source="fio-log"``): its offsets are offsets in each file, not on the
device, so sequentiality is within files. Filebench has no per-I/O log: no fallback.
"""

from __future__ import annotations

import os
import re
import shutil
import logging
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from runners.base import Status
from runners.device.runner import DeviceRunner
from runners.device.state import UndoFailed, _unescape, unmount
from runners.device.target import DeviceError
from runners.settings import DeviceSettings
from runners.traces import Trace

logger = logging.getLogger(__name__)
DEBUGFS = Path("/sys/kernel/debug")
# one line per event: action, RWBS, sector, sectors, seconds, nanoseconds, pid, error, command (last:
# a command may hold spaces). blkparse prints 0 for the sector and size of events without them (P, U).
BLKPARSE_FORMAT = "%a %d %S %n %T %t %p %e %C\\n"
FIELDS = 9
READY_S = 5.0  # how long blktrace may take to open its per-CPU buffers
STOP_S = 15.0  # how long blktrace may take to drain its buffers after SIGINT
INSTALL = "apt-get install blktrace (make setup-devices does)"
ALTERNATIVES = ("--tracer tracefs (tracer=\"tracefs\") records the same kernel events through ftrace's blk tracer; "
                "or --fallback (fallback=True): fio's own log, the workload's file offsets only")


class TraceUnavailable(DeviceError):
    """blktrace cannot trace here: not installed, or refused by the kernel. One line: what to do."""


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


# --- blktrace -----------------------------------------------------------------------------------------
def require_blktrace(shell: Any = None) -> dict[str, Any]:
    """blktrace and blkparse installed and debugfs mounted (mounted here if it is not); else
    TraceUnavailable. Returns what was done, for the run's meta."""
    for tool in ("blktrace", "blkparse"):
        if shutil.which(tool) is None:
            raise TraceUnavailable(f"{tool} is not installed: {INSTALL}; or {ALTERNATIVES}")
    done: dict[str, Any] = {}
    if not (DEBUGFS / "block").is_dir():
        result = subprocess.run(["mount", "-t", "debugfs", "none", str(DEBUGFS)], capture_output=True, text=True,
                                timeout=30)
        if result.returncode != 0 or not (DEBUGFS / "block").is_dir():
            said = (result.stderr or result.stdout).strip().replace("\n", " ")
            raise TraceUnavailable(f"blktrace needs debugfs, and mount -t debugfs none {DEBUGFS} failed: "
                                   f"{said or 'no block directory in it'} (a kernel without CONFIG_DEBUG_FS "
                                   f"and CONFIG_BLK_DEV_IO_TRACE cannot trace); {ALTERNATIVES}")
        done["debugfs_mounted"] = str(DEBUGFS)  # left mounted, as a system mounts it
    return done


class Blktrace:
    """blktrace on one device, writing its per-CPU files into ``directory``; recorded in the runner's setup
    log (the process, and the kernel's trace on the device), so that a killed run is reaped."""

    def __init__(self, runner: DeviceRunner, directory: Path, name: str = "trace"):
        self.runner, self.directory, self.name = runner, directory, name
        self.device = runner.target().device
        self.said = ""  # blktrace's report: its per-CPU counts and drops
        self.elapsed_s = 0.0

    @contextmanager
    def running(self) -> Iterator[Blktrace]:
        log, target = self.runner.log, self.runner.target()
        self.directory.mkdir(parents=True, exist_ok=True)
        kernel = log.record("blktrace", device=self.device, backing_file=target.backing_file)
        out = open(self.directory / f"{self.name}.blktrace.out", "w+")
        proc = subprocess.Popen(["blktrace", "-d", self.device, "-D", str(self.directory), "-o", self.name],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        entry = log.record_process(proc.pid)
        started = time.monotonic()
        try:
            self._wait_ready(proc, out)
            yield self
        finally:
            self.elapsed_s = time.monotonic() - started
            self._stop(proc)
            log.done(entry)
            out.seek(0)
            self.said = out.read()
            out.close()
            if (DEBUGFS / "block" / Path(self.device).name / "dropped").exists():  # blktrace did not tear it down
                subprocess.run(["blktrace", "-k", "-d", self.device], capture_output=True, timeout=30)
            if not (DEBUGFS / "block" / Path(self.device).name / "dropped").exists():
                log.done(kernel)

    def _wait_ready(self, proc: subprocess.Popen, out: Any) -> None:
        """Until every CPU's file exists (blktrace opened its buffers), or blktrace ended: refused."""
        cpus = os.cpu_count() or 1
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                out.seek(0)
                raise TraceUnavailable(refusal(self.device, out.read()))
            if len(list(self.directory.glob(f"{self.name}.blktrace.*"))) >= cpus:
                time.sleep(0.2)  # its threads open the relay files just after creating the output
                if proc.poll() is None:
                    return
            else:
                time.sleep(0.05)
        raise TraceUnavailable(f"blktrace on {self.device} did not start within {READY_S:g} s")

    def _stop(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGINT)  # blktrace drains its buffers and reports its drops
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def dropped(self) -> int | None:
        """Events blktrace says it dropped (its buffers overflowed); None if it did not say."""
        counts = [int(n) for n in re.findall(r"dropped (\d+)", self.said)]
        return sum(counts) if counts else None

    def parse(self, timeout_s: float = 300) -> TracedRun:
        text_path = self.directory / f"{self.name}.txt"
        result = subprocess.run(["blkparse", "-q", "-i", self.name, "-D", str(self.directory), "-f", BLKPARSE_FORMAT,
                                 "-o", str(text_path)], capture_output=True, text=True, timeout=timeout_s)
        if result.returncode != 0:
            raise RuntimeError(f"blkparse failed (exit {result.returncode}): {(result.stderr or '').strip()[:300]}")
        started = time.monotonic()
        run = parse_blkparse(text_path.read_text(), source=f"blktrace of {self.device}")
        run.meta["parse_s"] = round(time.monotonic() - started, 3)
        return run


def refusal(device: str, said: str) -> str:
    """blktrace's words as one line saying why the kernel refused it."""
    said = " ".join(said.split())
    if "Operation not permitted" in said:
        why = ("the kernel refused access to blktrace's debugfs files (kernel lockdown restricts debugfs: "
               "see dmesg 'Lockdown: blktrace'); this machine cannot trace with blktrace")
    elif "BLKTRACESETUP" in said or "Inappropriate ioctl" in said:
        why = "the kernel refused BLKTRACESETUP (no CONFIG_BLK_DEV_IO_TRACE, or the device is traced already)"
    else:
        why = "blktrace ended at once"
    return f"blktrace on {device}: {why}: {said[:200]}; {ALTERNATIVES}"


# --- the traced run -----------------------------------------------------------------------------------
TRACERS = ("blktrace", "tracefs")


def traced_run(settings: DeviceSettings | None = None, *, config: dict[str, Any] | None = None,
               runtime_s: float = 3.0, fallback: bool = False, seed: int = 1,
               tracer: str = "blktrace") -> TracedRun:
    """One short run of ``settings``' workload (default: DeviceSettings(), fio's fileserver on a new loop
    device), on the space's default configuration unless ``config`` is given (missing values from the
    defaults), set up as a measurement sets it up (fresh mkfs, mount, queue settings, the files laid out,
    written back and dropped), with the block device traced during the timed run of ``runtime_s`` seconds
    alone. No warm-up. Everything set up is torn down, on error too, through the runner's setup log.
    ``tracer``: "blktrace" (debugfs), or "tracefs": the same kernel events through ftrace's blk tracer, for
    kernels whose lockdown refuses blktrace (host-wide ftrace settings, each recorded and restored; refused
    while someone else traces). TraceUnavailable if the tracer is missing or refused, unless ``fallback``
    (fio only: fio's log)."""
    if tracer not in TRACERS:
        raise ValueError(f"tracer must be one of {', '.join(TRACERS)}, not {tracer!r}")
    settings = settings or DeviceSettings()
    settings = settings.model_copy(update={"runtime_s": runtime_s, "warmup_runs": 0})
    # tracefs is checked once the runner exists: its start reaps what a killed traced run left (the blk tracer)
    prepared = require_blktrace_or(fallback, settings.engine) if tracer == "blktrace" else {}
    runner = DeviceRunner(settings)
    tracefs: Tracefs | None = None
    try:
        chosen = runner.space.validate(config or {}, fill_defaults=True)
        meta: dict[str, Any] = {"device": runner.target().device, "device_kind": runner.target().kind,
                                "engine": settings.engine, "workload": settings.workload, "runtime_s": runtime_s,
                                "config": dict(chosen), "seed": seed, "tracer": tracer, **prepared}
        directory = runner.workdir / "trace"
        if runner._workdir_entry is None:  # recorded before it exists, as a measurement does: close removes it
            runner._workdir_entry = runner.log.record("tree", path=str(runner.workdir))
        active: Blktrace | Tracefs | None = None
        if "fallback" not in prepared:
            try:
                if tracer == "blktrace":
                    active = Blktrace(runner, directory)
                    with active.running():  # a moment's trace of the idle device: refused now, not after the setup
                        pass
                else:
                    active = tracefs = Tracefs(runner, directory)
                    meta.update(tracefs.open())  # tracefs mounted, ftrace free, the device not traced
            except TraceUnavailable as e:
                if not fallback:
                    raise
                if settings.engine != "fio":
                    raise TraceUnavailable(f"{e} (and Filebench has no per-I/O log to fall back to)") from None
                active, meta["fallback"] = None, str(e)
        if active is not None:
            runner.timed = active.running
        else:
            directory.mkdir(parents=True, exist_ok=True)
            runner.fio_args = (f"--write_lat_log={directory / 'fiolog'}", "--log_offset=1")
        m = runner.run(chosen, runner.workload, seed=seed)
        if m.status is not Status.SUCCEEDED:
            raise RuntimeError(f"the traced run {m.status.value}: {m.reason}")
        meta.update(ops_per_s=m.metrics.get("ops_per_s"), timings_s=m.env.get("timings_s"),
                    mkfs=m.env.get("mkfs"), mount_options=m.env.get("mount_options"))
        sees = ("the whole device: the workload's I/O and the file system's journal, metadata and writeback "
                "(by_command names the submitters)")
        if isinstance(active, Blktrace):
            run = active.parse()
            dropped = active.dropped()
            run.meta.update(meta, traced_s=round(active.elapsed_s, 3), dropped_events=dropped,
                            complete=dropped == 0, blktrace_said=active.said.strip()[-400:], sees=sees)
            if dropped:
                run.meta["warning"] = f"blktrace dropped {dropped} events: the trace is incomplete"
        elif isinstance(active, Tracefs):
            run = active.parse()
            run.meta.update(meta, traced_s=round(active.elapsed_s, 3), dropped_events=active.lost,
                            complete=active.lost == 0, lost_by_cpu=active.lost_by_cpu, read_bytes=active.read_bytes,
                            ftrace_restored=active.changed, buffer_size_kb=active.buffer_kb, trace_clock="mono",
                            sees=sees, source_is="the kernel's blk tracer through tracefs (ftrace): the same block "
                            "events blktrace records, process names from ftrace's saved command lines")
            if active.lost:
                run.meta["warning"] = f"ftrace lost {active.lost} events (buffer overruns): the trace is incomplete"
        else:
            run = parse_fio_lat_logs(list(directory.glob("fiolog_lat.*.log")))
            run.meta.update(meta)
        return run
    finally:
        if tracefs is not None:
            tracefs.close()
        runner.close()


def require_blktrace_or(fallback: bool, engine: str) -> dict[str, Any]:
    try:
        return require_blktrace()
    except TraceUnavailable as e:
        if not fallback:
            raise
        if engine != "fio":
            raise TraceUnavailable(f"{e} (and Filebench has no per-I/O log to fall back to)") from None
        return {"fallback": str(e)}


# --- the kernel's blk tracer through tracefs ----------------------------------------------------------
TRACEFS = Path("/sys/kernel/tracing")
# per CPU: a 3 s varmail run on a loop device made 133k events, 8 MB of text, about 10 MB of ring buffer
# (a 48-byte record and ftrace's headers each); the reader drains the buffer during the run, and this holds
# such a run whole even if it fell behind and every event landed on one CPU
BUFFER_KB = 16384
DRAIN_S = 10.0  # how long the events left in the buffer may take to read after tracing stops
# what the text of the blk tracer must look like for the parser: blk_classic's blkparse-like lines
# ("  7,0    1   885.070042079 10889  Q  WS 0 + 8 [dd]"), short action names, process names recorded
OPTIONS = {"blk_classic": "1", "verbose": "0", "record-cmd": "1"}
_CLASSIC = re.compile(rb"^\s*(\d+),(\d+)\s+\d+\s+(\d+)\.(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s*(.*)$")
_SECTORS = re.compile(rb"^(\d+) \+ (\d+) \[(.*)\]")
_LOST = re.compile(rb"CPU:\d+ \[LOST (\d+) EVENTS\]")


def blk_text_to_blkparse(text: bytes, major: int, minor: int) -> tuple[str, dict[str, int]]:
    """The blk tracer's classic text (tracefs) as blkparse's output in BLKPARSE_FORMAT, for parse_blkparse:
    the events of device ``major,minor``; a completion's bracket is its error, other events' the command
    (the process name ftrace recorded for the pid). Also counts: lines skipped, events ftrace says it lost."""
    out, skipped, lost = [], 0, 0
    for line in text.splitlines():
        m = _CLASSIC.match(line)
        if m is None:
            found = _LOST.search(line)
            if found:
                lost += int(found[1])
            elif line.strip():
                skipped += 1
            continue
        if int(m[1]) != major or int(m[2]) != minor:
            continue
        action, rwbs, rest = m[6].decode(), m[7].decode(), m[8]
        if action == "m":  # a message, not an event
            continue
        s = _SECTORS.match(rest)
        sector, sectors = (s[1].decode(), s[2].decode()) if s else ("0", "0")
        bracket = (s[3] if s else rest[1:rest.find(b"]")] if rest.startswith(b"[") else b"").decode(errors="replace")
        if action == "C":
            error, command = (bracket if bracket.lstrip("-").isdigit() else "0"), ""
        else:
            error, command = "0", bracket
        nsec = m[4].decode().ljust(9, "0")[:9]
        out.append(f"{action} {rwbs} {sector} {sectors} {m[3].decode()} {nsec} {m[5].decode()} {error} {command}")
    return "\n".join(out) + "\n", {"skipped_lines": skipped, "lost_lines": lost}


def tracefs_mount() -> Path | None:
    """Where tracefs is mounted (/sys/kernel/tracing first), or None."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        dash = fields.index("-")
        if fields[dash + 1] == "tracefs":
            found.append(Path(_unescape(fields[4])))
    return TRACEFS if TRACEFS in found else (found[0] if found else None)


def ftrace_busy(root: Path, device: str | None = None) -> str | None:
    """Why ftrace is someone else's now (one line), or None: a tracer other than nop, events enabled, the
    device traced already. Read only."""
    tracer = (root / "current_tracer").read_text().strip()
    if tracer != "nop":
        return (f"ftrace is in use: current_tracer is {tracer!r}, not nop (someone else is tracing); "
                "the tracefs tracer will not clobber it")
    events = (root / "set_event").read_text().split()
    if events:
        return (f"ftrace is in use: {len(events)} trace events are enabled (set_event: {' '.join(events[:3])}...); "
                "the tracefs tracer will not read them away")
    if device is None:
        return None
    enable = Path("/sys/block") / Path(device).name / "trace" / "enable"
    if not enable.exists():
        return f"{enable} does not exist: this kernel has no block tracing (CONFIG_BLK_DEV_IO_TRACE)"
    if enable.read_text().strip() != "0":
        return f"{device} is traced already ({enable} is {enable.read_text().strip()}): blktrace or another run"
    return None


def _setting(text: str) -> str:
    """The value to write back: the bracketed choice of "[local] global mono", the expanded size of
    buffer_size_kb's "7 (expanded: 1408)" (using a tracer expands it: the closest to what it was)."""
    bracket = re.search(r"\[([^\]]+)\]", text)
    if bracket:
        return bracket[1]
    expanded = re.search(r"expanded: (\d+)", text)
    return expanded[1] if expanded else text.strip()


class Tracefs:
    """The kernel's blk tracer on one device through tracefs (ftrace): the same block events blktrace records,
    for kernels whose lockdown refuses blktrace its debugfs files. Ftrace is host-wide: every setting changed
    (current_tracer, trace_clock, trace options, buffer_size_kb, tracing_on, the device's trace/enable) is
    recorded in the runner's setup log before it is changed, restored after the timed run, and restored by
    the reaper after a SIGKILL; tracefs mounted here is unmounted at ``close``. Refuses, changing nothing,
    while someone else traces (current_tracer not nop, events enabled, the device traced)."""

    def __init__(self, runner: DeviceRunner, directory: Path, name: str = "trace", buffer_kb: int = BUFFER_KB):
        self.runner, self.directory, self.name, self.buffer_kb = runner, directory, name, buffer_kb
        self.device = runner.target().device
        self.root: Path | None = None
        self._mount_entry: int | None = None
        self.changed: dict[str, str] = {}  # setting: its value before (restored)
        self.lost = 0  # events ftrace says it lost (overruns and drops, per CPU)
        self.lost_by_cpu: dict[str, dict[str, int]] = {}
        self.elapsed_s = 0.0
        self.read_bytes = 0

    def open(self) -> dict[str, Any]:
        """tracefs mounted (here, recorded, if it is not) and ftrace free; else TraceUnavailable."""
        log, shell = self.runner.log, self.runner.shell
        root, done = tracefs_mount(), {}
        if root is None:
            self._mount_entry = log.record("mount", path=str(TRACEFS), device="tracefs")
            result = shell.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=False, timeout=30)
            if not result.ok:
                log.done(self._mount_entry)
                self._mount_entry = None
                said = (result.tail().strip().splitlines() or ["?"])[0]
                raise TraceUnavailable(f"mount -t tracefs nodev {TRACEFS} failed: {said} (a kernel without "
                                       "CONFIG_FTRACE cannot trace through tracefs)")
            root, done["tracefs_mounted"] = TRACEFS, str(TRACEFS)
        self.root = root
        if "blk" not in (root / "available_tracers").read_text().split():
            raise TraceUnavailable(f"this kernel has no blk tracer ({root}/available_tracers: "
                                   f"{(root / 'available_tracers').read_text().strip()}): CONFIG_BLK_DEV_IO_TRACE")
        busy = ftrace_busy(root, self.device)
        if busy:
            raise TraceUnavailable(busy)
        return done

    def close(self) -> None:
        """Unmount tracefs if it was mounted here."""
        if self._mount_entry is None:
            return
        try:
            unmount(self.runner.shell, str(TRACEFS))
        except UndoFailed as e:  # kept in the setup log: the next start tries again
            logger.warning("%s (the next start tries again)", e)
            return
        self.runner.log.done(self._mount_entry)
        self._mount_entry = None

    @contextmanager
    def running(self) -> Iterator[Tracefs]:
        assert self.root is not None, "open() first"
        root, log, shell = self.root, self.runner.log, self.runner.shell
        busy = ftrace_busy(root, self.device)  # again: someone may have started since open()
        if busy:
            raise TraceUnavailable(busy)
        self.directory.mkdir(parents=True, exist_ok=True)
        enable = Path("/sys/block") / Path(self.device).name / "trace" / "enable"
        backing = self.runner.target().backing_file
        entries: list[tuple[int, Path, str]] = []  # restored last first

        def change(path: Path, value: str, **fields: Any) -> None:
            original = _setting(shell.read(path))
            if original == value:
                return
            entry = log.record("sysfs", path=str(path), original=original, **fields)
            entries.append((entry, path, original))
            self.changed[str(path.relative_to(root) if path.is_relative_to(root) else path)] = original
            shell.write(path, value)

        started = time.monotonic()
        reader: _PipeReader | None = None
        try:
            change(root / "tracing_on", "0")
            change(root / "trace_clock", "mono")  # blktrace's clock; ftrace's local clock is per CPU
            if int(_setting(shell.read(root / "buffer_size_kb"))) < self.buffer_kb:
                change(root / "buffer_size_kb", str(self.buffer_kb))
            change(root / "current_tracer", "blk")  # clears the buffer and its per-CPU counts
            for option, value in OPTIONS.items():
                change(root / "options" / option, value)
            change(enable, "1", backing_file=backing)
            reader = _PipeReader(root / "trace_pipe", self.directory / f"{self.name}.tracefs.txt")
            shell.write(root / "tracing_on", "1")
            yield self
        finally:
            self.elapsed_s = time.monotonic() - started
            try:
                if (root / "tracing_on").exists():
                    shell.write(root / "tracing_on", "0")
                if reader is not None:
                    self.read_bytes = reader.drain(DRAIN_S)
                    self._count_lost(root)
            finally:
                failed = []
                for entry, path, original in reversed(entries):
                    try:
                        shell.write(path, original)
                        log.done(entry)
                    except OSError as e:  # kept in the setup log: the next start tries again
                        failed.append(f"could not restore {path} = {original}: {e.strerror or e}")
                for line in failed:
                    logger.warning("%s (the next start tries again)", line)

    def _count_lost(self, root: Path) -> None:
        for stats in sorted(root.glob("per_cpu/cpu*/stats")):
            text = stats.read_text()
            counts = {key.replace(" ", "_"): int(n) for key, n in
                      re.findall(r"^(overrun|commit overrun|dropped events): (\d+)", text, re.M)}
            self.lost_by_cpu[stats.parent.name] = counts
            self.lost += sum(counts.values())

    def parse(self) -> TracedRun:
        raw = (self.directory / f"{self.name}.tracefs.txt").read_bytes()
        rdev = os.stat(self.device).st_rdev
        started = time.monotonic()
        text, counts = blk_text_to_blkparse(raw, os.major(rdev), os.minor(rdev))
        self.lost = max(self.lost, counts["lost_lines"])
        run = parse_blkparse(text, source=f"tracefs blk tracer of {self.device}")
        run.source = "tracefs"
        run.meta.update(counts, parse_s=round(time.monotonic() - started, 3))
        return run


class _PipeReader:
    """A thread reading trace_pipe (without blocking) into a file while the run goes on, so that the buffer
    holds only what the reader has not caught up with."""

    def __init__(self, pipe: Path, out: Path):
        self.fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
        self.out = open(out, "wb")
        self.stopping, self.abort = threading.Event(), threading.Event()
        self.bytes = 0
        self.thread = threading.Thread(target=self._read, name="tracefs-reader", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        empty_after_stop = 0
        while not self.abort.is_set():
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                chunk = b""
            if chunk:
                self.out.write(chunk)
                self.bytes += len(chunk)
                empty_after_stop = 0
                continue
            if self.stopping.is_set():
                empty_after_stop += 1
                if empty_after_stop >= 3:  # tracing is off and the buffer stayed empty: drained
                    return
            time.sleep(0.05)

    def drain(self, timeout_s: float) -> int:
        """After tracing stopped: read what is left, then close. Returns the bytes read."""
        self.stopping.set()
        self.thread.join(timeout_s)
        if self.thread.is_alive():  # events kept coming after tracing stopped (another writer): stop reading
            self.abort.set()
            self.thread.join()
        os.close(self.fd)
        self.out.close()
        return self.bytes
