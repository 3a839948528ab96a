"""The kernel's blk tracer through tracefs (ftrace): the block events blktrace records, for kernels whose
lockdown refuses blktrace its debugfs files. Its classic text, turned into blkparse's lines, goes through
the same parser (``runners.device.blkparse``); ``Tracefs`` says which host-wide ftrace settings it changes
and restores."""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from storetune.runners.device.blkparse import TracedRun, TraceUnavailable, parse_blkparse
from storetune.runners.device.host import FtraceBusy, HostLockRefused, take_ftrace
from storetune.runners.device.runner import DeviceRunner
from storetune.runners.device.state import UndoFailed, _unescape, unmount

logger = logging.getLogger(__name__)
TRACEFS = Path("/sys/kernel/tracing")
FTRACE_WAIT_S = 300.0  # another traced run holds ftrace for its setup, runtime and drain: seconds, rarely minutes
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
    the reaper after a SIGKILL; tracefs mounted here is unmounted at ``close``. Another StoreTune's traced
    run is waited for (``host.FTRACE_LOCK``, held from ``open`` to ``close``, up to ``wait_s``); while someone else
    traces (current_tracer not nop, events enabled, the device traced) it refuses, changing nothing."""

    def __init__(self, runner: DeviceRunner, directory: Path, name: str = "trace", buffer_kb: int = BUFFER_KB,
                 wait_s: float | None = None):
        self.runner, self.directory, self.name, self.buffer_kb = runner, directory, name, buffer_kb
        # how long another StoreTune's traced run may keep ftrace before this one gives up
        self.wait_s = FTRACE_WAIT_S if wait_s is None else wait_s
        self._lock: int | None = None
        self.device = runner.target().device
        self.root: Path | None = None
        self._mount_entry: int | None = None
        self.changed: dict[str, str] = {}  # setting: its value before (restored)
        self.lost = 0  # events ftrace says it lost (overruns and drops, per CPU)
        self.lost_by_cpu: dict[str, dict[str, int]] = {}
        self.elapsed_s = 0.0
        self.read_bytes = 0

    def open(self) -> dict[str, Any]:
        """ftrace this run's (after any other StoreTune's traced run), tracefs mounted (here, recorded, if it
        is not) and ftrace free; else TraceUnavailable. ``close`` gives ftrace back."""
        self._hold_ftrace()
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

    def _hold_ftrace(self) -> None:
        if self.runner.shell.dry_run or self._lock is not None:
            return
        try:
            self._lock = take_ftrace(self.wait_s)
        except FtraceBusy as e:
            raise TraceUnavailable(f"{e}; try again when it ends") from None
        except HostLockRefused as e:
            raise TraceUnavailable(str(e)) from None

    def close(self) -> None:
        """Unmount tracefs if it was mounted here; give ftrace back."""
        try:
            if self._mount_entry is None:
                return
            try:
                unmount(self.runner.shell, str(TRACEFS))
            except UndoFailed as e:  # kept in the setup log: the next start tries again
                logger.warning("%s (the next start tries again)", e)
                return
            self.runner.log.done(self._mount_entry)
            self._mount_entry = None
        finally:
            if self._lock is not None:
                os.close(self._lock)  # closing the only descriptor releases the flock
                self._lock = None

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
