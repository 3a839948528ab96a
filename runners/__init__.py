"""How to measure a configuration: replay a dataset, run a command, and (later) real devices.

Runners are registered by name and imported lazily, so that importing this package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from runners.base import Direction, Measurement, Runner, Status, Workload, guess_direction, host_environment

RUNNERS = {
    "dataset": "runners.dataset:DatasetRunner",
    "command": "runners.command:CommandRunner",
    "device": "runners.device.runner:DeviceRunner",
    "admission": "runners.admission.runner:AdmissionRunner",
}


def runner_class(name: str) -> type:
    try:
        module, cls = RUNNERS[name].split(":")
    except KeyError:
        raise ValueError(f"unknown runner {name!r}; known: {', '.join(RUNNERS)}") from None
    return getattr(importlib.import_module(module), cls)


def make_runner(name: str, **settings: Any) -> Runner:
    """Build the runner ``name`` from its settings (what ``Runner.settings()`` returned)."""
    return runner_class(name)(**settings)


__all__ = [
    "RUNNERS",
    "Direction",
    "Measurement",
    "Runner",
    "Status",
    "Workload",
    "guess_direction",
    "host_environment",
    "make_runner",
    "runner_class",
]
