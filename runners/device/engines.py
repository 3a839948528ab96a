"""The benchmark engines: fio (the default, from Debian's package) and the real Filebench binary.

Each writes its workload file into the mounted file system's parent directory, runs with a
timeout, and turns the engine's report into StoreTune's metrics:
- ops_per_s, mb_per_s and their read/write split;
- lat_mean_us, and lat_p99_us / lat_p999_us: the worse of the read and write percentiles (fio
  reports each direction's completion-latency percentiles, not the combined distribution).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from storetune.runners.device.personalities import Personality, filebench_wml, fio_job, job_version
from storetune.runners.device.shell import CommandFailed, Shell
from storetune.runners.series import Series, SeriesError, read_fio_logs

logger = logging.getLogger(__name__)
ENGINES = ("fio", "filebench")
SERIES_MS = 1000  # fio's per-interval logs: one averaged value a second (log_avg_msec)
FREE_SPACE_WATCH_S = 0.2  # how often a run's free space is sampled (FreeSpaceWatch)
# What wraps the timed run alone (not the file layout before it), e.g. a block trace (runners/device/blktrace.py)
TimedRun = Callable[[], AbstractContextManager[Any]]


class EngineOutputError(ValueError):
    """The engine ran but its report cannot be read, or says it failed (``errno``: the failing job's)."""

    def __init__(self, message: str, errno: int | None = None):
        super().__init__(message)
        self.errno = errno


class FreeSpaceWatch:
    """The least free space and inodes a mounted file system had while an engine ran, from statvfs every
    ``every_s`` in a thread (hand-written: no library samples a mount's free space). A run that fills the
    file system for a moment is otherwise seen only after it, when the space may be back: on xfs under
    Filebench's fileserver, a 1 GiB device full during the run had half of it free after.
    On xfs, statfs also pushes xfs's queued inode inactivation to run at once (it would run within a
    jiffy); measurements record the watch's period (``free_space_watch_s``)."""

    MIB = 1 << 20

    def __init__(self, mountpoint: str, every_s: float = FREE_SPACE_WATCH_S):
        self.mountpoint, self.every_s = mountpoint, every_s
        self.least_free: int | None = None  # bytes free to root (f_bfree: the engines run as root)
        self.least_inodes: int | None = None  # None where the file system has no inode limit (btrfs)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="free-space-watch", daemon=True)

    def _sample(self) -> None:
        fsid = None
        while True:
            try:
                st = os.statvfs(self.mountpoint)
            except OSError:
                return  # no such directory (a dry run): nothing to see
            if fsid is not None and st.f_fsid != fsid:
                return  # another file system now answers for the path: the watched one is gone
            fsid = st.f_fsid
            free = st.f_bfree * st.f_frsize
            self.least_free = free if self.least_free is None else min(self.least_free, free)
            if st.f_files:
                inodes = st.f_ffree
                self.least_inodes = inodes if self.least_inodes is None else min(self.least_inodes, inodes)
            if self._stop.wait(self.every_s):
                return

    def __enter__(self) -> FreeSpaceWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)  # a statvfs stuck in the kernel must not hold the trial

    def explain(self) -> str:
        """What a short write or ENOSPC meant: the least free space seen during the run, and after it."""
        try:
            after = os.statvfs(self.mountpoint)
            size, free_after = after.f_blocks * after.f_frsize, after.f_bfree * after.f_frsize
        except OSError:
            size = free_after = None

        def mib(n: int | None) -> str:
            return "?" if n is None else f"{n // self.MIB}"

        seen = f"as little as {mib(self.least_free)} of {mib(size)} MiB free (sampled every {self.every_s:g} s), "
        seen += f"{mib(free_after)} MiB free after it"
        if self.least_inodes == 0:
            return f"the file system ran out of inodes during the run; {seen}"
        if self.least_free is not None and size and self.least_free <= max(self.MIB, size // 200):
            return f"the file system filled during the run: {seen}"
        return f"the file system was not seen full (a fill shorter than the samples, or metadata space): {seen}"


def engine_version(shell: Shell, engine: str) -> str | None:
    if shutil.which(engine) is None:
        return None
    argv = [engine, "--version"] if engine == "fio" else [engine, "-h"]
    result = shell.run(argv, check=False, timeout=30)
    text = (result.stdout + result.stderr).strip()
    match = re.search(r"(\d+\.\d+(?:[.-]\w+)*)", text)  # fio-3.33, Filebench Version 1.5-alpha3
    return match.group(1) if match else text[:40]


def run_fio(shell: Shell, p: Personality, mountpoint: str, workdir: Path, runtime_s: float, seed: int,
            timeout_s: float, timed: TimedRun | None = None, fio_args: Sequence[str] = (),
            progress: Progress | None = None) -> tuple[dict[str, float], Series | None]:
    """The run's metrics and its per-second series (fio's IOPS and bandwidth logs, averaged per second).
    ``timed`` wraps the timed run alone; ``fio_args`` are added to its command line (fio's own logs). With
    ``progress``, fio reports every second (``--status-interval``) and ``progress(elapsed_s, ops_per_s so far)``
    is asked each time whether the run goes on: where it says no, fio is interrupted, and the run's metrics
    are its report of what it did until then."""
    job = workdir / f"{p.name}.fio"
    shell.write_file(job, fio_job(p, mountpoint, runtime_s))  # the seed is recorded, not drawn from (fio_job)
    report = workdir / f"{p.name}.json"
    shell.run(["fio", "--create_only=1", "--output-format=json", f"--output={report}", str(job)], timeout=timeout_s)
    settle(shell)
    logs = workdir / "series"
    for old in workdir.glob("series_*.log") if not shell.dry_run else ():
        old.unlink()  # the previous run's: fio appends to a log of the same name
    # log_avg_msec averages every log fio writes: a run that asks for per-I/O latency logs (a traced run,
    # runners/device/blktrace.py) keeps them per I/O and goes without the series; so does a run too short to
    # hold two intervals (fio may log none of a 1 s run's)
    no_series = any(a.startswith("--write_lat_log") for a in fio_args) or runtime_s * 1000 < 2 * SERIES_MS
    per_second = [] if no_series else [f"--write_iops_log={logs}", f"--write_bw_log={logs}", f"--log_avg_msec={SERIES_MS}"]
    stream = None if progress is None else FioProgress(progress)
    output = [f"--output={report}"] if stream is None else ["--status-interval=1"]  # the reports on stdout
    try:
        with (timed or nullcontext)(), FreeSpaceWatch(mountpoint) as watch:
            result = shell.run(["fio", "--output-format=json", *output, *per_second, *fio_args, str(job)],
                               timeout=timeout_s, watch=None if stream is None else stream.line)
    except CommandFailed as e:  # fio 3.33 exits 1 when a job ends on ENOSPC ("io_u error ... No space left")
        if os.strerror(errno.ENOSPC) in e.result.stderr:
            raise EngineOutputError(f"fio ran out of space ({watch.explain()}): {e}", errno.ENOSPC) from None
        raise
    if shell.dry_run:
        return {}, None
    # fio exits 0 even when some of its jobs could not run ("blocksize is larger than data set range")
    interrupted = stream is not None and not stream.going  # fio then says "fio: terminating on signal 2"
    complaints = [line for line in result.stderr.splitlines() if line.startswith("fio:") and "note:" not in line
                  and not (interrupted and "terminating on signal" in line)]
    if complaints:
        raise EngineOutputError(f"fio: {len(complaints)} complaint(s), e.g. {complaints[0]}")
    try:
        metrics = parse_fio(report.read_text() if stream is None else stream.last())
    except EngineOutputError as e:
        if e.errno == errno.ENOSPC:
            raise EngineOutputError(f"{e} ({watch.explain()})", e.errno) from None
        raise
    if no_series:
        return metrics, None
    try:
        series = read_fio_logs(sorted(workdir.glob("series_*.log")), SERIES_MS)
    except SeriesError as e:  # the run's figures stand without it: said (unless it was cut short), not failed
        if not interrupted:
            logger.warning("no per-second series for this run: %s", e)
        series = None
    return metrics, series


Progress = Callable[[float, float], bool]  # (seconds run, ops/s so far) -> whether the run goes on


class FioProgress:
    """fio's reports as ``--status-interval=1`` prints them on stdout, one whole JSON report a second, read line
    by line: each report's seconds and operations so far go to ``progress``, and the last report is the run's.
    A report ends with a line that is a lone ``}`` (fio prints them indented, their own braces deeper)."""

    def __init__(self, progress: Progress):
        self.progress, self.lines, self.reports = progress, [], []
        self.going = True

    def line(self, line: str) -> bool:
        self.lines.append(line)
        if line.rstrip("\n") != "}":
            return self.going
        text = "".join(self.lines)
        self.lines = []
        start = text.find("{")
        try:
            report = json.loads(text[start:])
        except json.JSONDecodeError:
            return self.going  # not one whole report: the final one is parsed, and refused, as a whole
        self.reports.append(text[start:])
        jobs = report.get("jobs") or []
        seconds = max((j.get("elapsed", 0) for j in jobs), default=0)
        ios = sum(j.get(d, {}).get("total_ios", 0) for j in jobs for d in ("read", "write"))
        if self.going and seconds > 0:
            self.going = bool(self.progress(float(seconds), ios / seconds))
        return self.going

    def last(self) -> str:
        if not self.reports:
            raise EngineOutputError("fio printed no report on its output")
        return self.reports[-1]


def settle(shell: Shell) -> None:
    """Between laying the files out and the timed run: write back what the layout dirtied and drop the
    page cache, so that the run neither pays for the layout's writeback nor reads what it wrote."""
    shell.run(["sync"], timeout=300)
    shell.write("/proc/sys/vm/drop_caches", "3")


def parse_fio(text: str) -> dict[str, float]:
    """Metrics from fio's JSON report (fio 3.x), all jobs of group 0 together."""
    start = text.find("{")  # fio may print notes before the JSON
    try:
        report = json.loads(text[start:]) if start >= 0 else None
        jobs = report["jobs"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise EngineOutputError("fio's report is not JSON with 'jobs'") from None
    failed = [j for j in jobs if j.get("error")]
    if failed:
        raise EngineOutputError(f"fio job {failed[0].get('jobname')} failed: error {failed[0]['error']} "
                                f"({os.strerror(failed[0]['error'])})", failed[0]["error"])
    totals: dict[str, float] = {}
    for direction in ("read", "write"):
        stats = [_inline_verify(j, direction) for j in jobs if j.get(direction, {}).get("total_ios", 0) > 0]
        ios = sum(s["total_ios"] for s in stats)
        totals[f"{direction}_iops"] = sum(s["iops"] for s in stats)
        totals[f"{direction}_mb_per_s"] = sum(s["bw_bytes"] for s in stats) / 1e6
        totals[f"{direction}_ios"] = ios
        if ios:
            totals[f"{direction}_lat_mean_us"] = sum(s["clat_ns"]["mean"] * s["total_ios"] for s in stats) / ios / 1e3
            for q, key in (("99.000000", "p99"), ("99.900000", "p999")):
                values = [s["clat_ns"].get("percentile", {}).get(q) for s in stats]
                values = [v for v in values if v is not None]
                if values:
                    totals[f"{direction}_lat_{key}_us"] = max(values) / 1e3
    ios = totals["read_ios"] + totals["write_ios"]
    if ios == 0:
        raise EngineOutputError("fio completed no I/O")
    metrics = {
        "ops_per_s": totals["read_iops"] + totals["write_iops"],
        "mb_per_s": totals["read_mb_per_s"] + totals["write_mb_per_s"],
        "read_ops_per_s": totals["read_iops"],
        "write_ops_per_s": totals["write_iops"],
        "read_mb_per_s": totals["read_mb_per_s"],
        "write_mb_per_s": totals["write_mb_per_s"],
        "lat_mean_us": sum(totals.get(f"{d}_lat_mean_us", 0) * totals[f"{d}_ios"] for d in ("read", "write")) / ios,
    }
    for key in ("p99", "p999"):
        values = [totals[f"{d}_lat_{key}_us"] for d in ("read", "write") if f"{d}_lat_{key}_us" in totals]
        metrics[f"lat_{key}_us"] = max(values)
    for d in ("read", "write"):
        for key in ("lat_mean_us", "lat_p99_us"):
            if f"{d}_{key}" in totals:
                metrics[f"{d}_{key}"] = totals[f"{d}_{key}"]
    return metrics


def _inline_verify(job: dict[str, Any], direction: str) -> dict[str, Any]:
    """A job that reads back each write as it goes (verify_backlog: fio's varmail) reports its reads'
    rate over the time spent reading alone (millions a second): over the run, they come at its writes'."""
    stats = job[direction]
    options = job.get("job options", {})
    if direction != "read" or options.get("verify", "none") in ("none", "0") or "verify_backlog" not in options:
        return stats
    runtime_ms = max(stats["runtime"], job["write"]["runtime"])
    return {**stats, "iops": stats["total_ios"] * 1000 / runtime_ms, "bw_bytes": stats["io_bytes"] * 1000 / runtime_ms}


def run_filebench(shell: Shell, p: Personality, mountpoint: str, workdir: Path, runtime_s: float,
                  timeout_s: float, timed: TimedRun | None = None) -> dict[str, float]:
    """``timed`` wraps the whole Filebench run: Filebench lays its files out inside the same process."""
    wml = workdir / f"{p.name}.f"
    shell.write_file(wml, filebench_wml(p, mountpoint, runtime_s))
    with (timed or nullcontext)(), FreeSpaceWatch(mountpoint) as watch:
        result = shell.run(["filebench", "-f", str(wml)], timeout=timeout_s)
    if shell.dry_run:
        return {}
    try:
        return parse_filebench(result.stdout, result.stderr)
    except EngineOutputError as e:
        # Filebench ends a thread on a write that returns short (errno untouched: "Success"), which a
        # write(2) caught by a full file system may legally do, or on ENOSPC
        if "Failed to write" in str(e):
            short = "a short write: " if ": Success" in str(e) else ""
            raise EngineOutputError(f"{e} ({short}{watch.explain()})") from None
        raise


_SUMMARY = re.compile(
    r"IO Summary:\s+(?P<ops>\d+) ops\s+(?P<rate>[\d.]+) ops/s\s+(?P<rd>\d+)/(?P<wr>\d+) rd/wr\s+"
    r"(?P<mb>[\d.]+)mb/s\s+(?P<lat>[\d.]+)ms/op"
)
_LOG_LINE = re.compile(r"^\s*(?:\d+:\s+)?[\d.]+:\s+(?P<text>.*)$")  # "[pid: ]seconds: text"


def filebench_errors(stderr: str) -> list[str]:
    """Filebench's own error lines (it logs errors to stderr and exits 0), without their timestamps;
    one of each kind (the same words with other numbers count once), in order."""
    errors, kinds, warning = [], set(), False
    for line in stderr.splitlines():
        match = _LOG_LINE.match(line)
        text = (match["text"] if match else line).strip()
        if text.upper().startswith("WARNING") or (warning and not match):
            warning = True  # e.g. "WARNING: Could not open /proc/sys/kernel/shmmax", over several lines
            continue
        warning = False
        kind = re.sub(r"\d+", "N", text)
        if text and kind not in kinds:
            kinds.add(kind)
            errors.append(text)
    return errors


def parse_filebench(stdout: str, stderr: str = "") -> dict[str, float]:
    """Metrics from Filebench's "IO Summary" line. Filebench reports operations (flowops) per
    second and mean latency per operation; it reports no percentiles. A run that logged an error
    failed, with a summary or without: a failing flowop ends its thread, and the rest of the run
    measures fewer threads than asked."""
    errors = filebench_errors(stderr)
    if errors:
        more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
        raise EngineOutputError(f"Filebench: {'; '.join(errors[:3])}{more}")
    match = _SUMMARY.search(stdout)
    if match is None:
        raise EngineOutputError("Filebench printed no 'IO Summary' line")
    return {
        "ops_per_s": float(match["rate"]),
        "read_ops_per_s": float(match["rd"]),
        "write_ops_per_s": float(match["wr"]),
        "mb_per_s": float(match["mb"]) * 1.048576,  # Filebench's mb is MiB
        "lat_mean_us": float(match["lat"]) * 1000.0,
    }


def engine_env(p: Personality, engine: str) -> dict[str, Any]:
    return {"engine": engine, "personality": p.name, "nfiles": p.nfiles, "fileset_bytes": p.fileset_bytes,
            "jobs": job_version(engine, p.name), "free_space_watch_s": FREE_SPACE_WATCH_S}
