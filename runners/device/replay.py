"""Replays a block trace on a device with O_DIRECT and measures every I/O's latency.

A small replayer rather than fio's iolog replay: each output line must carry the latency of that
trace line, which a replayer of our own gives directly, and fio 3.33 (Debian 12's) predates an
upstream fix to completion latencies in trace replay. ``bench/device_overhead.py`` checks this
replayer's latencies against fio's own random-read measurement on the same device.

Worker threads (the queue depth) issue pread/pwrite on the raw device; Python releases the GIL in
those calls, so the threads overlap on the device. I/Os are submitted at the trace's timestamps
divided by ``speed``, or as fast as possible with speed 0. Offsets beyond the device wrap modulo its
size (MSR traces reach about 15 GB), aligned down to the device's logical block; the count of
wrapped I/Os is reported.

Measured (README): within 4% of fio's mean latency at queue depth 1; at depth 8 latencies read 57% high,
most likely because a completion waits for the interpreter lock before it is timed.
"""

from __future__ import annotations

import mmap
import os
import queue
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from runners.traces import Trace


@dataclass(frozen=True)
class ReplayResult:
    trace: Trace  # the input with latency_us, submit_ms and returned filled in, offsets as replayed
    wrapped: int  # I/Os whose offset wrapped around the device
    duration_s: float
    errors: int

    def summary(self) -> dict[str, Any]:
        lat = self.trace.latency_us[np.isfinite(self.trace.latency_us)]
        reads = self.trace.is_read
        return {
            "ios": len(self.trace), "reads": int(reads.sum()), "writes": int((~reads).sum()),
            "wrapped_offsets": self.wrapped, "errors": self.errors, "duration_s": round(self.duration_s, 3),
            "iops": round(len(self.trace) / self.duration_s, 1) if self.duration_s else None,
            "latency_mean_us": float(np.mean(lat)) if len(lat) else None,
            "latency_p50_us": float(np.percentile(lat, 50)) if len(lat) else None,
            "latency_p99_us": float(np.percentile(lat, 99)) if len(lat) else None,
        }


def logical_block(device: str) -> int:
    try:
        return int((Path("/sys/block") / Path(device).name / "queue" / "logical_block_size").read_text())
    except (OSError, ValueError):
        return 512


def device_size(device: str) -> int:
    fd = os.open(device, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)


def replay(trace: Trace, device: str, *, speed: float = 1.0, queue_depth: int = 32) -> ReplayResult:
    """Replay ``trace`` on ``device`` (which it overwrites) and return what it measured."""
    if queue_depth < 1:
        raise ValueError("the queue depth must be at least 1")
    if speed < 0:
        raise ValueError("--speed must be 0 (as fast as possible) or more")
    block, size = logical_block(device), device_size(device)
    lengths = np.maximum(block, -(-trace.size // block) * block)  # rounded up to whole blocks
    if lengths.max() > size:
        raise ValueError(f"the trace has an I/O of {int(lengths.max())} bytes, larger than {device}")
    room = size - lengths
    offsets = (trace.offset % np.maximum(room, block)) // block * block
    wrapped = int(np.count_nonzero(trace.offset + lengths > size))
    n = len(trace)
    latency = np.full(n, np.nan)
    submit = np.full(n, np.nan)
    returned = np.full(n, -1, dtype=np.int64)
    errors = [0]
    work: queue.Queue[int | None] = queue.Queue(maxsize=queue_depth * 4)
    fd = os.open(device, os.O_RDWR | os.O_DIRECT)
    started = time.perf_counter()

    def worker() -> None:
        with mmap.mmap(-1, int(lengths.max())) as buffer, memoryview(buffer) as view:  # page-aligned for O_DIRECT
            while (i := work.get()) is not None:
                with view[: int(lengths[i])] as chunk:  # released before the buffer closes
                    t0 = time.perf_counter()
                    try:
                        done = os.preadv(fd, [chunk], int(offsets[i])) if trace.is_read[i] else os.pwritev(
                            fd, [chunk], int(offsets[i]))
                    except OSError:
                        done = -1
                        errors[0] += 1
                    t1 = time.perf_counter()
                latency[i] = (t1 - t0) * 1e6
                submit[i] = (t0 - started) * 1e3
                returned[i] = done

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(queue_depth)]
    for t in threads:
        t.start()
    try:
        origin = trace.ts_ms[0]
        for i in range(n):
            if speed > 0:
                due = (trace.ts_ms[i] - origin) / 1e3 / speed
                wait = due - (time.perf_counter() - started)
                if wait > 0:
                    time.sleep(wait)
            work.put(i)
    finally:
        for _ in threads:
            work.put(None)
        for t in threads:
            t.join()
        os.close(fd)
    duration = time.perf_counter() - started
    measured = replace(trace, offset=offsets.astype(np.int64), latency_us=latency, submit_ms=submit, returned=returned)
    return ReplayResult(measured, wrapped, duration, errors[0])


def replay_on_device(trace: Trace, *, device: str = "loop", allow_device: list[str] | None = None,
                     loop_dir: str = "/var/tmp/storetune", loop_size_mib: int = 1024, speed: float = 1.0,
                     queue_depth: int = 32, dry_run: bool = False, echo: Any = print) -> ReplayResult | None:
    """Set up the device (a fresh loop device by default), replay, and always tear down.
    In a dry run, print what would be done and return None."""
    from runners.device.shell import DryRunShell, Shell
    from runners.device.state import SetupLog, reap_and_say
    from runners.device.target import close_loop, open_block, open_loop, require_root

    shell = DryRunShell(echo) if dry_run else Shell()
    log = SetupLog(dry_run=dry_run)
    if not dry_run:
        require_root()
        reap_and_say(shell)
    if device == "loop":
        target = open_loop(shell, log, Path(loop_dir), loop_size_mib * 2**20)
    else:
        target = open_block(shell, device, list(allow_device or []))
    try:
        if dry_run:
            echo(f"# replay {len(trace)} I/Os on {target.device} with O_DIRECT, queue depth {queue_depth}, "
                 f"{'as fast as possible' if speed == 0 else f'at {speed:g}x the trace speed'}")
            return None
        return replay(trace, target.device, speed=speed, queue_depth=queue_depth)
    finally:
        if target.kind == "loop":
            close_loop(shell, log, target)
