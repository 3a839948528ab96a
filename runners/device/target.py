"""The device a configuration is built on: a loop device over a sparse file, or an allow-listed
block device; and its block-layer queue settings, always restored."""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storetune.runners.device.safety import UnsafeDevice, check_block_device
from storetune.runners.device.shell import Shell
from storetune.runners.device.state import SetupLog, loop_detached, undo_order

logger = logging.getLogger(__name__)
QUEUE_ATTRIBUTES = ("scheduler", "read_ahead_kb", "nr_requests")  # in the order they are set
MIN_SIZE = 300 * 2**20  # mkfs.xfs refuses smaller file systems
_counter = itertools.count()


class DeviceError(ValueError):
    """The device cannot be set up: missing tools, no root, no room. Says what to install or change."""


class RefusedSetting(ValueError):
    """The kernel refused a queue setting: the configuration is INVALID on this device."""


@dataclass
class Target:
    device: str
    kind: str  # "loop" or "block"
    backing_file: str | None = None
    entries: list[int] = field(default_factory=list)  # SetupLog entries to close when done

    @property
    def name(self) -> str:
        return Path(self.device).name

    def queue(self, attribute: str) -> Path:
        return Path("/sys/block") / self.name / "queue" / attribute

    def describe(self) -> dict[str, Any]:
        """The device part of a measurement's environment fingerprint."""
        sysfs = Path("/sys/block") / self.name
        info: dict[str, Any] = {"device": self.device, "device_kind": self.kind}
        try:
            info["device_size_bytes"] = int((sysfs / "size").read_text()) * 512
        except OSError:
            pass
        for key, node in (("device_model", "device/model"), ("device_vendor", "device/vendor")):
            try:
                info[key] = (sysfs / node).read_text().strip()
            except OSError:
                pass
        if self.kind == "loop":
            info["loop_direct_io"] = _read(sysfs / "loop" / "dio") == "1"
            info["loop_backing_file"] = self.backing_file
            info["loop_backing_fs"] = _filesystem_of(Path(self.backing_file).parent) if self.backing_file else None
        return info


def require(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise DeviceError(f"{tool} is not installed: apt-get install {package} (make setup-devices does)")
    return path


def require_root() -> None:
    if os.geteuid() != 0:
        raise DeviceError("the device runner needs root (losetup, mkfs, mount, sysfs): run it as root or with sudo")


def open_loop(shell: Shell, log: SetupLog, directory: Path, size_bytes: int) -> Target:
    """A loop device over a new sparse file in ``directory``, attached with direct I/O so that
    measurements see the device, not the host's page cache."""
    if size_bytes < MIN_SIZE:
        raise DeviceError(f"a loop device of {size_bytes} bytes is too small: mkfs.xfs needs at least 300 MiB")
    if not shell.dry_run:
        require_root()
        require("losetup", "mount")
        directory.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(directory).free
        if free < size_bytes:
            raise DeviceError(f"{directory} has {free >> 20} MiB free, less than the {size_bytes >> 20} MiB loop file")
    path = directory / f"storetune-{os.getpid()}-{next(_counter)}.img"
    target = Target("/dev/loopN", "loop", str(path))
    target.entries.append(log.record("file", path=str(path)))
    shell.run(["truncate", "-s", str(size_bytes), str(path)])
    entry = log.record("loop", file=str(path), device=None)
    target.entries.append(entry)
    result = shell.run(["losetup", "--find", "--show", "--direct-io=on", str(path)], timeout=60)
    if not shell.dry_run:
        target.device = result.stdout.strip()
        log.update(entry, device=target.device)
    return target


def close_loop(shell: Shell, log: SetupLog, target: Target) -> None:
    """Detach the loop device and remove its file. If it stays attached, both stay in the setup log
    (the next start detaches it and removes the file) and that is said."""
    file_entry, loop_entry = target.entries
    result = shell.run(["losetup", "-d", target.device], check=False, timeout=60)
    if not shell.dry_run and not loop_detached(target.device, str(target.backing_file)):
        logger.warning("could not detach %s (%s): %s (the next start tries again)", target.device,
                       target.backing_file, result.tail() or "still in use")
        return
    log.done(loop_entry)
    if shell.dry_run:
        shell.run(["rm", "-f", str(target.backing_file)])
    else:
        Path(target.backing_file).unlink(missing_ok=True)
    log.done(file_entry)


def open_block(shell: Shell, path: str, allow: list[str]) -> Target:
    """An allow-listed, unused block device (see runners.device.safety)."""
    if not shell.dry_run:
        require_root()
    try:
        device = check_block_device(path, allow)
    except UnsafeDevice as e:
        raise DeviceError(str(e)) from None
    size = int(_read(Path("/sys/class/block") / Path(device).name / "size") or 0) * 512
    if size and size < MIN_SIZE:
        raise DeviceError(f"{path} holds {size >> 20} MiB; the device runner needs at least 300 MiB")
    return Target(device, "block")


@dataclass(frozen=True)
class QueueChange:
    entry: int  # in the SetupLog
    path: Path
    original: str


def apply_queue(shell: Shell, log: SetupLog, target: Target, settings: Mapping[str, Any]) -> list[QueueChange]:
    """Set scheduler, read_ahead_kb and nr_requests, recording each original value first.
    Raises RefusedSetting if the kernel says no; the changes made so far are in ``applied``."""
    applied: list[QueueChange] = []
    attributes = [attribute for attribute in QUEUE_ATTRIBUTES if attribute in settings]
    # every original is read before anything is written: a new scheduler resets nr_requests
    originals = {attribute: current_queue_value(shell, target.queue(attribute)) for attribute in attributes}
    for attribute in attributes:
        path, original = target.queue(attribute), originals[attribute]
        entry = log.record("sysfs", path=str(path), original=original, backing_file=target.backing_file)
        applied.append(QueueChange(entry, path, original))
        try:
            shell.write(path, str(settings[attribute]))
        except OSError as e:
            restore_queue(shell, log, applied)
            choices = f" (this device offers: {shell.read(path)})" if attribute == "scheduler" else ""
            raise RefusedSetting(
                f"the kernel refused {attribute}={settings[attribute]} on {target.device}: {e.strerror}{choices}"
            ) from None
    return applied


def restore_queue(shell: Shell, log: SetupLog, applied: list[QueueChange]) -> None:
    """Put the queue settings back, the scheduler first (writing it resets nr_requests), then the
    last one set first; one that fails is tried again after the others. One that still fails stays
    in the setup log, so the next start tries again, and is said."""
    order = undo_order(applied, lambda change: str(change.path))
    failed = [change for change in order if _restore(shell, log, change) is not None]
    for change in failed:
        error = _restore(shell, log, change)
        if error is not None:
            logger.warning("could not restore %s = %s: %s (the next start tries again)", change.path,
                           change.original, error.strerror or error)


def _restore(shell: Shell, log: SetupLog, change: QueueChange) -> OSError | None:
    if change.original:
        try:
            shell.write(change.path, change.original)
        except OSError as e:
            return e
    log.done(change.entry)
    return None


def current_queue_value(shell: Shell, path: Path) -> str:
    """The value to restore: for the scheduler, the bracketed one of "none [mq-deadline] kyber"."""
    text = shell.read(path)
    if path.name == "scheduler" and "[" in text:
        return text[text.index("[") + 1 : text.index("]")]
    return text


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _filesystem_of(directory: Path) -> str | None:
    try:
        return subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", str(directory)], capture_output=True,
                              text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None
