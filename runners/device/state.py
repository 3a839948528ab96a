"""What a device runner has set up (loop devices, mounts, sysfs values, files, its work folder),
written to disk before each step, so that the next start can undo what a runner killed with
SIGKILL left behind.

One JSON file per setup log (per runner) in the state directory (default /run/storetune, which a
reboot empties, as it empties loop devices and mounts). A file whose process is gone is reaped: its
entries are undone in reverse order. An entry stays in the file until its undo succeeded or there
is nothing left to undo (the mount, the loop device or the sysfs node is gone); what could not be
undone is said, and the next start tries again.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import json
import logging
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from storetune.runners.device.host import (
    FtraceBusy, HostBusy, HostLockRefused, HostSettings, host_wide, in_ftrace, take_ftrace,
)
from storetune.runners.device.shell import CommandTimeout, Shell

logger = logging.getLogger(__name__)
DEFAULT_STATE_DIR = "/run/storetune"
KILL_WAIT_S = 5.0  # how long a killed process group may take to go (fio closing its files)
_logs = itertools.count()
T = TypeVar("T")


def state_dir() -> Path:
    return Path(os.environ.get("STORETUNE_STATE_DIR", DEFAULT_STATE_DIR))


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot: with the pid, it names one process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class SetupLog:
    """This runner's record of what it set up and has not undone yet."""

    def __init__(self, directory: Path | None = None, dry_run: bool = False):
        self.dry_run = dry_run  # a dry run keeps its log in memory: it touches nothing
        self.directory = directory or state_dir()
        self.start = _start_time(os.getpid())
        # pid and start time name this process; the counter, this log among the process's runners
        self.path = self.directory / f"device-{os.getpid()}-{self.start}-{next(_logs)}.json"
        self._entries: list[dict[str, Any]] = []
        self._next = 0

    def record(self, kind: str, **fields: Any) -> int:
        """Note an action before taking it; returns the entry's id for ``done``."""
        self._next += 1
        self._entries.append({"id": self._next, "kind": kind, **fields})
        self._save()
        return self._next

    def record_process(self, pid: int) -> int:
        """A process this runner started (its own process group), to kill if the runner dies."""
        return self.record("process", pid=pid, start=_start_time(pid))

    def update(self, entry: int, **fields: Any) -> None:
        for e in self._entries:
            if e["id"] == entry:
                e.update(fields)
        self._save()

    def done(self, entry: int) -> None:
        """The action is undone (or was never taken): forget it."""
        self._entries = [e for e in self._entries if e["id"] != entry]
        self._save()

    def _save(self) -> None:
        if self.dry_run:
            return
        if not self._entries:
            self.path.unlink(missing_ok=True)
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        _write(self.path, {"pid": os.getpid(), "start": self.start, "entries": self._entries})


def _write(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(path)  # atomic: a kill never leaves half a file


# --- the reaper ------------------------------------------------------------------------------------
class UndoFailed(RuntimeError):
    """A recorded action is still in effect; the message says which and why, in one line."""


@dataclass
class Reaped:
    done: list[str] = field(default_factory=list)  # one line per action undone
    failed: list[str] = field(default_factory=list)  # one line per action still in effect (still recorded)


def reap(shell: Shell, directory: Path | None = None) -> Reaped:
    """Undo what dead runners left set up. What could not be undone stays recorded for the next
    start; a state file that cannot be read is left in place. Both are said in ``failed``."""
    directory = directory or state_dir()
    reaped = Reaped()
    if not directory.is_dir():
        return reaped
    with _locked(directory):  # two starts at once: one reaps, the other then finds nothing
        dead, held = [], set()
        for path in sorted(directory.glob("device-*.json")):
            try:
                state = json.loads(path.read_text())
                pid, entries = int(state["pid"]), list(state["entries"])
                if not all(isinstance(e, dict) for e in entries):
                    raise TypeError("its entries are not objects")
            except FileNotFoundError:
                continue  # its runner finished meanwhile
            except (OSError, ValueError, KeyError, TypeError) as e:
                why = _why(e)
                reaped.failed.append(f"could not read {path}: {why}; left in place, nothing it records was undone")
                continue
            if _start_time(pid) == state.get("start"):  # its runner is alive (this process's too)
                held |= {r for e in entries for r in _resources(e)}
            else:
                dead.append((path, state, entries))
        for path, state, entries in dead:
            # a later runner with the same pid reuses its names (run-<pid>, storetune-<pid>-<n>.img):
            # what a live runner records now is its own, never the dead one's to undo
            entries = [e for e in entries if not (set(_resources(e)) & held)]
            kept = _undo_all(shell, entries, reaped)
            if kept:
                _write(path, {**state, "entries": kept})
            else:
                path.unlink(missing_ok=True)
    return reaped


def _resources(entry: dict[str, Any]) -> list[str]:
    """What an entry names on the machine: paths and devices."""
    return [str(entry[k]) for k in ("path", "file", "device") if entry.get(k)]


def reap_and_say(shell: Shell, directory: Path | None = None) -> Reaped:
    """Reap at a runner's start, saying in the log what was cleaned up and what was not."""
    reaped = reap(shell, directory)
    for line in reaped.done:
        logger.warning("cleaned up after a runner that was killed: %s", line)
    for line in reaped.failed:
        logger.warning("a killed runner's setup is still in effect: %s (the next start tries again)", line)
    return reaped


def undo_order(items: list[T], path_of: Callable[[T], str | None]) -> list[T]:
    """Last done, first undone; but a queue's scheduler is restored before the queue's other
    settings, because writing a scheduler resets nr_requests to that scheduler's default."""
    order = list(reversed(items))
    for item in list(order):
        path = path_of(item)
        if path is None or Path(path).name != "scheduler":
            continue
        queue = Path(path).parent
        first = next(j for j, other in enumerate(order) if path_of(other) and Path(path_of(other)).parent == queue)
        order.insert(first, order.pop(order.index(item)))
    return order


def _undo_all(shell: Shell, entries: list[dict[str, Any]], reaped: Reaped) -> list[dict[str, Any]]:
    """Undo entries last first (a queue's scheduler before its other settings); what fails is tried
    once more after the rest. Returns the entries still in effect, in their recorded order."""
    failed: list[dict[str, Any]] = []
    for entry in undo_order(entries, lambda e: e.get("path") if e.get("kind") == "sysfs" else None):
        try:
            line = undo(shell, entry)
        except UndoFailed:
            failed.append(entry)
            continue
        if line:
            reaped.done.append(line)
    kept: list[dict[str, Any]] = []
    for entry in failed:
        try:
            line = undo(shell, entry)
        except UndoFailed as e:
            reaped.failed.append(str(e))
            kept.append(entry)
            continue
        if line:
            reaped.done.append(line)
    return kept[::-1]


def undo(shell: Shell, entry: dict[str, Any]) -> str | None:
    """Undo one recorded action if it is still in effect. Returns what was done, or None when there
    was nothing left to undo; raises UndoFailed when the action stays in effect."""
    handler = _UNDO.get(entry.get("kind", ""))
    if handler is None:
        raise UndoFailed(f"could not undo {json.dumps(entry)}: unknown kind")
    try:
        return handler(shell, entry)
    except KeyError as e:
        raise UndoFailed(f"could not undo {json.dumps(entry)}: it has no {e}") from None
    except (CommandTimeout, OSError) as e:
        what = entry.get("path") or entry.get("file") or entry.get("pid")
        raise UndoFailed(f"could not undo {entry['kind']} {what}: {_why(e)}") from None


def _undo_process(shell: Shell, entry: dict[str, Any]) -> str | None:
    """Kill the process group a dead runner started (its benchmark), if it still runs."""
    pid, start = int(entry["pid"]), entry.get("start")
    if start is None:
        return None  # it had ended before it could be recorded
    now = _start_time(pid)
    if now is not None and now != start:
        return None  # the pid is another process's now (while our group lived, its id could not be reused)
    if not _group(pid):
        return None
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    except OSError as e:
        raise UndoFailed(f"could not kill process group {pid}: {_why(e)}") from None
    deadline = time.monotonic() + KILL_WAIT_S
    while _group(pid):  # wait until it is gone and its files are closed (they keep the mount busy)
        if time.monotonic() > deadline:
            raise UndoFailed(f"could not kill process group {pid}: it still runs {KILL_WAIT_S:g} s after SIGKILL")
        time.sleep(0.05)
    return f"killed process group {pid}"


def _undo_mount(shell: Shell, entry: dict[str, Any]) -> str | None:
    with _ftrace_held(entry["path"], f"unmount {entry['path']}"):
        return unmount(shell, entry["path"])


@contextmanager
def _ftrace_held(path: str, what: str) -> Iterator[None]:
    """Around the reaper's undo of a tracefs setting or mount: the ftrace lock, not waited for. A live
    traced run holds it, and its clock, tracer or mount must not change beneath it: the next start tries."""
    if not in_ftrace(path):
        yield
        return
    try:
        fd = take_ftrace(0)
    except FtraceBusy:
        raise UndoFailed(f"could not {what} yet: another traced run on this host holds ftrace") from None
    except HostLockRefused as e:
        raise UndoFailed(f"could not {what}: {e}") from None
    try:
        yield
    finally:
        os.close(fd)


UNMOUNT_PATIENCE_S = 3.0


def unmount(shell: Shell, path: str) -> str | None:
    """Unmount ``path`` (lazily if a straggler holds it); None if it was not mounted, UndoFailed if it
    still is. The runner's teardown and the reaper both unmount through here."""
    if not is_mounted(path):
        return None
    result = shell.run(["umount", path], check=False, timeout=120)
    deadline = time.monotonic() + UNMOUNT_PATIENCE_S
    while is_mounted(path) and time.monotonic() < deadline:  # a benchmark just killed lets go a moment later
        time.sleep(0.1)
        result = shell.run(["umount", path], check=False, timeout=120)
    if not is_mounted(path):
        return f"unmounted {path}"
    lazy = shell.run(["umount", "-l", path], check=False, timeout=60)  # a straggler holds it open
    if not is_mounted(path):
        return f"unmounted {path} (lazily: {_first_line(result.tail()) or 'busy'})"
    raise UndoFailed(f"could not unmount {path}: {_first_line(lazy.tail() or result.tail()) or 'still mounted'}")


def _undo_sysfs(shell: Shell, entry: dict[str, Any]) -> str | None:
    path, original = entry["path"], entry.get("original")
    if not original:
        return None  # nothing was read, so nothing was changed
    if not Path(path).exists():
        return None  # its device is gone, and the setting with it
    if entry.get("backing_file") and entry["backing_file"] not in _backing(Path(path).parent.parent.name):
        return None  # the loop device it was set on was detached; that name is another one's now
    if host_wide(path):
        # Through the lock, never beneath a live measurement. Its journal has what the dead runner changed and
        # did not restore, unless a later holder restored it already: a journalled entry is the journal's to
        # restore. An entry never journalled (killed before it was; or a runner older than the journal) or
        # whose restore failed is restored from the setup log, as any sysfs value.
        host = HostSettings(shell)
        try:
            with host.hold(exclusive=True, timeout_s=0):
                said = [f"{p} = {v}" for p, v in host.restored.items()]  # the whole journal, said once
                if path not in host.restored and not (entry.get("journalled") and not entry.get("restore_failed")):
                    shell.write(path, original)
                    said.append(f"{path} = {original}")
                return f"restored {', '.join(said)}" if said else None
        except HostBusy:
            raise UndoFailed(f"could not check {path} yet (to restore {original}): another measurement on this host "
                             "holds its host-wide settings") from None
        except OSError as e:
            raise UndoFailed(f"could not restore {path} = {original}: {_why(e)}") from None
    try:
        with _ftrace_held(path, f"restore {path} = {original}"):
            shell.write(path, original)
    except OSError as e:
        raise UndoFailed(f"could not restore {path} = {original}: {_why(e)}") from None
    return f"restored {path} = {original}"


def _undo_loop(shell: Shell, entry: dict[str, Any]) -> str | None:
    """Detach the loop device over the recorded file: the recorded device, or the one the runner
    attached before it could record which (found by its backing file)."""
    file = entry["file"]
    devices = sorted({*([entry["device"]] if entry.get("device") else []), *loops_backed_by(file)})
    devices = [d for d in devices if file in _backing(Path(d).name)]
    for device in devices:
        result = shell.run(["losetup", "-d", device], check=False, timeout=60)
        if not loop_detached(device, file):
            why = _first_line(result.tail()) or "still in use (the kernel detaches it when it is released)"
            raise UndoFailed(f"could not detach {device} ({file}): {why}")
    return f"detached {', '.join(devices)}" if devices else None


def _undo_path(shell: Shell, entry: dict[str, Any]) -> str | None:
    path = entry["path"]
    try:
        if entry["kind"] == "file":
            os.unlink(path)
        elif entry["kind"] == "dir":
            os.rmdir(path)
        else:
            remove_tree(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise UndoFailed(f"could not remove {path}: {_why(e)}") from None
    return f"removed {path}"


def _undo_blktrace(shell: Shell, entry: dict[str, Any]) -> str | None:
    """Tear down the kernel's block trace on a device (a blktrace killed with SIGKILL leaves it set up, and
    the device then refuses the next one). Not once the loop device is another file's."""
    device = entry["device"]
    if not (Path("/sys/kernel/debug/block") / Path(device).name / "dropped").exists():
        return None  # no trace is set up on it
    if entry.get("backing_file") and entry["backing_file"] not in _backing(Path(device).name):
        return None  # the loop device was detached; that name is another one's now
    result = shell.run(["blktrace", "-k", "-d", device], check=False, timeout=30)
    if (Path("/sys/kernel/debug/block") / Path(device).name / "dropped").exists():
        raise UndoFailed(f"could not stop the block trace on {device}: {_first_line(result.tail()) or 'still set up'}")
    return f"stopped the block trace on {device}"


_UNDO: dict[str, Callable[[Shell, dict[str, Any]], str | None]] = {
    "process": _undo_process, "mount": _undo_mount, "sysfs": _undo_sysfs, "loop": _undo_loop,
    "file": _undo_path, "dir": _undo_path, "tree": _undo_path, "blktrace": _undo_blktrace,
}


# --- what is in effect ---------------------------------------------------------------------------
def remove_tree(path: str | Path) -> None:
    """Remove the directory at exactly ``path`` and everything in it. A symlink at ``path`` is
    refused; symlinks inside are removed, never followed; nothing is removed while a file system is
    mounted at or under it, and the walk never crosses into another file system."""
    path = os.path.abspath(path)
    real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))  # the last part unresolved
    for mountpoint in mount_points():
        if mountpoint == real or mountpoint.startswith(real + "/"):
            raise OSError(errno.EBUSY, f"{mountpoint} is still mounted")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        _empty(fd, os.fstat(fd).st_dev, path)
    finally:
        os.close(fd)
    os.rmdir(path)


def _empty(fd: int, device: int, where: str) -> None:
    with os.scandir(fd) as it:
        children = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    for name, is_dir in children:
        try:
            if not is_dir:
                os.unlink(name, dir_fd=fd)
                continue
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            try:
                if os.fstat(child).st_dev != device:
                    raise OSError(errno.EBUSY, f"{where}/{name} is another file system")
                _empty(child, device, f"{where}/{name}")
            finally:
                os.close(child)
            os.rmdir(name, dir_fd=fd)
        except FileNotFoundError:
            continue


def mount_points() -> list[str]:
    """Every mount point of this mount namespace (octal escapes decoded)."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [_unescape(line.split()[4]) for line in lines]


def is_mounted(path: str) -> bool:
    return os.path.realpath(path) in mount_points()


def loop_backing_file(device: str) -> str | None:
    node = Path("/sys/block") / Path(device).name / "loop" / "backing_file"
    try:
        return node.read_text().strip()
    except OSError:
        return None


def loops_backed_by(file: str) -> list[str]:
    """The loop devices attached to ``file`` (also after it was deleted)."""
    return [f"/dev/{node.name}" for node in Path("/sys/block").glob("loop*") if file in _backing(node.name)]


def _backing(name: str) -> tuple[str, ...]:
    """What loop device ``name`` is attached to, with and without the kernel's ' (deleted)'."""
    found = loop_backing_file(name)
    return () if found is None else (found, found.removesuffix(" (deleted)"))


def loop_detached(device: str, file: str, wait_s: float = 1.0) -> bool:
    """Whether ``device`` is no longer attached to ``file``, waiting a moment: a device someone
    still holds (blkid probing it) is detached by the kernel when they let go."""
    deadline = time.monotonic() + wait_s
    while file in _backing(Path(device).name):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _group(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _unescape(field: str) -> str:
    """mountinfo writes a space, tab, newline or backslash in a path as an octal escape (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def _why(e: BaseException) -> str:
    return (e.strerror if isinstance(e, OSError) and e.strerror else str(e)).replace("\n", " ")


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""
