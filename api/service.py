"""The service's settings (from the environment) and its policy on what a client may ask for.

The policy is the server's, never the client's: which data directories a client may name, which
block devices it may format, whether it may run commands. Each refusal names the field.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from api.settings import default_database_url
from runners.settings import DeviceSettings

ROOT = Path(__file__).resolve().parents[1]


def default_data_dirs() -> str:
    return f"{ROOT / 'datasets'}:{ROOT.parent / 'shared' / 'datasets'}"


class ServiceSettings(BaseSettings):
    """``storetune serve``'s settings: STORETUNE_* variables, or the command line's options."""

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


class Refused(Exception):
    """A request the server's policy refuses: ``status`` 403 or 422, ``field`` the JSON path."""

    def __init__(self, field: tuple[str | int, ...], message: str, status: int = 422):
        super().__init__(message)
        self.field, self.status = field, status


def in_json_terms(message: str, fields: dict[str, tuple[str, ...]]) -> tuple[str, tuple[str, ...]]:
    """A message of the layers below, which name the command line's options (``--context``, ``--budget``),
    in the request's terms: each option known to ``fields`` becomes its JSON path, and the first one named
    is where the error lies (empty if none). Written by hand: the layers below serve the CLI too."""
    found: list[tuple[str, ...]] = []

    def field(match: re.Match[str]) -> str:
        path = fields.get(match[0])
        if path is None:
            return match[0]
        found.append(path)
        return ".".join(path)

    text = re.sub(r"--[a-z][a-z-]*", field, message)
    return text, found[0] if found else ()


def allowed_path(settings: ServiceSettings, value: str, field: tuple[str | int, ...]) -> str:
    """``value`` resolved (relative to the server's working directory) if it lies inside one of the
    data directories; refused otherwise."""
    try:
        path = Path(value).expanduser().resolve()
        roots = settings.data_roots()
        inside = any(path == root or path.is_relative_to(root) for root in roots)
        exists = inside and path.exists()
    except (OSError, ValueError, RuntimeError) as e:  # a name too long, a NUL byte, a symlink loop
        raise Refused(field, f"{value[:200]!r} is not a usable path: {e}") from None
    if not inside:
        raise Refused(field, f"{value} is outside the data directories this server allows "
                             "(STORETUNE_DATA_DIRS)", 403)
    if not exists:
        raise Refused(field, f"{value}: no such file or directory on the server")
    return str(path)


def apply_policy(settings: ServiceSettings, runner: str, values: dict[str, Any]) -> dict[str, Any]:
    """The client's runner settings with the server's policy applied: paths inside the data
    directories, devices from the server's allow list, commands only when allowed."""
    values = dict(values)
    where = ("body", "runner_settings")
    if runner == "dataset":
        tables = values.get("dataset")
        tables = [tables] if isinstance(tables, str) else tables
        if isinstance(tables, list):
            values["dataset"] = [allowed_path(settings, str(t), (*where, "dataset", i)) for i, t in enumerate(tables)]
    elif runner == "admission":
        if isinstance(values.get("trace"), str):
            values["trace"] = allowed_path(settings, values["trace"], (*where, "trace"))
    elif runner == "command":
        if not settings.allow_commands:
            raise Refused(("body", "runner"), "this server does not run commands (the command runner runs any "
                                               "program; its operator enables it with STORETUNE_ALLOW_COMMANDS=1)", 403)
    elif runner == "device":
        for key in ("allow_device", "loop_dir"):
            if key in values:
                raise Refused((*where, key), f"{key} is the server's to set, not the client's")
        device = values.get("device", "loop")
        if device != "loop" and device not in settings.devices():
            raise Refused((*where, "device"), f"{device} is not on this server's allow list "
                                               f"(STORETUNE_ALLOW_DEVICES: {':'.join(settings.devices()) or 'empty'})",
                          403)
        if device != "loop":
            values["allow_device"] = [device]
        size = values.get("loop_size_mib")  # not yet validated: a non-number is the settings model's to refuse
        if isinstance(size, int | float) and not isinstance(size, bool) and size > settings.max_loop_mib:
            raise Refused((*where, "loop_size_mib"), f"this server makes loop devices of at most "
                                                      f"{settings.max_loop_mib} MiB (STORETUNE_MAX_LOOP_MIB)")
    return values


def check_stored(settings: ServiceSettings, runner: str, values: dict[str, Any], parallel: int) -> None:
    """A recorded campaign (perhaps the CLI's, with the CLI's freedoms) meets this server's policy
    before the server runs it: resuming through the API must not widen what a client may run."""
    stored = dict(values)
    if runner == "device":
        device = stored.get("device", "loop")
        granted = [] if device == "loop" else [device]
        if stored.pop("allow_device", []) not in ([], granted):
            raise Refused(("path", "campaign_id"), "this campaign allows devices the server has not granted", 403)
        if stored.pop("loop_dir", None) not in (None, DeviceSettings().loop_dir):
            raise Refused(("path", "campaign_id"), "this campaign puts its loop device where the server does not", 403)
    try:
        apply_policy(settings, runner, stored)
    except Refused as e:  # the campaign's recorded settings are at fault, not a body the resume has none of
        raise Refused(("path", "campaign_id"), f"this campaign's {runner} runner: {e}", e.status) from None
    if parallel > settings.max_parallel:
        raise Refused(("path", "campaign_id"), f"this campaign measures {parallel} configurations at once; this "
                                               f"server allows {settings.max_parallel} (STORETUNE_MAX_PARALLEL)", 403)
