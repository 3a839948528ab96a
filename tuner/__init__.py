"""How to choose the next configuration, and the history that remembers every measurement.

Algorithms are loaded lazily through ``tuner.registry``; importing this package loads no
heavy library.
"""

from tuner.analysis import CampaignSummary, best_trial, trials_by_status
from tuner.base import Observation, Tuner
from tuner.campaign import Campaign, CampaignSpec, TrialResult
from tuner.history import History
from tuner.objective import Objective
from tuner.registry import ALGORITHMS, DEFAULT_ALGORITHM, SEARCH_ALGORITHMS, algorithm_class, make_tuner

__all__ = [
    "ALGORITHMS",
    "DEFAULT_ALGORITHM",
    "SEARCH_ALGORITHMS",
    "Campaign",
    "CampaignSpec",
    "CampaignSummary",
    "History",
    "Objective",
    "Observation",
    "TrialResult",
    "Tuner",
    "algorithm_class",
    "best_trial",
    "make_tuner",
    "trials_by_status",
]
