"""What the commands share: consoles, common options, one-line user errors, runner settings."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from api.settings import Settings
from runners import RUNNERS
from tuner import History

# Piped output (files, CI logs) gets wide tables instead of rich's 80-column default.
console = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True)

DbOption = Annotated[
    Optional[str], typer.Option("--db", help="History URL (default: $STORETUNE_DATABASE_URL or a SQLite file).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object as the last line.")]


class UserError(Exception):
    """Bad input: printed as one line, exit status 2."""


def open_history(db: str | None) -> History:
    return History(db or Settings().database_url)


def pairs(items: list[str], option: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"{option} {item!r}: expected name=value")
        pairs[key.strip()] = value.strip()
    return pairs


@dataclass(frozen=True)
class DeviceOptions:
    """The tune options of the device runner."""

    device: str = "loop"
    allow_device: tuple[str, ...] = ()
    workload: str = "fileserver"
    engine: str = "fio"
    runtime: float = 10.0
    loop_dir: str = "/var/tmp/storetune"
    loop_size_mib: int = 1024
    fileset_mib: int = 256

    def settings(self, space: str | None, timeout: float | None) -> dict[str, Any]:
        return dict(space=space or "storage_v2", workload=self.workload, device=self.device,
                    allow_device=list(self.allow_device), engine=self.engine, runtime_s=self.runtime,
                    timeout_s=timeout, loop_dir=self.loop_dir, loop_size_mib=self.loop_size_mib,
                    fileset_mib=self.fileset_mib)


def runner_settings(runner: str, dataset: list[Path], context: list[str], space: str | None,
                    command: str | None, timeout: float | None, metric: str | None,
                    device: DeviceOptions | None = None, trace: Path | None = None,
                    replica_cost_us: float = 0.0) -> dict[str, Any]:
    """The keyword arguments of the runner's constructor, from the command line's options."""
    if runner == "dataset":
        if not dataset:
            raise UserError("--runner dataset needs --dataset PATH (a CSV table or a folder of them)")
        return {"dataset": [str(p) for p in dataset], "context": pairs(context, "--context"), "metric": metric}
    if runner == "command":
        if not command or not space:
            raise UserError("--runner command needs --command 'CMD ...' and --space NAME")
        return {"command": command, "space": space, "timeout_s": timeout or 3600.0}
    if runner == "device":
        return (device or DeviceOptions()).settings(space, timeout)
    if runner == "admission":
        if trace is None:
            raise UserError("--runner admission needs --trace PATH (a trace with per-I/O latency)")
        return {"trace": str(trace), "space": space or "admission", "replica_cost_us": replica_cost_us}
    raise UserError(f"unknown runner {runner!r}; known: {', '.join(RUNNERS)}")


def literal(line: str) -> None:
    """Print a command as it is (job files have [sections] that rich would take for markup)."""
    console.print(line, markup=False, highlight=False)
