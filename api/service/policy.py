"""The server's policy on what a client may ask for (its settings: ``storetune.api.settings``).

The policy is the server's, never the client's: which data directories a client may name, which
block devices it may format, whether it may run commands. Each refusal names the field.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from storetune.api.fields import plain
from storetune.api.settings import Settings
from storetune.runners.settings import field_extra, settings_model

class Refused(Exception):
    """A request the server's policy refuses: ``status`` 403 or 422, ``field`` the JSON path."""

    def __init__(self, field: tuple[str | int, ...], message: str, status: int = 422):
        super().__init__(plain(message))  # a field a layer below named in backticks, by its name
        self.field, self.status = field, status


def allowed_path(settings: Settings, value: str, field: tuple[str | int, ...]) -> str:
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


def apply_policy(settings: Settings, runner: str, values: dict[str, Any]) -> dict[str, Any]:
    """The client's runner settings with the server's policy applied, field by field as the runner's settings
    model marks them (``storetune.runners.settings.setting``): paths inside the data directories, devices from
    the server's allow list, the server's own fields refused, commands only when allowed, loop devices no larger
    than the server makes."""
    model = settings_model(runner)
    values = dict(values)
    where = ("body", "runner_settings")
    for name in model.model_fields:
        policy = field_extra(model, name).get("policy")
        if policy == "path" and name in values:
            given = values[name]
            if isinstance(given, str) and typing.get_origin(model.model_fields[name].annotation) is list:
                given = [given]  # one path where the model takes a list, as the model reads it
            if isinstance(given, str):
                values[name] = allowed_path(settings, given, (*where, name))
            elif isinstance(given, list):
                values[name] = [allowed_path(settings, str(v), (*where, name, i)) for i, v in enumerate(given)]
        elif policy == "server" and name in values:
            raise Refused((*where, name), f"{name} is the server's to set, not the client's")
        elif policy == "command" and not settings.allow_commands:
            raise Refused(("body", "runner"), f"this server does not run commands (the {runner} runner runs any "
                                               "program; its operator enables it with STORETUNE_ALLOW_COMMANDS=1)", 403)
    for name in model.model_fields:  # after the server's own fields were refused: the values that fill them
        policy = field_extra(model, name).get("policy")
        if policy == "device":
            device = values.get(name, model.model_fields[name].default)
            if device != "loop" and device not in settings.devices():
                raise Refused((*where, name), f"{device} is not on this server's allow list "
                                              f"(STORETUNE_ALLOW_DEVICES: {':'.join(settings.devices()) or 'empty'})", 403)
            if device != "loop":
                values.update({server: [device] for server in _server_fields(model, "allow")})
        elif policy == "loop_size":
            size = values.get(name)  # not yet validated: a non-number is the settings model's to refuse
            if isinstance(size, int | float) and not isinstance(size, bool) and size > settings.max_loop_mib:
                raise Refused((*where, name), f"this server makes loop devices of at most "
                                              f"{settings.max_loop_mib} MiB (STORETUNE_MAX_LOOP_MIB)")
    return values


def _server_fields(model: type, prefix: str = "") -> list[str]:
    return [n for n in model.model_fields if field_extra(model, n).get("policy") == "server" and n.startswith(prefix)]


def check_stored(settings: Settings, runner: str, values: dict[str, Any], parallel: int) -> None:
    """A recorded campaign (perhaps the CLI's, with the CLI's freedoms) meets this server's policy
    before the server runs it: resuming through the API must not widen what a client may run."""
    model = settings_model(runner)
    stored = dict(values)
    devices = [n for n in model.model_fields if field_extra(model, n).get("policy") == "device"]
    granted = [d for d in (stored.get(n, model.model_fields[n].default) for n in devices) if d != "loop"]
    for name in _server_fields(model):
        value = stored.pop(name, None)
        default = model.model_fields[name].get_default(call_default_factory=True)
        if name.startswith("allow") and value not in ([], granted, None):
            raise Refused(("path", "campaign_id"), "this campaign allows devices the server has not granted", 403)
        if not name.startswith("allow") and value not in (None, default):
            raise Refused(("path", "campaign_id"), f"this campaign sets {name}, which is the server's to set "
                                                   "(it puts its loop device where the server does not)", 403)
    try:
        apply_policy(settings, runner, stored)
    except Refused as e:  # the campaign's recorded settings are at fault, not a body the resume has none of
        raise Refused(("path", "campaign_id"), f"this campaign's {runner} runner: {e}", e.status) from None
    if parallel > settings.max_parallel:
        raise Refused(("path", "campaign_id"), f"this campaign measures {parallel} configurations at once; this "
                                               f"server allows {settings.max_parallel} (STORETUNE_MAX_PARALLEL)", 403)
