"""Where the signal is: which features let a model tell the slow reads of a trace from the fast ones,
how well each model kind ranks them (ROC-AUC, and PR-AUC, which says more when slow reads are rare),
how well its probabilities are calibrated, and what history depth and joint inference change.

Every model learns on the fitting part of the training split and is judged on the untouched test part
(or, to make design choices without looking at the test part, on the validation part), against that
part's labels as they are (never noise-filtered). "Slow" is judged three ways:
- pays: slower than the threshold at which a perfect predictor gains most on the training part,
  i.e. the reads whose failover pays;
- cutoff: slower than the training reads' hand-chosen percentile (90: LinnOS, ML-MittOS);
- period: HEIMDALL's busy periods.
The feature ablation uses gradient-boosted trees, the cheapest model to retrain for each group.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from sklearn.calibration import calibration_curve
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score

from storetune.runners.admission.features import FEATURE_SETS, GROUPS, AdmissionDataError
from storetune.runners.admission.pipeline import AdmissionConfig, Pipeline

ABLATED = ("heimdall", "pending", "locality", "recent")  # the groups "all" combines; linnos is an alternative encoding
DEPTHS = (1, 3, 8)
JOINT = 4
CALIBRATION_BINS = 10


def ranking(labels: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    return {"roc_auc": float(roc_auc_score(labels, scores)), "pr_auc": float(average_precision_score(labels, scores))}


def calibration(labels: np.ndarray, probability: np.ndarray) -> dict[str, Any]:
    """The reliability curve (quantile bins: equal numbers of reads) and the Brier score."""
    observed, predicted = calibration_curve(labels, probability, n_bins=CALIBRATION_BINS, strategy="quantile")
    return {"brier": float(brier_score_loss(labels, probability)),
            "curve": [{"predicted": float(p), "observed": float(o)} for p, o in zip(predicted, observed)]}


def explain(pipeline: Pipeline, replicas: int = 3, failover_cost_us: float = 30.0,
            kinds: tuple[str, ...] = ("boosted_trees", "classifier", "regressor"),
            cutoff_percentile: float = 90.0, part: str = "test") -> dict[str, Any]:
    if part not in ("test", "validation"):
        raise AdmissionDataError(f"explain judges the test or the validation part, not {part!r}")
    pays = pipeline.pays_threshold_us(replicas, failover_cost_us)
    fit = pipeline.ios.latency_us[pipeline.reads("fit")]
    out: dict[str, Any] = {"trace": pipeline.path.name, "part": part, "reads": int(len(pipeline.reads(part))),
                           "replicas": replicas, "failover_cost_us": failover_cost_us,
                           "pays_us": pays, "pays_percentile": float(np.mean(fit <= pays) * 100),
                           "cutoff_percentile": cutoff_percentile,
                           "cutoff_us": pipeline.threshold_us(cutoff_percentile),
                           "groups": GROUPS, "labelings": {}}
    for labeling in ("pays", "cutoff", "period"):
        base = AdmissionConfig(labeling=labeling, threshold_percentile=cutoff_percentile, noise_filter=False,
                               replicas=replicas, failover_cost_us=failover_cost_us)
        labels = pipeline.slow_labels(base, part)  # none slow: refused, saying why (no failover pays, ...)
        if labels.all():
            raise AdmissionDataError(f"{pipeline.path.name}: the {part} part's reads are all slow by {labeling} "
                                     "labelling; nothing to tell apart")

        def judged(cfg: AdmissionConfig) -> tuple[dict[str, float], np.ndarray]:
            scores = pipeline.model(cfg).scores(pipeline.inputs(cfg, part))
            return ranking(labels, scores), scores

        trees = _with(base, model_kind="boosted_trees")
        ablation = {"all": judged(_with(trees, features=ABLATED))[0]}
        for group in ABLATED:
            ablation[f"without {group}"] = judged(_with(trees, features=tuple(g for g in ABLATED if g != group)))[0]
            ablation[f"only {group}"] = judged(_with(trees, features=(group,)))[0]
        ablation["only linnos"] = judged(_with(trees, features=("linnos",)))[0]
        models = {}
        for kind in kinds:
            for feature_set in FEATURE_SETS:
                cfg = _with(trees, model_kind=kind, features=feature_set)
                ranked, scores = judged(cfg)
                if cfg.is_classifier:
                    ranked["calibration"] = calibration(labels, scores)
                models[f"{kind} / {feature_set}"] = ranked
        depth = {str(d): judged(_with(trees, features="heimdall", history_depth=d))[0] for d in DEPTHS}
        cfg = _with(trees, features="extended")
        scores = pipeline.model(cfg).scores(pipeline.inputs(cfg, part)[::JOINT])
        joint = ranking(labels, np.repeat(scores, JOINT)[: len(labels)])
        loss = {group: ablation["all"]["roc_auc"] - ablation[f"without {group}"]["roc_auc"] for group in ABLATED}
        out["labelings"][labeling] = {
            "slow_share": float(labels.mean()), "ablation": ablation, "models": models, "history_depth": depth,
            f"joint{JOINT}_extended_trees": joint, "most_signal": max(loss, key=loss.get),
        }
    return out


def _with(cfg: AdmissionConfig, **changes: Any) -> AdmissionConfig:
    return replace(cfg, **changes)
