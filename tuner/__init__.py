"""How to choose the next configuration, and the history that remembers every measurement.

Algorithms are loaded lazily through ``tuner.registry``; importing this package loads no heavy library,
and none of its modules until a name is asked for (PEP 562): a worker process that measures imports
``tuner.executor`` alone, not the history and SQLAlchemy (1.3 s of every Ray worker's start).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "CampaignSummary": "tuner.analysis", "best_trial": "tuner.analysis", "trials_by_status": "tuner.analysis",
    "Observation": "tuner.base", "Tuner": "tuner.base",
    "Campaign": "tuner.campaign", "CampaignSpec": "tuner.campaign", "TrialResult": "tuner.campaign",
    "History": "tuner.history",
    "Objective": "tuner.objective",
    "ALGORITHMS": "tuner.registry", "DEFAULT_ALGORITHM": "tuner.registry", "SEARCH_ALGORITHMS": "tuner.registry",
    "algorithm_class": "tuner.registry", "make_tuner": "tuner.registry",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'tuner' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from tuner.analysis import CampaignSummary, best_trial, trials_by_status
    from tuner.base import Observation, Tuner
    from tuner.campaign import Campaign, CampaignSpec, TrialResult
    from tuner.history import History
    from tuner.objective import Objective
    from tuner.registry import ALGORITHMS, DEFAULT_ALGORITHM, SEARCH_ALGORITHMS, algorithm_class, make_tuner
