"""Replays a block trace on a device with O_DIRECT and measures every I/O's latency.

The replaying is done by ``replayer.c`` (io_uring, compiled on first use with the system's C compiler
and liburing): it submits each I/O once it is due and a slot of the queue depth is free, and times it
from its submission to the moment its completion is reaped, as fio times its own I/Os. A replayer of
our own because each output line must carry the latency of its trace line, which fio's iolog replay
does not give. The Python-thread replayer it replaced read 57% high at queue depth 8: a completion
waited for the interpreter lock before it was timed. ``bench/device_overhead.py`` checks this one's
mean and p99 against fio's on the same device at queue depths 1, 8 and 32.

I/Os are submitted at the trace's timestamps divided by ``speed``, or as fast as possible with speed
0. Offsets beyond the device wrap back onto it, modulo the device's size less the I/O's length (so that
the whole I/O fits; MSR traces reach about 15 GB), aligned down to the device's logical block; the
count of wrapped I/Os is reported.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from storetune.runners.traces import Trace

SOURCE = Path(__file__).with_name("replayer.c")
MAX_QUEUE_DEPTH = 4096
IO_IN = np.dtype([("offset", "<u8"), ("due_ns", "<u8"), ("length", "<u4"), ("write", "<u4")])
IO_OUT = np.dtype([("submit_ns", "<i8"), ("latency_ns", "<i8"), ("result", "<i8")])


class ReplayerUnavailable(OSError):
    """The replayer cannot be built or cannot run here (no compiler, no liburing, no io_uring)."""


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


def replayer_binary() -> Path:
    """The compiled replayer, built once per version of its source into the user's cache folder."""
    source = SOURCE.read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "storetune"
    binary = cache / f"replayer-{hashlib.sha256(source).hexdigest()[:12]}"
    if binary.exists():
        return binary
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise ReplayerUnavailable("the trace replayer is compiled on first use and needs a C compiler and liburing: "
                                  "apt-get install gcc liburing-dev (make setup-devices does)")
    cache.mkdir(parents=True, exist_ok=True)
    partial = cache / f".{binary.name}.{os.getpid()}"
    result = subprocess.run([compiler, "-O2", "-Wall", "-o", str(partial), str(SOURCE), "-luring"],
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        first = next((line for line in result.stderr.splitlines() if "error" in line), result.stderr.strip()[:200])
        raise ReplayerUnavailable(f"could not compile the trace replayer ({first}); it needs liburing: "
                                  "apt-get install gcc liburing-dev (make setup-devices does)")
    partial.rename(binary)  # atomic: a concurrent build never runs a half-written binary
    return binary


def replay(trace: Trace, device: str, *, speed: float = 1.0, queue_depth: int = 32) -> ReplayResult:
    """Replay ``trace`` on ``device`` (which it overwrites) and return what it measured."""
    if not 1 <= queue_depth <= MAX_QUEUE_DEPTH:
        raise ValueError(f"the queue depth must be 1 to {MAX_QUEUE_DEPTH}")
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
    ios = np.zeros(n, IO_IN)
    ios["offset"], ios["length"], ios["write"] = offsets, lengths, ~trace.is_read
    if speed > 0:
        ios["due_ns"] = np.maximum(0.0, (trace.ts_ms - trace.ts_ms[0]) * 1e6 / speed)
    binary = replayer_binary()
    with tempfile.TemporaryDirectory(prefix="storetune-replay-") as scratch:
        inp, out = Path(scratch) / "in", Path(scratch) / "out"
        ios.tofile(inp)
        started = time.perf_counter()
        result = subprocess.run([str(binary), device, str(inp), str(out), str(queue_depth)],
                                capture_output=True, text=True)
        duration = time.perf_counter() - started
        if result.returncode != 0:
            raise ReplayerUnavailable(f"the trace replayer failed on {device}: "
                                      f"{result.stderr.strip() or f'exit {result.returncode}'}")
        done = np.fromfile(out, IO_OUT)
    if len(done) != n:
        raise ReplayerUnavailable(f"the trace replayer reported {len(done)} of {n} I/Os")
    failed = done["result"] < 0
    latency = np.where(failed, np.nan, done["latency_ns"] / 1e3)
    measured = replace(trace, offset=offsets.astype(np.int64), latency_us=latency, submit_ms=done["submit_ns"] / 1e6,
                       returned=done["result"].astype(np.int64))
    return ReplayResult(measured, wrapped, duration, int(failed.sum()))


def replay_on_device(trace: Trace, *, device: str = "loop", allow_device: list[str] | None = None,
                     loop_dir: str = "/var/tmp/storetune", loop_size_mib: int = 1024, speed: float = 1.0,
                     queue_depth: int = 32, dry_run: bool = False, echo: Any = print) -> ReplayResult | None:
    """Set up the device (a fresh loop device by default), replay, and always tear down.
    In a dry run, print what would be done and return None."""
    from storetune.runners.device.shell import DryRunShell, Shell
    from storetune.runners.device.state import SetupLog, reap_and_say
    from storetune.runners.device.target import close_loop, open_block, open_loop, require_root

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
