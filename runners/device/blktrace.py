"""A short traced run: the device set up as a measurement sets it up, the workload run with blktrace
recording the block device during the timed run alone, and blkparse's output read into a ``Trace``
(``runners.device.blkparse`` says what each I/O's fields mean).

``tracer="tracefs"`` records the same kernel events through ftrace's blk tracer (``runners.device.tracefs``;
for kernels whose lockdown refuses blktrace its debugfs files): its text, turned into blkparse's lines, goes
through the same parser (``source="tracefs"``).

Where blktrace is missing or the kernel refuses it, ``traced_run`` raises ``TraceUnavailable`` (one line:
how to install it, or why the kernel said no); with ``fallback=True`` and the fio engine it records fio's
own per-I/O latency log instead (``source="fio-log"``): its offsets are offsets in each file, not on the
device, so sequentiality is within files. Filebench has no per-I/O log: no fallback.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from storetune.runners.base import Status
from storetune.runners.device.blkparse import (
    BLKPARSE_FORMAT, TracedRun, TraceUnavailable, parse_blkparse, parse_fio_lat_logs,
)
from storetune.runners.device.runner import DeviceRunner
from storetune.runners.device.tracefs import Tracefs
from storetune.runners.settings import DeviceSettings

DEBUGFS = Path("/sys/kernel/debug")
READY_S = 5.0  # how long blktrace may take to open its per-CPU buffers
STOP_S = 15.0  # how long blktrace may take to drain its buffers after SIGINT
INSTALL = "apt-get install blktrace (make setup-devices does)"
ALTERNATIVES = ("--tracer tracefs (tracer=\"tracefs\") records the same kernel events through ftrace's blk tracer; "
                "or --fallback (fallback=True): fio's own log, the workload's file offsets only")

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
