"""What every admission model shares, and what the modules that train them depend on: the training spec and
the EBUSY decisions of a trained model. Its own module, so that ``model`` (the trees and the dispatch) and
``nets`` (the torch networks) both depend on it and not on each other."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NETWORKS = ("heimdall", "linnos")
KINDS = ("classifier", "regressor", "boosted_trees")


@dataclass(frozen=True)
class TrainSpec:
    kind: str  # one of KINDS
    network: str = "heimdall"
    class_weight: float = 1.0  # the classifier's bias: the weight of the slow class, >= 1
    loss_bias: float = 0.0  # the regressor's AMSE bias, in [0, 1)
    epochs: int = 10
    batch_size: int = 256
    learning_rate: float = 1e-3
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown model kind {self.kind!r}; choose {', '.join(KINDS)}")
        if self.class_weight < 1:
            raise ValueError(f"the classifier's class weight must be at least 1, not {self.class_weight}")
        if not 0 <= self.loss_bias < 1:
            raise ValueError(f"the regressor's loss bias must be in [0, 1), not {self.loss_bias}")


class Decider:
    """What every trained model does with its scores: EBUSY decisions."""

    spec: TrainSpec

    def scores(self, X: np.ndarray) -> np.ndarray: ...

    def busy(self, X: np.ndarray, threshold_us: float | None = None, joint: int = 1,
             cutoff: float = 0.5) -> np.ndarray:
        """EBUSY decisions: a classifier's probability of slow above ``cutoff``, a regressor's latency
        above ``threshold_us``. With ``joint`` = P, one decision per P consecutive I/Os (HEIMDALL
        4.2), taken on the first of them."""
        if not 0 < cutoff < 1:
            raise ValueError(f"a decision threshold must be in (0, 1), not {cutoff:g}")
        scores = self.scores(X[::joint]) if joint > 1 else self.scores(X)
        decided = scores > threshold_us if self.spec.kind == "regressor" else scores > cutoff
        return np.repeat(decided, joint)[: len(X)] if joint > 1 else decided
