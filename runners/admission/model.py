"""The admission models: what they share beyond ``spec`` (their accuracy and inference cost), gradient-boosted trees (scikit-learn's HistGradientBoostingClassifier),
and the dispatch to the torch networks of ``nets`` (classifier and regressor), which need the ``rl``
extra. A classifier fails a read over when its probability of slow exceeds the decision threshold.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
from sklearn.metrics import average_precision_score, f1_score, roc_auc_score

from storetune.runners.admission.features import AdmissionDataError
from storetune.runners.admission.spec import Decider, TrainSpec


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

    # weights only when they weigh: scikit-learn bins weighted data by weighted quantiles, 20x slower
    weight = np.where(labels.astype(bool), spec.class_weight, 1.0) if spec.class_weight != 1 else None
    # 20 small trees with large leaves: as accurate on the FlashNet traces as 100 of 31 leaves (ROC-AUC within
    # 0.01), and 0.8 us per I/O batched instead of 3 (sklearn's prediction costs per tree)
    trees = HistGradientBoostingClassifier(random_state=spec.seed, early_stopping=False, max_iter=20,
                                           learning_rate=0.3, max_leaf_nodes=7, min_samples_leaf=100)
    return TreeModel(spec, trees.fit(X, labels.astype(int), sample_weight=weight))


def train(X: np.ndarray, target: np.ndarray, spec: TrainSpec) -> Decider:
    """Train on rows X (already scaled) for labels (classifiers) or latencies (regressor)."""
    if spec.kind == "boosted_trees":
        return train_trees(X, target, spec)
    return networks().train_network(X, target, spec)


def networks() -> Any:
    """The torch networks, or one line saying which extra installs them."""
    try:
        from storetune.runners.admission import nets
    except ImportError as e:
        if e.name != "torch":
            raise
        raise AdmissionDataError("the classifier and regressor networks need torch, which is not installed: "
                                 "pip install -e '.[rl]' (or choose the model kind boosted_trees)") from None
    return nets


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
    joint inference of ``joint`` I/Os per decision (one call per I/O group). A call per I/O is the
    median of 500 calls after a warm-up: their mean swung 40x between runs (256 and 11,027 us), with
    the first call's set-up and whatever else the machine did in it."""
    if sys.modules.get("torch") is not None:  # a storage server's admission runs on one core
        networks().one_thread()
    single = X[:500]
    single_us = _median_call_us(model, single)
    batched = []
    for _ in range(repeats):
        started = time.perf_counter()
        for start in range(0, len(X), 1024):
            model.scores(X[start : start + 1024])
        batched.append((time.perf_counter() - started) / len(X) * 1e6)
    joint_us = _median_call_us(model, single[::joint]) / joint  # one call decides ``joint`` I/Os
    return {"single_us_per_io": single_us, "batched_us_per_io": min(batched), f"joint{joint}_us_per_io": joint_us}


def _median_call_us(model: Decider, rows: np.ndarray) -> float:
    """The median microseconds of one call on one row, over ``rows``, after one call to warm up."""
    model.scores(rows[:1])
    times = []
    for row in rows:
        started = time.perf_counter()
        model.scores(row[None])
        times.append(time.perf_counter() - started)
    return float(np.median(times)) * 1e6
