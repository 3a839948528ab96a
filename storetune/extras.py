"""StoreTune's optional parts (pyproject.toml's extras), and the one-line error when a user asks for one that is
not installed: `pip install storetune` gives the command line on tables; the service, Ray, the report and the RL
tuner each name their extra."""

from __future__ import annotations

import importlib
from types import ModuleType

# what each extra brings, as the user asks for it
WHAT = {"service": "the REST service (storetune serve)", "ray": "the Ray executor", "report": "the web report",
        "rl": "the DQN tuner and the admission networks"}


class MissingExtra(ImportError):
    """A part of StoreTune whose extra is not installed; the message says what to install."""


def need(module: str, extra: str) -> ModuleType:
    """``import module``, or MissingExtra naming the extra that brings it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if e.name is not None and module.split(".")[0] != e.name.split(".")[0] and not module.startswith(e.name):
            raise  # the module is there, and something it imports is broken: that error, not a missing extra
        raise MissingExtra(f"{WHAT.get(extra, extra)} needs {module.split('.')[0]}, which is not installed: "
                           f"pip install 'storetune[{extra}]'") from None
