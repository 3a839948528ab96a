"""Host-wide settings a device measurement changes (vm.dirty_bytes, ASLR for Filebench), one measurement's
at a time on a host: an flock shared by every device run and held exclusively by the one that changes them,
with a journal of the originals that the next holder, or the reaper (state.py), restores after a SIGKILL."""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from storetune.runners.base import HostUnavailable
from storetune.runners.device.shell import Shell

logger = logging.getLogger(__name__)

# Host-wide, like the settings, so not in a state directory; in /run, which only root can write (not the
# world-writable /run/lock: root trusts what the file journals)
HOST_LOCK = "/run/storetune-host-settings.lock"
HOST_SETTINGS = frozenset({  # what a measurement may change host-wide, and so what a journal may restore
    *(f"/proc/sys/vm/{kind}_{unit}" for kind in ("dirty", "dirty_background") for unit in ("bytes", "ratio")),
    "/proc/sys/kernel/randomize_va_space",
})
POLL_S = 0.05
# ftrace is one per host: a traced run holds this from its check that ftrace is free until it has put every
# setting back and unmounted what it mounted, so that two StoreTunes never both find it free and then share
# (and split) one ring buffer, or unmount tracefs under each other; the reaper takes it to put back what a
# killed traced run left. Beside the host-settings lock, in /run.
FTRACE_LOCK = Path("/run/storetune-ftrace.lock")
FTRACE_ROOTS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")  # where tracefs is mounted


def host_lock_path() -> Path:
    return Path(os.environ.get("STORETUNE_HOST_LOCK", HOST_LOCK))


class HostBusy(HostUnavailable):
    """Another measurement on this host kept the host-wide settings for longer than a run may wait."""


class FtraceBusy(HostUnavailable):
    """Another traced run on this host kept ftrace for longer than the wait allowed."""


class HostLockRefused(HostUnavailable, OSError):
    """The host-settings lock file cannot be used (planted, shared, unwritable): the host's fault, not the
    configuration's. An OSError too, with the errno, for the reaper that reports it."""


def open_lock(path: Path, what: str) -> int:
    """Open a lock file root owns and no one else can write (a planted file or link is refused with
    HostLockRefused, naming ``what``)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise HostLockRefused(e.errno, f"cannot open the {what} {path}: {e.strerror}") from None
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o022 or not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise HostLockRefused(errno.EPERM, f"refusing the {what} {path}: owned by uid {info.st_uid}, mode "
                              f"{info.st_mode & 0o777:o}, {info.st_nlink} link(s) (it must be a file of this user's "
                              "alone, writable by no one else)")
    return fd


def flock_by(fd: int, mode: int, deadline: float) -> bool:
    """flock(2) ``mode`` on ``fd``, polled until ``time.monotonic()`` passes ``deadline`` (flock has no
    timeout of its own); False if it never came."""
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)


def take_ftrace(wait_s: float) -> int:
    """The ftrace lock, exclusively, waited for up to ``wait_s``: a descriptor whose closing releases it.
    FtraceBusy if another traced run kept it longer; HostLockRefused for a lock file that is not root's alone."""
    fd = open_lock(FTRACE_LOCK, "ftrace lock")
    if not flock_by(fd, fcntl.LOCK_EX, time.monotonic() + wait_s):
        os.close(fd)
        raise FtraceBusy(f"another traced run on this host kept ftrace ({FTRACE_LOCK}) for more than {wait_s:g} s")
    return fd


def in_ftrace(path: str) -> bool:
    """Whether ``path`` is a tracefs root or a setting under one."""
    return any(path == root or path.startswith(root + "/") for root in FTRACE_ROOTS)


class HostSettings:
    """The host-wide settings a measurement may change (vm.dirty_bytes, ASLR for Filebench) belong to every
    measurement on the host, whichever StoreTune or worker runs it. A run that changes them holds this lock
    exclusively; every other run shares it: so no run measures under another's setting, and no run reads
    another's setting as the host's own and "restores" it afterwards. A turnstile beside the lock keeps a
    stream of overlapping shared holders from starving a run that waits to hold it exclusively. The lock
    file journals the originals while they are changed: a holder killed with SIGKILL frees the lock at once,
    and whoever takes it next, shared or exclusive, first puts back what the journal holds. flock(2),
    released by the kernel when its holder dies, is the whole mechanism: written by hand. One hold at a time
    per object; a second hold in the same process would wait for the first."""

    def __init__(self, shell: Shell, path: Path | None = None, allowed: frozenset[str] = HOST_SETTINGS):
        self.shell = shell
        self.path = path or host_lock_path()
        self.allowed = allowed
        self._fd: int | None = None
        self._exclusive = False
        self._journal: dict[str, str] = {}
        self.restored: dict[str, str] = {}  # what this object put back after a killed holder

    @contextmanager
    def hold(self, *, exclusive: bool, timeout_s: float) -> Iterator[float]:
        """Hold the lock (exclusively to change settings); yields the seconds waited for it. HostBusy after
        ``timeout_s``. A dry run touches nothing."""
        if self.shell.dry_run:
            yield 0.0
            return
        if self._fd is not None:
            raise RuntimeError("HostSettings.hold is not reentrant")
        started = time.monotonic()
        deadline = started + timeout_s
        fd = self._open(self.path)
        turnstile = None
        try:
            turnstile = self._open(self.path.with_name(self.path.name + ".turnstile"))
            self._fd = fd
            if exclusive:
                # the turnstile is held while waiting: no new shared holder gets in, the current ones finish
                self._flock(turnstile, fcntl.LOCK_EX, deadline, timeout_s)
                self._flock(fd, fcntl.LOCK_EX, deadline, timeout_s)
                fcntl.flock(turnstile, fcntl.LOCK_UN)
                self._exclusive = True
                self._recover()
            else:
                while True:
                    self._flock(turnstile, fcntl.LOCK_EX, deadline, timeout_s)  # passed through, not held
                    fcntl.flock(turnstile, fcntl.LOCK_UN)
                    self._flock(fd, fcntl.LOCK_SH, deadline, timeout_s)
                    if not self._journal_text():
                        break
                    # a killed holder left settings changed: put them back under the exclusive lock, then share
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    self._flock(fd, fcntl.LOCK_EX, deadline, timeout_s)
                    self._recover()
                    fcntl.flock(fd, fcntl.LOCK_UN)  # flock converts by unlocking anyway: the journal is read again
            yield time.monotonic() - started
        finally:
            self._fd, self._exclusive = None, False
            os.close(fd)
            if turnstile is not None:
                os.close(turnstile)

    @staticmethod
    def _open(path: Path) -> int:
        return open_lock(path, "host-settings lock")

    def _flock(self, fd: int, mode: int, deadline: float, timeout_s: float) -> None:
        if not flock_by(fd, mode, deadline):
            raise HostBusy(f"another measurement on this host kept its host-wide settings (vm.dirty_bytes, "
                           f"ASLR; {self.path}) for more than {timeout_s:g} s; no configuration is blamed for the wait")

    def _journal_text(self) -> str:
        return os.pread(self._fd, 1 << 16, 0).decode(errors="replace").strip()

    def _read_journal(self) -> dict[str, str]:
        text = self._journal_text()
        if not text:
            return {}
        try:
            journal = json.loads(text)
        except ValueError:
            journal = None
        if not isinstance(journal, dict) or not all(isinstance(v, str) for v in journal.values()):
            logger.warning("%s holds an unreadable journal (%r): nothing restored from it", self.path, text[:80])
            return {}
        return journal

    def _recover(self) -> None:
        """Put back what a killed holder journalled and never restored (``restored``: path -> value)."""
        for path, original in self._read_journal().items():
            if path not in self.allowed or not re.fullmatch(r"-?\d+", original):
                logger.warning("%s journals %s = %r, which is not a host setting StoreTune changes: left alone",
                               self.path, path, original)
                continue
            try:
                self.shell.write(path, original)
            except OSError as e:  # kept, it would fail every later measurement on the host: said, and dropped
                logger.warning("could not restore %s = %s, journalled by a measurement that was killed: %s",
                               path, original, e)
                continue
            self.restored[path] = original
            logger.warning("restored %s = %s, left changed by a measurement that was killed", path, original)
        self._save({})

    @contextmanager
    def changed(self, path: Path, value: str, restore: Path | None = None) -> Iterator[str]:
        """``path`` set to ``value`` for the block, under the exclusive lock; ``restore`` (default ``path``)
        journalled first and put back after. Yields the original."""
        restore = restore or path
        if not self.shell.dry_run and not (self._exclusive and {str(path), str(restore)} <= self.allowed):
            raise RuntimeError(f"{path} changed without holding HostSettings exclusively, or not a host setting")
        original = self.shell.read(restore)
        self._save({**self._journal, str(restore): original})
        try:
            self.shell.write(path, value)
            yield original
        finally:
            self.shell.write(restore, original)  # if this fails, the journal keeps it for the next holder
            self._save({k: v for k, v in self._journal.items() if k != str(restore)})

    def pending(self, path: Path) -> bool:
        """Whether ``path`` is journalled as changed and not restored yet."""
        return str(path) in self._journal

    def _save(self, journal: dict[str, str]) -> None:
        self._journal = journal
        if self._fd is None:
            return
        # padded to the old length, then cut: a kill between the two leaves valid JSON and trailing blanks
        data = json.dumps(journal).encode() if journal else b""
        old = os.fstat(self._fd).st_size
        padded = data.ljust(old)
        if os.pwrite(self._fd, padded, 0) != len(padded):
            raise OSError(errno.EIO, f"a short write to the host-settings journal {self.path}")
        os.ftruncate(self._fd, len(data))
        os.fsync(self._fd)


def host_wide(path: str) -> bool:
    """A setting of the whole host (procfs), not of one device's queue (sysfs)."""
    return path.startswith("/proc/sys/")
