"""One trace's admission pipeline: features, labels, cached models and their decisions, and the
simulated latency of a configuration on the validation or the test part of the trace.

Models are cached by everything that changes their training (kind, network, features, depth, bias,
labelling, class weight, noise filter, seed, the percentile only for cutoff-labelled classifiers, and
r and f only for pays-labelled ones), so a threshold change never retrains a regressor, as the
ML-MittOS thesis notes, and a decision threshold never retrains a classifier.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from storetune.runners.admission.features import FEATURE_SETS, AdmissionDataError, MinMax, Split, features, prepare
from storetune.runners.admission.labels import cutoff_labels, noise_filter, period_labels
from storetune.runners.admission.simulator import Outcome, jumps, perfect, simulate
from storetune.runners.traces import read_trace

PARTS = ("fit", "validation", "test")


@dataclass(frozen=True)
class AdmissionConfig:
    """A configuration of the admission space, with the inactive knobs at neutral values."""

    model_kind: str = "classifier"  # or "regressor", or "boosted_trees" (a classifier)
    labeling: str = "pays"  # cutoff (a percentile), period (HEIMDALL), pays (where a perfect failover pays most)
    threshold_percentile: float = 90.0
    class_weight: float = 1.0
    decision_threshold: float = 0.5  # a classifier's probability of slow above which it fails over
    loss_bias: float = 0.0
    network: str = "heimdall"
    noise_filter: bool = False
    history_depth: int = 3
    features: str | tuple[str, ...] = "extended"  # a feature set of FEATURE_SETS, or feature groups (explain)
    replicas: int = 3
    failover_cost_us: float = 30.0

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> AdmissionConfig:
        fields = {k: v for k, v in config.items() if k in cls.__dataclass_fields__}
        if "noise_filter" in fields:
            fields["noise_filter"] = fields["noise_filter"] in (True, "on")
        return cls(**fields)

    @property
    def is_classifier(self) -> bool:
        return self.model_kind != "regressor"

    @property
    def uses_threshold(self) -> bool:
        return self.model_kind == "regressor" or self.labeling == "cutoff"


class Pipeline:
    def __init__(self, trace: str | Path, train: float = 0.8, validation: float = 0.2, seed: int = 0,
                 epochs: int = 10, fmt: str | None = None):
        self.path = Path(trace)
        self.trace = read_trace(trace, fmt)
        self.ios = prepare(self.trace)
        self.split = Split.chronological(self.ios, train, validation)
        self.seed, self.epochs = seed, epochs
        self.sha256 = hashlib.sha256(self.path.read_bytes()).hexdigest()[:16]
        self._features: dict[tuple, np.ndarray] = {}
        self._models: dict[tuple, Any] = {}
        self._thresholds: dict[tuple, float] = {}

    # --- data ------------------------------------------------------------------------------------------
    def part(self, name: str) -> np.ndarray:
        return {"fit": self.split.fit, "validation": self.split.validation, "test": self.split.test,
                "train": self.split.train}[name]

    def reads(self, name: str) -> np.ndarray:
        """Indices of the reads of a part: admission decides on reads only."""
        part = self.part(name)
        return part[self.ios.is_read[part]]

    def X(self, depth: int, feature_set: str | tuple[str, ...]) -> np.ndarray:
        """Every I/O's features, scaled on the training part only. ``feature_set``: a name of
        FEATURE_SETS, or a tuple of feature groups (explain's ablation)."""
        if isinstance(feature_set, str):
            if feature_set not in FEATURE_SETS:
                raise AdmissionDataError(f"unknown feature set {feature_set!r}; known: {', '.join(FEATURE_SETS)}")
            feature_set = FEATURE_SETS[feature_set]
        key = (depth, feature_set)
        if key not in self._features:
            rows = features(self.ios, depth, feature_set)
            self._features[key] = MinMax(rows[self.split.fit])(rows)
        return self._features[key]

    def inputs(self, cfg: AdmissionConfig, name: str | None = None) -> np.ndarray:
        """The features a configuration's model reads: of every I/O, or of the reads of a part."""
        X = self.X(cfg.history_depth, cfg.features)
        return X if name is None else X[self.reads(name)]

    def threshold_us(self, percentile: float) -> float:
        """A latency percentile of the training reads: one threshold setting fits every trace."""
        return float(np.percentile(self.ios.latency_us[self.reads("fit")], percentile))

    def pays_threshold_us(self, replicas: int, failover_cost_us: float) -> float:
        """The latency above which failing a read over pays most: the perfect predictor's threshold on
        the training reads, for this deployment (r, f). The test part is never looked at."""
        key = ("pays", replicas, failover_cost_us)
        if key not in self._thresholds:
            latency = self.ios.latency_us[self.reads("fit")]
            jump = jumps(len(latency), replicas, np.random.default_rng(self.seed))
            best = perfect(latency, lambda busy: simulate(latency, busy, replicas, failover_cost_us,
                                                          jump=jump).summary())
            self._thresholds[key] = best["threshold_us"]
        return self._thresholds[key]

    def label_threshold_us(self, cfg: AdmissionConfig) -> float | None:
        """The latency above which a configuration's training labels call a read slow (None: periods)."""
        if cfg.model_kind == "regressor" or cfg.labeling == "cutoff":
            return self.threshold_us(cfg.threshold_percentile)
        if cfg.labeling == "pays":
            return self.pays_threshold_us(cfg.replicas, cfg.failover_cost_us)
        return None

    def labels(self, cfg: AdmissionConfig, name: str) -> np.ndarray:
        """Slow (True) or fast, for the reads of a part. Period labels come from the part's whole I/O
        sequence (writes shape the periods)."""
        threshold = self.label_threshold_us(cfg)
        if threshold is not None:
            return cutoff_labels(self.ios.latency_us[self.reads(name)], threshold)
        part = self.part(name)
        labels = period_labels(self.ios.latency_us[part], self.ios.throughput[part])
        return labels[self.ios.is_read[part]]

    def slow_labels(self, cfg: AdmissionConfig, name: str = "test") -> np.ndarray:
        """The labels of a part, refusing a part with no slow read: nothing to judge a model by."""
        labels = self.labels(cfg, name)
        if not labels.any():
            if cfg.uses_threshold:
                why = (f"no read slower than {self.threshold_us(cfg.threshold_percentile):.0f} us (the training reads' "
                       f"p{cfg.threshold_percentile:g}); choose a lower percentile or a longer trace")
            elif cfg.labeling == "pays":
                pays = self.pays_threshold_us(cfg.replicas, cfg.failover_cost_us)
                why = (f"no read slower than {pays:.0f} us, where failover pays most on the training part; try a "
                       "longer trace" if np.isfinite(pays) else
                       f"no read worth failing over: on the training part no failover pays at r={cfg.replicas}, "
                       f"f={cfg.failover_cost_us:g} us")
            else:
                why = "no read in a busy period (HEIMDALL's period labelling); try cutoff labelling or a longer trace"
            raise AdmissionDataError(f"{self.path.name}: the {name} part ({len(labels)} reads) holds {why}")
        return labels

    # --- models ----------------------------------------------------------------------------------------
    def model(self, cfg: AdmissionConfig) -> Any:
        from storetune.runners.admission.model import train  # torch: loaded only when a network is trained
        from storetune.runners.admission.spec import TrainSpec

        key = (cfg.model_kind, cfg.network if cfg.model_kind != "boosted_trees" else None, cfg.history_depth,
               cfg.features, self.seed, self.epochs)
        if cfg.is_classifier:  # the decision threshold never retrains: it only reads the scores
            key += (cfg.labeling, cfg.class_weight, cfg.noise_filter)
            if cfg.labeling == "cutoff":
                key += (cfg.threshold_percentile,)
            elif cfg.labeling == "pays":
                key += (cfg.replicas, cfg.failover_cost_us)
        else:
            key += (cfg.loss_bias,)
        if key not in self._models:
            spec = TrainSpec(cfg.model_kind, cfg.network, cfg.class_weight if cfg.is_classifier else 1.0,
                             cfg.loss_bias if cfg.model_kind == "regressor" else 0.0, epochs=self.epochs, seed=self.seed)
            rows = self.reads("fit")
            if cfg.is_classifier:
                target = self.labels(cfg, "fit")
                if cfg.noise_filter:  # the training part only: filtering test data would flatter the filter
                    keep = self._kept_reads(cfg)
                    rows, target = rows[keep], target[keep]
            else:
                target = self.ios.latency_us[rows]
            self._models[key] = train(self.inputs(cfg)[rows], target, spec)
        return self._models[key]

    def _kept_reads(self, cfg: AdmissionConfig) -> np.ndarray:
        part = self.split.fit
        lat, thpt = self.ios.latency_us[part], self.ios.throughput[part]
        threshold = self.label_threshold_us(cfg)
        labels = period_labels(lat, thpt) if threshold is None else cutoff_labels(lat, threshold)
        return noise_filter(labels, lat, thpt)[self.ios.is_read[part]]

    def decide(self, cfg: AdmissionConfig, name: str, joint: int = 1) -> np.ndarray:
        """EBUSY decisions for the reads of a part."""
        model = self.model(cfg)
        threshold = self.threshold_us(cfg.threshold_percentile) if cfg.uses_threshold else None
        return model.busy(self.inputs(cfg, name), threshold, joint, cfg.decision_threshold)

    # --- simulation ------------------------------------------------------------------------------------
    def simulate(self, busy: np.ndarray, name: str, replicas: int, failover_cost_us: float, seed: int) -> Outcome:
        latency = self.ios.latency_us[self.reads(name)]
        return simulate(latency, busy, replicas, failover_cost_us, jump=jumps(len(latency), replicas,
                                                                               np.random.default_rng(seed)))

    def check_threshold(self, threshold_us: float) -> None:
        latency = self.ios.latency_us[self.reads("fit")]
        if not latency.min() <= threshold_us <= latency.max():
            raise AdmissionDataError(f"a threshold of {threshold_us:g} us is outside the trace's training latencies "
                                     f"({latency.min():g} to {latency.max():g} us)")
