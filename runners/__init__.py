"""How to measure a configuration: replay a dataset, run a command, format and measure a real device, simulate
ML admission.

Runners are registered by name with their settings models (``settings.SETTINGS``) and imported lazily, so
that importing this package stays cheap.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from storetune.runners.base import (
    Direction, GoOn, HostUnavailable, Measurement, Runner, RunnerBase, Status, WatchedRunner, Workload,
    guess_direction, host_environment, raised,
)
from storetune.runners.settings import SETTINGS, RunnerSettings, parse_settings, settings_model

RUNNERS = {name: model.runner for name, model in SETTINGS.items()}  # the registry is runners/settings.py's


def runner_class(name: str) -> type:
    try:
        module, cls = RUNNERS[name].split(":")
    except KeyError:
        raise ValueError(f"unknown runner {name!r}; known: {', '.join(RUNNERS)}") from None
    return getattr(importlib.import_module(module), cls)


def make_runner(name: str, settings: RunnerSettings | Mapping[str, Any] | None = None, **fields: Any) -> Runner:
    """Build the runner ``name`` from its settings (a model, a mapping, or keyword fields: what
    ``Runner.settings()`` returned). Fields that are not settings are options of the constructor
    (the device runner's ``dry_run`` and ``echo``); anything else is refused by name."""
    model = settings_model(name)
    values = dict(settings or {}) if not isinstance(settings, RunnerSettings) else settings
    options = {k: v for k, v in fields.items() if k not in model.model_fields}
    if isinstance(values, dict):
        values.update({k: v for k, v in fields.items() if k in model.model_fields})
    cls = runner_class(name)
    accepted = set(inspect.signature(cls).parameters) - {"settings"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ValueError(f"{name} runner: {unknown[0]}: not a setting of this runner; "
                         f"its settings: {', '.join(model.model_fields)}")
    return cls(parse_settings(name, values), **options)


def inspected_runner(name: str, settings: RunnerSettings | Mapping[str, Any]) -> Runner:
    """The runner ``name`` built to be looked at, not to measure: its space, workload, settings and resources,
    without setting anything up on this machine (the device runner as a dry run, silent). What a service checks
    a request with, and a driver holds while its measurements run elsewhere."""
    if "dry_run" in inspect.signature(runner_class(name)).parameters:
        return make_runner(name, settings, dry_run=True, echo=lambda _line: None)
    return make_runner(name, settings)


__all__ = [
    "inspected_runner",
    "RUNNERS",
    "Direction",
    "GoOn",
    "Measurement",
    "Runner",
    "RunnerBase",
    "RunnerSettings",
    "SETTINGS",
    "Status",
    "WatchedRunner",
    "Workload",
    "guess_direction",
    "host_environment",
    "make_runner",
    "parse_settings",
    "raised",
    "settings_model",
    "runner_class",
]
