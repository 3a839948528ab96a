"""Settings read from the environment (STORETUNE_*), in one place."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


def default_database_url() -> str:
    """A SQLite file under $XDG_DATA_HOME (~/.local/share by default)."""
    data_home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return f"sqlite:///{data_home / 'storetune' / 'history.sqlite'}"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STORETUNE_")

    database_url: str = default_database_url()
