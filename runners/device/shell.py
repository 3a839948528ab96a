"""The system commands and sysfs writes the device runner makes, in one place, so that
``--dry-run`` can print every one of them and touch nothing."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storetune.runners.base import kill_group

STOP_GRACE_S = 15.0  # how long a command told to stop (SIGINT) may take to end before it is killed


def _kill_quietly(proc: subprocess.Popen, flag: threading.Event | None) -> None:
    """From a timer: SIGKILL to the command's group; the reader then sees its output end (not ``kill_group``, whose
    ``communicate`` would read the pipes beside the reader)."""
    if flag is not None:
        flag.set()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, chars: int = 600) -> str:
        """What the tool said, for a trial's reason: stderr (or stdout) up to a usage dump if it
        printed one (mkfs.xfs explains itself in its first line, then prints its whole usage)."""
        text = self.stderr.strip() or self.stdout.strip()
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.strip().lower().startswith("usage:") and i > 0:
                return "\n".join(lines[:i]).strip()[:chars]
        if len(text) <= chars:
            return text
        tail = text[-chars:]
        return tail[tail.find("\n") + 1 :] if "\n" in tail else tail  # whole lines only


class CommandFailed(RuntimeError):
    """The error first, the command after: a trial's reason is read in a narrow table column."""

    def __init__(self, result: Result):
        said = result.tail()
        super().__init__(f"{Path(result.argv[0]).name} failed (exit {result.returncode})" + (f": {said}" if said else "")
                         + f"; command: {shlex.join(result.argv)}")
        self.result = result


class CommandTimeout(RuntimeError):
    def __init__(self, argv: Sequence[str], timeout_s: float):
        super().__init__(f"{shlex.join(argv)} did not finish in {timeout_s:g} s")
        self.argv, self.timeout_s = tuple(argv), timeout_s


class Shell:
    """Runs commands for real. A killed or timed-out command takes its whole process group with it.
    With a ``log`` (a SetupLog), every process is recorded while it runs, so that if this process is
    killed, the next start can kill what it left running (fio would keep a mount busy)."""

    dry_run = False

    def __init__(self, log: Any = None):
        self.log = log

    def note(self, line: str) -> None:
        """A comment on what comes next, for a reader of the dry run; a real run has no reader."""

    def run(self, argv: Sequence[str], *, timeout: float | None = None, check: bool = True,
            watch: Callable[[str], bool] | None = None) -> Result:
        """``watch`` is given each line of the command's output as it comes; where it returns False, the command's
        group is sent SIGINT once (fio then ends its jobs and prints its report) and the command is waited for."""
        started = time.monotonic()
        with _signals_unblocked():
            proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)
        entry = self.log.record_process(proc.pid) if self.log is not None else None
        try:
            if watch is not None:
                return self._watch(proc, argv, timeout, check, started, watch)
            return self._wait(proc, argv, timeout, check, started)
        finally:
            if entry is not None:
                self.log.done(entry)

    def _watch(self, proc: subprocess.Popen, argv: Sequence[str], timeout: float | None, check: bool,
               started: float, watch: Callable[[str], bool]) -> Result:
        """Read the output line by line (stderr in a thread, so neither pipe fills), as ``_wait`` otherwise."""
        err: list[str] = []
        reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
        reader.start()
        out: list[str] = []
        stopped = False
        # timers, not checks between lines: a command that hangs silent (stuck I/O, or stuck ending after the
        # SIGINT) would otherwise keep the read below, and the device, forever
        expired = threading.Event()
        timers = [threading.Timer(timeout, _kill_quietly, (proc, expired))] if timeout is not None else []
        for timer in timers:
            timer.daemon = True
            timer.start()
        try:
            for line in proc.stdout:
                out.append(line)
                if not stopped and not watch(line):
                    stopped = True
                    os.killpg(proc.pid, signal.SIGINT)
                    grace = threading.Timer(STOP_GRACE_S, _kill_quietly, (proc, None))
                    grace.daemon = True
                    grace.start()
                    timers.append(grace)
            proc.wait()
        except BaseException:
            kill_group(proc)
            raise
        finally:
            for timer in timers:
                timer.cancel()
        if expired.is_set():
            raise CommandTimeout(argv, timeout or 0)
        reader.join(timeout=5)
        result = Result(tuple(argv), proc.returncode, "".join(out), "".join(err), time.monotonic() - started)
        if check and not result.ok and not stopped:
            raise CommandFailed(result)
        return result

    def _wait(self, proc: subprocess.Popen, argv: Sequence[str], timeout: float | None, check: bool,
              started: float) -> Result:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise CommandTimeout(argv, timeout or 0) from None
        except BaseException:  # Ctrl-C: do not leave the benchmark running on the device
            kill_group(proc)
            raise
        result = Result(tuple(argv), proc.returncode, out, err, time.monotonic() - started)
        if check and not result.ok:
            raise CommandFailed(result)
        return result

    def write(self, path: str | Path, value: str) -> None:
        """A sysfs or procfs write, e.g. the I/O scheduler."""
        Path(path).write_text(value)

    def read(self, path: str | Path) -> str:
        return Path(path).read_text().strip()

    def write_file(self, path: str | Path, text: str) -> None:
        """A job or workload file the commands read."""
        Path(path).write_text(text)


class DryRunShell(Shell):
    """Prints what would run, runs nothing, and answers as if everything succeeded."""

    dry_run = True

    def __init__(self, echo: Callable[[str], None] = print):
        super().__init__()
        self.echo = echo
        self.commands: list[str] = []

    def _say(self, line: str) -> None:
        self.commands.append(line)
        self.echo(line)

    def note(self, line: str) -> None:
        self._say(f"# {line}")

    def run(self, argv: Sequence[str], *, timeout: float | None = None, check: bool = True,
            watch: Callable[[str], bool] | None = None) -> Result:
        self._say(shlex.join(argv))
        return Result(tuple(argv), 0, "", "", 0.0)

    def write(self, path: str | Path, value: str) -> None:
        self._say(f"echo {shlex.quote(value)} > {path}")

    def read(self, path: str | Path) -> str:
        try:
            return super().read(path)
        except OSError:
            return "<its value now>"  # the device does not exist in a dry run

    def write_file(self, path: str | Path, text: str) -> None:
        self._say(f"cat > {path} <<'EOF'\n{text.rstrip()}\nEOF")


class _signals_unblocked:
    """SIGINT and SIGTERM unblocked in this thread while a command starts, so that the command can be interrupted:
    a child inherits its parent thread's signal mask, and a Ray worker runs its tasks with SIGINT blocked (fio
    started there never saw the SIGINT that stops a watched run, and ran whole)."""

    SIGNALS = {signal.SIGINT, signal.SIGTERM}

    def __enter__(self) -> None:
        self._old = signal.pthread_sigmask(signal.SIG_UNBLOCK, self.SIGNALS)

    def __exit__(self, *_: Any) -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, self._old)
