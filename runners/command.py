"""Measures a configuration by running a user's own benchmark command.

The command receives the configuration in its environment, as ``STORETUNE_CONFIG`` (a JSON
object) and one ``STORETUNE_<PARAMETER>`` variable per parameter, plus ``STORETUNE_SEED``.
It prints its metrics as a JSON object on the last line of standard output, for example
``{"throughput_ops": 1523.4, "latency_p99_us": 812}``. Exit status 77 means "this configuration
is refused" (INVALID); any other non-zero status is a crash (FAILED).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import subprocess
import time
from typing import Any, ClassVar

from storetune.runners.base import Direction, Measurement, RunnerBase, Status, Workload, host_environment, kill_group
from storetune.runners.settings import CommandSettings
from storetune.search_spaces import Config, load_space

INVALID_EXIT_STATUS = 77
STDERR_TAIL = 500  # characters of stderr kept as the reason of a failure


NO_SHELL = "the command runs as an argv, without a shell: for pipes, ';' or redirections use --command \"sh -c '...'\""


def _argv(command: str) -> list[str]:
    """The command split as a shell splits words, checked before the first trial: a program that
    cannot start would otherwise fail every trial of the budget."""
    try:
        argv = shlex.split(command)
    except ValueError as e:
        raise ValueError(f"`command` {command!r}: {e}") from None
    if not argv:
        raise ValueError("`command` is empty")
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)  # splits ; | & < > out, unless quoted
    lexer.whitespace_split = True
    operator = next((t for t in lexer if t and set(t) <= set(";&|<>()")), None)
    if operator:
        raise ValueError(f"`command` {command!r}: {operator!r} is a shell operator, but {NO_SHELL}")
    program = argv[0]
    found = shutil.which(program) if os.sep not in program else (program if os.path.isfile(program) else None)
    if found is None:
        where = "no such file" if os.sep in program else "not found on PATH"
        raise ValueError(f"`command`: {program}: {where}; {NO_SHELL}")
    if not os.access(found, os.X_OK):
        raise ValueError(f"`command`: {found} is not executable (chmod +x it, or name its interpreter first)")
    return argv


class CommandRunner(RunnerBase):
    name: ClassVar[str] = "command"

    def __init__(self, settings: CommandSettings):
        super().__init__(settings)
        command = settings.command
        self.argv = _argv(command)
        self.command = command
        self.space = load_space(settings.space)
        self.timeout_s = settings.timeout_s
        self.workload = Workload("command", settings.workload or os.path.basename(self.argv[0]), {"command": command})

    def metrics(self) -> dict[str, Direction | None]:
        return {}  # whatever the command prints; the campaign names its objective

    def settings(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "space": self.space.name,
            "timeout_s": self.timeout_s,
            "workload": self.workload.name,
        }

    def measure(self, config: Config, workload: Workload, *, seed: int) -> Measurement:
        env = {**os.environ, "STORETUNE_CONFIG": json.dumps(config.to_dict()), "STORETUNE_SEED": str(seed)}
        env.update({f"STORETUNE_{k.upper()}": str(v) for k, v in config.items()})
        record = {**host_environment(), "engine": "command", "command": self.command, "seed": seed}
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                self.argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
            )
        except OSError as e:
            return Measurement.failed(Status.FAILED, f"cannot start {self.argv[0]}: {e.strerror}", env=record)
        try:
            out, err = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)  # the whole group: a benchmark often forks workers
            return Measurement.failed(
                Status.TIMEOUT, f"no result after {self.timeout_s:g} s", env=record, duration_s=self.timeout_s
            )
        except BaseException:  # Ctrl-C, or the worker stopped: its own session does not get the signal
            kill_group(proc)
            raise
        duration = time.monotonic() - started
        tail = err.strip()[-STDERR_TAIL:]
        if proc.returncode == INVALID_EXIT_STATUS:
            return Measurement.failed(Status.INVALID, tail or "refused by the command", env=record, duration_s=duration)
        if proc.returncode != 0:
            reason = f"exit status {proc.returncode}" + (f": {tail}" if tail else "")
            return Measurement.failed(Status.FAILED, reason, env=record, duration_s=duration)
        lines = out.strip().splitlines()
        try:
            metrics = json.loads(lines[-1]) if lines else None
            wrong = [k for k, v in metrics.items() if isinstance(v, bool) or not isinstance(v, (int, float))]
            if wrong:  # true is not 1, and "12.5" is text: a measurement is a JSON number
                return Measurement.failed(Status.FAILED, f"metric {wrong[0]!r} is {metrics[wrong[0]]!r}, not a JSON "
                                          "number", env=record, duration_s=duration)
            metrics = {str(k): float(v) for k, v in metrics.items()}
        except (ValueError, TypeError, AttributeError):
            return Measurement.failed(
                Status.FAILED, "the last line of stdout is not a JSON object of numbers", env=record, duration_s=duration
            )
        if not all(math.isfinite(v) for v in metrics.values()):
            return Measurement.failed(Status.FAILED, f"non-finite metric in {metrics}", env=record, duration_s=duration)
        return Measurement(Status.SUCCEEDED, metrics, env=record, duration_s=duration)
