"""The admission models, in torch: HEIMDALL's network (128 and 16 ReLU units, one sigmoid output)
and the LinnOS-style 256-unit network, trained either as a classifier (slow or fast, with class
weight b on the slow class and the log-odds bias initialiser) or as a regressor of latency with
ML-MittOS's asymmetric MSE (Eq. 3.4), whose prediction is compared with a failover threshold; and
gradient-boosted trees (scikit-learn's HistGradientBoostingClassifier) as a classifier beside them.
A classifier fails a read over when its probability of slow exceeds the decision threshold.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from sklearn.metrics import average_precision_score, f1_score, roc_auc_score
from torch import nn

NETWORKS = ("heimdall", "linnos")
KINDS = ("classifier", "regressor", "boosted_trees")


def network(kind: str, n_features: int) -> nn.Sequential:
    if kind == "heimdall":
        return nn.Sequential(nn.Linear(n_features, 128), nn.ReLU(), nn.Linear(128, 16), nn.ReLU(), nn.Linear(16, 1))
    if kind == "linnos":
        return nn.Sequential(nn.Linear(n_features, 256), nn.ReLU(), nn.Linear(256, 1))
    raise ValueError(f"unknown network {kind!r}; known: {', '.join(NETWORKS)}")


def amse(predicted: torch.Tensor, target: torch.Tensor, bias: float) -> torch.Tensor:
    """ML-MittOS Eq. 3.4: (y - y_hat)^2 (sign(y - y_hat) + b)^2, averaged. b = 0 is the MSE; b > 0
    weighs under-estimates of the latency more and over-estimates less."""
    error = target - predicted
    return (error**2 * (torch.sign(error) + bias) ** 2).mean()


@dataclass(frozen=True)
class TrainSpec:
    kind: str  # "classifier" or "regressor"
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


class Model(Decider):
    """A trained network with what it needs to decide: scores, and EBUSY decisions."""

    def __init__(self, spec: TrainSpec, net: nn.Sequential, latency_scale: float):
        self.spec, self.net, self.latency_scale = spec, net.eval(), latency_scale

    @torch.no_grad()
    def scores(self, X: np.ndarray) -> np.ndarray:
        """The classifier's probability of slow, or the regressor's predicted latency in microseconds."""
        out = self.net(torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))).squeeze(1).numpy()
        if self.spec.kind == "classifier":
            return 1.0 / (1.0 + np.exp(-out.astype(np.float64)))
        return out.astype(np.float64) * self.latency_scale


class TreeModel(Decider):
    """Gradient-boosted trees: scikit-learn's HistGradientBoostingClassifier, the slow class weighted."""

    def __init__(self, spec: TrainSpec, trees: Any):
        self.spec, self.trees = spec, trees

    def scores(self, X: np.ndarray) -> np.ndarray:
        if len(self.trees.classes_) == 1:  # the training part had one class only
            return np.full(len(X), float(self.trees.classes_[0]))
        return self.trees.predict_proba(X)[:, 1]


def train_trees(X: np.ndarray, labels: np.ndarray, spec: TrainSpec) -> TreeModel:
    from sklearn.ensemble import HistGradientBoostingClassifier

    weight = np.where(labels.astype(bool), spec.class_weight, 1.0)
    trees = HistGradientBoostingClassifier(random_state=spec.seed, early_stopping=False, max_iter=100)
    return TreeModel(spec, trees.fit(X, labels.astype(int), sample_weight=weight))


def train(X: np.ndarray, target: np.ndarray, spec: TrainSpec) -> Decider:
    """Train on rows X (already scaled) for labels (classifiers) or latencies (regressor)."""
    if spec.kind == "boosted_trees":
        return train_trees(X, target, spec)
    torch.manual_seed(spec.seed)
    generator = torch.Generator().manual_seed(spec.seed)
    net = network(spec.network, X.shape[1])
    x = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))
    if spec.kind == "classifier":
        y = torch.from_numpy(target.astype(np.float32))
        positive = float(target.mean())
        if 0 < positive < 1:  # start at the base rate: log odds of slow (ML-MittOS 3.1, after Keras' guide)
            with torch.no_grad():
                net[-1].bias.fill_(float(np.log(positive / (1 - positive))))
        loss_fn = nn.BCEWithLogitsLoss(pos_weight=torch.tensor(spec.class_weight))
        scale = 1.0
    else:
        scale = float(np.mean(target)) or 1.0  # predict latency in units of the mean: well-conditioned
        y = torch.from_numpy((target / scale).astype(np.float32))

        def loss_fn(predicted: torch.Tensor, wanted: torch.Tensor) -> torch.Tensor:
            return amse(predicted, wanted, spec.loss_bias)

    optimiser = torch.optim.Adam(net.parameters(), lr=spec.learning_rate)
    for _ in range(spec.epochs):
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), spec.batch_size):
            batch = order[start : start + spec.batch_size]
            optimiser.zero_grad()
            loss = loss_fn(net(x[batch]).squeeze(1), y[batch])
            loss.backward()
            optimiser.step()
    return Model(spec, net, scale)


def accuracy(labels: np.ndarray, scores: np.ndarray, decided: np.ndarray) -> dict[str, float]:
    """ROC-AUC and PR-AUC of the scores; F1, false-negative and false-positive rates of the decisions."""
    labels, decided = labels.astype(bool), decided.astype(bool)
    positives, negatives = labels.sum(), (~labels).sum()
    both = positives and negatives
    return {
        "roc_auc": float(roc_auc_score(labels, scores)) if both else float("nan"),
        "pr_auc": float(average_precision_score(labels, scores)) if both else float("nan"),
        "f1": float(f1_score(labels, decided, zero_division=0)),
        "fnr": float((labels & ~decided).sum() / positives) if positives else 0.0,
        "fpr": float((~labels & decided).sum() / negatives) if negatives else 0.0,
        "slow_share": float(labels.mean()),
    }


def inference_cost(model: Decider, X: np.ndarray, joint: int = 4, repeats: int = 3) -> dict[str, float]:
    """Microseconds of inference per I/O: one call per I/O, one call per batch of 1,024 I/Os, and
    joint inference of ``joint`` I/Os per decision (one call per I/O group)."""
    torch.set_num_threads(1)  # a storage server's admission runs on one core
    single = X[:500]
    started = time.perf_counter()
    for row in single:
        model.scores(row[None])
    single_us = (time.perf_counter() - started) / len(single) * 1e6
    batched = []
    for _ in range(repeats):
        started = time.perf_counter()
        for start in range(0, len(X), 1024):
            model.scores(X[start : start + 1024])
        batched.append((time.perf_counter() - started) / len(X) * 1e6)
    started = time.perf_counter()
    for row in single[::joint]:
        model.scores(row[None])
    joint_us = (time.perf_counter() - started) / len(single) * 1e6
    return {"single_us_per_io": single_us, "batched_us_per_io": min(batched), f"joint{joint}_us_per_io": joint_us}
