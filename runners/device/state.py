"""What a device runner has set up (loop devices, mounts, sysfs values, files), written to disk
before each step, so that the next start can undo what a runner killed with SIGKILL left behind.

One JSON file per process in the state directory (default /run/storetune, which a reboot empties,
as it empties loop devices and mounts). A file whose process is gone is reaped: its entries are
undone in reverse order.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from runners.device.shell import Shell

DEFAULT_STATE_DIR = "/run/storetune"


def state_dir() -> Path:
    return Path(os.environ.get("STORETUNE_STATE_DIR", DEFAULT_STATE_DIR))


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot: with the pid, it names one process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class SetupLog:
    """This process's record of what it set up and has not undone yet."""

    def __init__(self, directory: Path | None = None, dry_run: bool = False):
        self.dry_run = dry_run  # a dry run keeps its log in memory: it touches nothing
        self.directory = directory or state_dir()
        self.path = self.directory / f"device-{os.getpid()}.json"
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
        self._entries = [e for e in self._entries if e["id"] != entry]
        self._save()

    def _save(self) -> None:
        if self.dry_run:
            return
        if not self._entries:
            self.path.unlink(missing_ok=True)
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "start": _start_time(os.getpid()), "entries": self._entries}))
        tmp.replace(self.path)  # atomic: a kill never leaves half a file


def reap(shell: Shell, directory: Path | None = None) -> list[str]:
    """Undo what dead runners left set up; returns one line per action taken."""
    directory = directory or state_dir()
    done: list[str] = []
    for path in sorted(directory.glob("device-*.json")) if directory.exists() else []:
        try:
            state = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if _start_time(state["pid"]) == state.get("start") and state["pid"] != os.getpid():
            continue  # its runner is alive
        for entry in reversed(state["entries"]):
            done += undo(shell, entry)
        path.unlink(missing_ok=True)
    return done


def undo(shell: Shell, entry: dict[str, Any]) -> list[str]:
    """Undo one recorded action if it is still in effect."""
    kind = entry["kind"]
    if kind == "process":
        return _kill_group(entry["pid"], entry.get("start"))
    if kind == "mount" and is_mounted(entry["path"]):
        result = shell.run(["umount", entry["path"]], check=False, timeout=60)
        if not result.ok:
            shell.run(["umount", "-l", entry["path"]], check=False, timeout=60)
        return [f"unmounted {entry['path']}"]
    if kind == "sysfs" and Path(entry["path"]).exists() and entry.get("original") is not None:
        try:
            shell.write(entry["path"], entry["original"])
        except OSError:
            return []
        return [f"restored {entry['path']} = {entry['original']}"]
    if kind == "loop" and entry.get("device") and loop_backing_file(entry["device"]) == entry["file"]:
        shell.run(["losetup", "-d", entry["device"]], check=False, timeout=60)
        return [f"detached {entry['device']}"]
    if kind in ("file", "dir"):
        path = Path(entry["path"])
        try:
            path.unlink() if kind == "file" else path.rmdir()
        except FileNotFoundError:
            return []
        except OSError:
            return []
        return [f"removed {path}"]
    return []


def _kill_group(pid: int, start: str | None) -> list[str]:
    """Kill the process group a dead runner started (its benchmark), if that process still runs."""
    if start is None or _start_time(pid) != start:
        return []
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return []
    for _ in range(100):  # wait until it is gone and its files are closed
        if _start_time(pid) != start:
            break
        time.sleep(0.05)
    return [f"killed process group {pid}"]


def is_mounted(path: str) -> bool:
    target = os.path.realpath(path)
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        if line.split()[4] == target:
            return True
    return False


def loop_backing_file(device: str) -> str | None:
    node = Path("/sys/block") / Path(device).name / "loop" / "backing_file"
    try:
        return node.read_text().strip()
    except OSError:
        return None
