"""Measures a storage configuration for real: mkfs, mount, queue settings, a benchmark, teardown.

Each run builds the file system afresh on the device (a loop device over a sparse file by default,
or an allow-listed block device), mounts it with the configuration's options, sets the I/O
scheduler and queue through sysfs, drops the page cache, runs the personality with fio or
Filebench, and always tears down: unmount, restore the queue settings, and at close detach the
loop device. Each step is written to a setup log first, so that the next start reaps what a
SIGKILL left behind. A combination the tools or the kernel refuse is INVALID with their words;
a crashed benchmark is FAILED; an overrun is TIMEOUT.
"""

from __future__ import annotations

import atexit
import logging
import os
import platform
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from storetune.runners.base import (
    LOOP_SLOT, Direction, GoOn, HostUnavailable, Measurement, RunnerBase, Status, Workload, device_resource,
    hardware_resource,
)
from storetune.runners.device.engines import (
    SERIES_MS, EngineOutputError, Progress, TimedRun, engine_env, engine_version, run_filebench, run_fio, settle,
)
from storetune.runners.device.filesystems import MKFS, build, dirty_limits
from storetune.runners.device.personalities import MIB, device_bytes_needed, job_version, personality
from storetune.runners.device.shell import CommandFailed, CommandTimeout, DryRunShell, Shell
from storetune.runners.device.host import HostSettings
from storetune.runners.device.state import SetupLog, UndoFailed, reap_and_say, remove_tree, unmount
from storetune.runners.device.target import (
    DeviceError, RefusedSetting, Target, apply_queue, close_loop, current_queue_value, open_block, open_loop,
    require, restore_queue,
)
from storetune.runners.series import Series
from storetune.runners.settings import DeviceSettings
from storetune.search_spaces import Config, load_space

logger = logging.getLogger(__name__)
# The measurement protocol, recorded with every measurement and in a sweep's manifest; measurements of
# different protocols are not mixed. 1: the files laid out inside the timed run, no warm-up, fio's
# appenders preallocating 64 MiB each (datasets/loop-storage-v2). 2: the files laid out, written back and
# dropped from the page cache before the timed run; one discarded warm-up run per runner; fio's appends
# bounded and not preallocated, and the same draw of the workload for every run (README, "The
# measurement protocol").
PROTOCOL = 2
SETUP_TIMEOUT_S = 300  # mkfs, mount and fio's file layout on a slow disk
ASLR = Path("/proc/sys/kernel/randomize_va_space")
VM = Path("/proc/sys/vm")
# what mkfs says when the device, not the configuration, is too small: mkfs.xfs "Log size must be at least
# 64MB" and "agsize (...) too small", mkfs.btrfs "is too small to make a usable filesystem" and "minimum size
# for ... btrfs"; not mke2fs's "byte inodes are too small for inline data" or btrfs's "nodesize too small"
SIZE_REFUSAL = re.compile(r"log size must be at least|agsize \([^)]*\) too small|too small to make a usable "
                          r"filesystem|minimum size for .*btrfs", re.IGNORECASE)


class DeviceRunner(RunnerBase):
    name: ClassVar[str] = "device"
    exclusive: ClassVar[bool] = True  # owns its disk: measurements never run beside each other

    def __init__(self, settings: DeviceSettings, *, dry_run: bool = False, echo: Callable[[str], None] = print):
        super().__init__(settings)
        space, workload, engine, runtime_s = settings.space, settings.workload, settings.engine, settings.runtime_s
        device, fileset_mib = settings.device, settings.fileset_mib
        self.space = load_space(space)
        if "fs" not in self.space:
            raise ValueError(f"the device runner measures file-system spaces (storage_v1, storage_v2, storage_full), not {space!r}")
        self.personality = personality(workload, fileset_mib * MIB)
        self.engine, self.runtime_s = engine, runtime_s
        self.timeout_s = settings.timeout_s or runtime_s * 3 + SETUP_TIMEOUT_S
        self.device_arg, self.allow, self.loop_dir = device, list(settings.allow_device), Path(settings.loop_dir)
        self.loop_size_mib, self.fileset_mib, self.dry_run = settings.loop_size_mib, fileset_mib, dry_run
        self.dirty_limit_mib = settings.dirty_limit_mib
        self.log = SetupLog(dry_run=dry_run)
        self.shell: Shell = DryRunShell(echo) if dry_run else Shell(self.log)
        self._target: Target | None = None
        self.workdir = self.loop_dir / f"run-{os.getpid()}"  # job files, reports and the mount point
        self._workdir_entry: int | None = None
        self._check_room(device, self.loop_size_mib * MIB if device == "loop" else None)
        if not dry_run:
            self._check_prerequisites()
            reap_and_say(self.shell)
            atexit.register(self.close)
            self.target()  # set the device up now: its errors come before a campaign writes anything
            if device != "loop":
                self._check_room(device, self.target().describe().get("device_size_bytes"))
        # a job version joins the workload's fingerprint only past 1: campaigns started before versions
        # existed (Filebench's, whose job files never changed) keep their fingerprint and resume
        version = job_version(engine, workload)
        jobs = {"jobs": version} if version != 1 else {}
        self.workload = Workload(engine, workload, {
            "runtime_s": runtime_s, "fileset_mib": fileset_mib, "nfiles": self.personality.nfiles,
            "nthreads": self.personality.nthreads, "filesize": self.personality.filesize, "protocol": PROTOCOL,
            **jobs,
        })
        self._warmups = settings.warmup_runs
        self.hardware = settings.hardware
        # what the history compares campaigns by (warm starts): the device, and the class of disk under it
        self.device = ("loop" if device == "loop" else device) + (f"@{self.hardware}" if self.hardware else "")
        self._versions: dict[str, Any] | None = None
        # seams for a traced run (runners/device/blktrace.py): what wraps the timed run, and fio's extra options
        self.timed: TimedRun | None = None
        self.fio_args: tuple[str, ...] = ()
        self._progress: Progress | None = None  # a watched run's (run_watched)

    def _check_room(self, device: str, size: int | None) -> None:
        """A run that would fill the file system is refused before anything is measured (Filebench
        then fails with a short write, fio with ENOSPC, after minutes of a sweep)."""
        need = device_bytes_needed(self.personality, self.engine, self.runtime_s)
        if size is None or size >= need:
            return
        what = f"{self.engine}'s {self.personality.name} with a {self.personality.fileset_bytes >> 20} MiB fileset"
        if self.engine == "filebench" and self.personality.name == "webserver":
            what += f" appends to its log without bound (about 100 MiB/s), so a {self.runtime_s:g} s run"
        fix = f"`loop_size_mib` {-(-need // MIB)}" if device == "loop" else "a larger device"
        raise DeviceError(f"{what} needs a device of at least {-(-need // MIB)} MiB to fit every file system "
                          f"(metadata and journals included); {device} has {size // MIB} MiB: use {fix} or a "
                          "smaller `fileset_mib`")

    def _check_prerequisites(self) -> None:
        """Missing tools and privileges fail here, before a campaign writes anything."""
        if os.geteuid() != 0:
            raise DeviceError("the device runner needs root (losetup, mkfs, mount, sysfs): run it as root or with sudo")
        require(self.engine, "fio" if self.engine == "fio" else "filebench (build it from source; it is in no registry)")
        for tool, package in {*MKFS.values()}:
            require(tool, package)
        if self.device_arg == "loop":
            require("losetup", "mount")
        else:
            open_block(self.shell, self.device_arg, self.allow)  # refuses unsafe devices now, not mid-campaign

    def metrics(self) -> dict[str, Direction | None]:
        return {"ops_per_s": "max", "mb_per_s": "max", "lat_mean_us": "min", "lat_p99_us": "min"}

    def resources(self) -> dict[str, float]:
        """A loop device is made on demand: any of a node's loop slots. A disk is itself the resource:
        one measurement at a time, on the node that has it. A class of disk (``hardware``) is held beside it."""
        held = {LOOP_SLOT: 1.0} if self.device_arg == "loop" else {device_resource(self.device_arg): 1.0}
        return {**held, hardware_resource(self.hardware): 1.0} if self.hardware else held

    # --- one measurement --------------------------------------------------------------------------
    def measure(self, config: Config, workload: Workload, *, seed: int) -> Measurement:
        """One measurement; a runner's first is preceded by its warm-up runs of the same configuration,
        measured and discarded (a configuration the warm-up finds invalid or failing is that result,
        and the next configuration warms up instead)."""
        warmups, planned = [], self._warmups
        while self._warmups:
            self.shell.note(f"warm-up run {len(warmups) + 1} of {planned}: this configuration, measured and "
                            "discarded (`warmup_runs`)")
            warm = self._measure_once(config, seed=seed)
            if warm.status is not Status.SUCCEEDED:
                return warm
            self._warmups -= 1
            warmups.append(round(warm.metrics.get("ops_per_s", float("nan")), 1))
        if planned:
            self.shell.note("the measured run")
        m = self._measure_once(config, seed=seed, progress=self._progress)
        if m.status is Status.SUCCEEDED and self.full_length_s():  # its device-seconds, as a watched run says them
            m = replace(m, env={"run_length_s": float(self.runtime_s), **m.env})
        return replace(m, env={**m.env, "warmup_ops_per_s": warmups}) if warmups else m

    # --- a watched run (multi-fidelity) ---------------------------------------------------------------
    def full_length_s(self) -> float:
        """fio's runs can be watched and stopped: their length; Filebench's cannot (0)."""
        return float(self.runtime_s) if self.engine == "fio" else 0.0

    def interval_s(self) -> float:
        """fio reports once a second."""
        return SERIES_MS / 1000

    def watched_metrics(self) -> tuple[str, ...]:
        """fio's report a second gives its ops so far."""
        return ("ops_per_s",)

    def run_watched(self, config: Config, workload: Workload, *, seed: int, rungs: Sequence[float],
                    go_on: GoOn) -> Measurement:
        """One measurement whose fio run is judged at each rung but the last (its ops/s so far) and interrupted
        where ``go_on`` says no: its metrics are fio's report of what it did until then, ``stopped_at_rung`` and
        ``run_length_s`` say where. Warm-up runs are not watched."""
        stopped: list[int] = []
        marks = list(rungs[:-1])

        def progress(seconds: float, ops_per_s: float) -> bool:
            if seconds >= rungs[-1]:  # the run's end (its last report): whole, whatever rungs a late report skipped
                marks.clear()
                return True
            while marks and seconds >= marks[0]:
                k = len(rungs) - 1 - len(marks)
                marks.pop(0)
                if not go_on(k, {"ops_per_s": ops_per_s}):
                    stopped.append(k)
                    return False
            return True

        self._progress = progress
        try:
            m = self.run(config, workload, seed=seed)
        finally:
            self._progress = None
        if m.status is not Status.SUCCEEDED:  # refused, crashed or timed out: its duration says what it took
            return m
        reached = rungs[stopped[0]] if stopped else rungs[-1]
        return replace(m, env={**m.env, "run_length_s": reached, **({"stopped_at_rung": stopped[0]} if stopped else {})})

    def _measure_once(self, config: Config, *, seed: int, progress: Progress | None = None) -> Measurement:
        target = self.target()
        plan = build(config)
        env = {**self.environment(), **target.describe(), **engine_env(self.personality, self.engine),
               "mkfs": " ".join(plan.mkfs), "mount_options": ",".join(plan.mount_options), "seed": seed,
               "runtime_s": self.runtime_s, "protocol": PROTOCOL}
        if config.get("journal_mode") == "journal":
            env["note"] = "data=journal turns O_DIRECT into buffered I/O"
        workdir = self.workdir
        mountpoint = workdir / "mnt"
        started = time.monotonic()
        timings = env["timings_s"] = {}
        mounted = queue = None
        try:
            if self._workdir_entry is None:  # recorded before it exists: the reaper removes it
                self._workdir_entry = self.log.record("tree", path=str(workdir))
            if not self.shell.dry_run:
                mountpoint.mkdir(parents=True, exist_ok=True)
            mkfs = self.shell.run(plan.mkfs_argv(target.device), check=False, timeout=SETUP_TIMEOUT_S)
            timings["mkfs"] = round(mkfs.duration_s, 3)
            if not mkfs.ok:
                said = mkfs.tail()
                return self._refused(f"{plan.mkfs[0]} refused: {said}{self._size_hint(said)}", env, started)
            mounted = self.log.record("mount", path=str(mountpoint), device=target.device)
            mount = self.shell.run(plan.mount_argv(target.device, str(mountpoint)), check=False, timeout=60)
            timings["mount"] = round(mount.duration_s, 3)
            if not mount.ok:
                self.log.done(mounted)
                mounted = None
                return self._refused(f"mount refused: {mount.tail()}", env, started)
            queue = apply_queue(self.shell, self.log, target, plan.queue)
            if not self.shell.dry_run:  # what the kernel says it runs with, not what was asked
                env["queue"] = {a: current_queue_value(self.shell, target.queue(a)) for a in plan.queue}
            bench_started = time.monotonic()
            limits = dirty_limits(config, self.dirty_limit_mib)
            if limits:
                env["dirty_mib"] = {"background": limits[0], "limit": limits[1]}
            metrics, series = self._benchmark(str(mountpoint), workdir, seed, timings, limits, progress)
            timings["benchmark"] = round(time.monotonic() - bench_started - timings.get("host_lock_wait", 0.0)
                                         - timings.get("settle", 0.0), 3)
            return Measurement(Status.SUCCEEDED, metrics, env=env, duration_s=time.monotonic() - started,
                               series=series)
        except RefusedSetting as e:
            queue = None  # apply_queue restored what it had set
            return self._refused(str(e), env, started)
        except HostUnavailable:  # the host's state, not the configuration's result: the campaign stops
            raise
        except CommandTimeout as e:
            return Measurement.failed(Status.TIMEOUT, str(e), env=env, duration_s=time.monotonic() - started)
        except (CommandFailed, EngineOutputError, OSError) as e:
            return Measurement.failed(Status.FAILED, str(e), env=env, duration_s=time.monotonic() - started)
        finally:
            teardown_started = time.monotonic()
            if queue:
                restore_queue(self.shell, self.log, queue)
            if mounted is not None:
                self._unmount(str(mountpoint), mounted)
            timings["teardown"] = round(time.monotonic() - teardown_started, 3)

    def _benchmark(self, mountpoint: str, workdir: Path, seed: int, timings: dict[str, float],
                   limits: tuple[int, int] | None = None,
                   progress: Progress | None = None) -> tuple[dict[str, float], Series | None]:
        # Filebench's worker processes share memory at fixed addresses: with address-space randomisation on,
        # they hang after starting. That, and the dirty limits, are the host's: the run holds them exclusively.
        changes = bool(limits) or self.engine != "fio"
        host = HostSettings(self.shell)
        with host.hold(exclusive=changes, timeout_s=self.timeout_s + SETUP_TIMEOUT_S) as waited, ExitStack() as held:
            timings["host_lock_wait"] = round(waited, 3)
            # the writeback and the cache drop are the host's too: under the lock, they cannot land in the middle
            # of a run that holds it exclusively (Filebench's, a dirty-limited one)
            settle_started = time.monotonic()
            settle(self.shell)
            timings["settle"] = round(time.monotonic() - settle_started, 3)
            if limits:
                # With the kernel's defaults (10% and 20% of memory) a 10 s run's writes mostly stay in the page
                # cache; limited, they reach the device during the run. Off by default: interleaved with the
                # default, it did not lower the repeat noise (README, "The measurement protocol"). storage_full
                # tunes them per configuration.
                for kind, limit in zip(("dirty_background", "dirty"), limits):
                    in_force = VM / f"{kind}_bytes"
                    if self.shell.read(in_force) in ("", "0"):
                        in_force = VM / f"{kind}_ratio"  # writing *_bytes zeroes it; writing it back restores it
                    held.enter_context(self._host_setting(host, VM / f"{kind}_bytes", str(max(1, limit) * MIB),
                                                          in_force))
            if self.engine == "fio":
                return run_fio(self.shell, self.personality, mountpoint, workdir, self.runtime_s, seed, self.timeout_s,
                               self.timed, self.fio_args, progress)
            held.enter_context(self._host_setting(host, ASLR, "0"))
            return run_filebench(self.shell, self.personality, mountpoint, workdir, self.runtime_s, self.timeout_s,
                                 self.timed), None

    @contextmanager
    def _host_setting(self, host: HostSettings, path: Path, value: str, restore: Path | None = None) -> Iterator[None]:
        """A host-wide setting for one run, under ``host``'s exclusive lock: ``restore`` (default ``path``) is
        recorded first, and journalled in the lock, so that the next holder or the reaper puts it back after a
        SIGKILL, and is put back after the run."""
        restore = restore or path
        entry = self.log.record("sysfs", path=str(restore), original=self.shell.read(restore))
        try:
            with host.changed(path, value, restore):
                self.log.update(entry, journalled=True)  # from here, the lock's journal is the one to restore it
                yield
        finally:
            if host.pending(restore):  # its restore failed: recorded for the reaper, which tries it again
                self.log.update(entry, restore_failed=True)
            else:
                self.log.done(entry)

    def _size_hint(self, said: str) -> str:
        """Where mkfs finds the device too small for the configuration (mkfs.xfs: "Log size must be at least
        64MB" for agcount=16 on 1 GiB; mkfs.btrfs: "too small"), what to change: the loop device's size."""
        if self.device != "loop" or not SIZE_REFUSAL.search(said):
            return ""
        return f" (on a {self.loop_size_mib} MiB loop device: a larger `loop_size_mib` may let it through)"

    def _refused(self, reason: str, env: dict[str, Any], started: float) -> Measurement:
        return Measurement.failed(Status.INVALID, reason, env=env, duration_s=time.monotonic() - started)

    def _unmount(self, mountpoint: str, entry: int) -> None:
        if self.shell.dry_run:
            self.shell.run(["umount", mountpoint], check=False)
        else:
            try:
                unmount(self.shell, mountpoint)
            except UndoFailed as e:  # kept in the setup log: the next start tries again
                logger.warning("%s (the next start tries again)", e)
                return
        self.log.done(entry)

    # --- the device -------------------------------------------------------------------------------
    def check_device(self) -> None:
        """Refuse a named device as a real run does at its start (not allow-listed, mounted, in use), which
        changes nothing. A dry run calls it; a Ray driver's dry runner does not: its device is another node's."""
        if self.device_arg != "loop":
            self.target()

    def target(self) -> Target:
        if self._target is None:
            if self.device_arg == "loop":
                self._target = open_loop(self.shell, self.log, self.loop_dir, self.loop_size_mib * MIB)
            else:
                self._target = open_block(self.shell, self.device_arg, self.allow)
        return self._target

    def close(self) -> None:
        """Remove the work folder, detach the loop device and remove its file (also called at exit).
        What cannot be undone stays in the setup log, for the next start, and is said."""
        entry, self._workdir_entry = self._workdir_entry, None
        if entry is not None and self._remove_workdir():
            self.log.done(entry)
        if self._target is not None and self._target.kind == "loop":
            close_loop(self.shell, self.log, self._target)
        self._target = None

    def _remove_workdir(self) -> bool:
        if self.shell.dry_run:
            return True
        try:
            remove_tree(self.workdir)  # never while its mount is still there: the reaper then removes it
        except FileNotFoundError:
            pass
        except OSError as e:
            logger.warning("could not remove %s: %s (the next start tries again)", self.workdir, e.strerror or e)
            return False
        return True

    def environment(self) -> dict[str, Any]:
        """Kernel and tool versions, read once."""
        if self._versions is None:
            versions = {"kernel": platform.release(), "host": platform.node(),
                        **({"hardware": self.hardware} if self.hardware else {})}
            if not self.shell.dry_run:
                versions[f"{self.engine}_version"] = engine_version(self.shell, self.engine)
                for key, argv in (("e2fsprogs", ["mke2fs", "-V"]), ("xfsprogs", ["mkfs.xfs", "-V"]),
                                  ("btrfs_progs", ["mkfs.btrfs", "--version"])):
                    result = self.shell.run(argv, check=False, timeout=30)
                    versions[key] = (result.stdout + result.stderr).strip().splitlines()[0] if result.ok else None
            self._versions = versions
        return self._versions
