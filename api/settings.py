"""StoreTune's settings, read from the environment (STORETUNE_*, and RAY_ADDRESS), in one class."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_database_url() -> str:
    """A SQLite file under $XDG_DATA_HOME (~/.local/share by default)."""
    data_home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return f"sqlite:///{data_home / 'storetune' / 'history.sqlite'}"


ROOT = Path(__file__).resolve().parents[1]  # the checkout: its datasets/, and ../shared beside it


def default_data_dirs() -> str:
    return f"{ROOT / 'datasets'}:{ROOT.parent / 'shared' / 'datasets'}"


class Settings(BaseSettings):
    """StoreTune's settings, from STORETUNE_* variables (the history's URL for every command; the rest for
    ``storetune serve``, whose options override them)."""

    model_config = SettingsConfigDict(env_prefix="STORETUNE_", extra="ignore", populate_by_name=True)

    database_url: str = Field(default_factory=default_database_url)
    token: str | None = None  # when set, every mutating call needs 'Authorization: Bearer <token>'
    data_dirs: str = Field(default_factory=default_data_dirs)  # colon-separated; tables and traces must be inside
    allow_devices: str = ""  # colon-separated block devices the device runner may format ('loop' is always allowed)
    allow_commands: bool = False  # the command runner runs arbitrary programs: off unless the server says so
    max_campaigns: int = Field(2, ge=1)  # campaigns and comparisons running at once; the rest queue
    max_parallel: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1)  # a campaign's workers, at most
    max_loop_mib: int = Field(4096, ge=64)  # the largest loop device (a sparse file in loop_dir) a client may ask
    comparison_workers: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1)
    # the Ray cluster campaigns and comparisons are measured on (host:port of its head); none: this machine
    ray_address: str | None = Field(None, validation_alias=AliasChoices("STORETUNE_RAY_ADDRESS", "RAY_ADDRESS"))
    ray_join: bool = False  # join the cluster with a node of the service's own, offering no CPU (a container)
    ray_max_retries: int = Field(2, ge=0, le=20)  # a task whose worker or node died is run again this many times

    def data_roots(self) -> list[Path]:
        return [Path(d).expanduser().resolve() for d in self.data_dirs.split(":") if d]

    def devices(self) -> list[str]:
        return [d for d in self.allow_devices.split(":") if d]
