"""How to choose the next configuration, and the history that remembers every measurement.

Algorithms are loaded lazily through ``tuner.registry``; importing this package loads no heavy library,
and none of its modules until a name is asked for (PEP 562): a worker process that measures imports
``storetune.tuner.execution`` alone, not the history and SQLAlchemy (1.3 s of every Ray worker's start).

Its rooms: ``algorithms`` (how to choose), ``history`` (what was measured), ``execution`` (where it is measured),
``objectives`` (what a measurement is worth), ``analysis`` (what it all means) and ``search`` (the campaign
that ties them together), each importing only the rooms before it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_MODULES = {  # where each name of the package lives
    "storetune.tuner.analysis.summary": ("CampaignSummary", "best_trial", "trials_by_status"),
    "storetune.tuner.algorithms.base": ("Observation", "Tuner"),
    "storetune.tuner.algorithms.registry": ("ALGORITHMS", "DEFAULT_ALGORITHM", "SEARCH_ALGORITHMS", "algorithm_class",
                                            "make_tuner"),
    "storetune.tuner.search.campaign": ("Campaign", "TrialResult"),
    "storetune.tuner.search.spec": ("CampaignSpec",),
    "storetune.tuner.history.store": ("History",),
    "storetune.tuner.objectives.objective": ("Objective",),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'storetune.tuner' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:  # for type checkers and readers: the names above, statically
    from storetune.tuner.analysis.summary import CampaignSummary, best_trial, trials_by_status  # noqa: F401
    from storetune.tuner.algorithms.base import Observation, Tuner  # noqa: F401
    from storetune.tuner.search.campaign import Campaign, TrialResult  # noqa: F401
    from storetune.tuner.search.spec import CampaignSpec  # noqa: F401
    from storetune.tuner.history.store import History  # noqa: F401
    from storetune.tuner.objectives.objective import Objective  # noqa: F401
    from storetune.tuner.algorithms.registry import (  # noqa: F401
        ALGORITHMS, DEFAULT_ALGORITHM, SEARCH_ALGORITHMS, algorithm_class, make_tuner,
    )
