"""One trace's admission pipeline: features, labels, cached models and their decisions, and the
simulated latency of a configuration on the validation or the test part of the trace.

Models are cached by everything that changes their training (labelling, kind, network, depth, bias,
noise filter, seed, and the threshold only for cutoff-labelled classifiers), so a threshold change
never retrains a regressor, as the ML-MittOS thesis notes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from runners.admission.features import AdmissionDataError, MinMax, Split, features, prepare
from runners.admission.labels import cutoff_labels, noise_filter, period_labels
from runners.admission.simulator import Outcome, jumps, simulate
from runners.traces import read_trace

PARTS = ("fit", "validation", "test")


@dataclass(frozen=True)
class AdmissionConfig:
    """A configuration of the admission space, with the inactive knobs at neutral values."""

    model_kind: str = "classifier"  # or "regressor", or "boosted_trees" (a classifier)
    labeling: str = "period"
    threshold_percentile: float = 90.0
    class_weight: float = 1.0
    decision_threshold: float = 0.5  # a classifier's probability of slow above which it fails over
    loss_bias: float = 0.0
    network: str = "heimdall"
    noise_filter: bool = True
    history_depth: int = 3
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
        self._features: dict[int, np.ndarray] = {}
        self._models: dict[tuple, Any] = {}

    # --- data ------------------------------------------------------------------------------------------
    def part(self, name: str) -> np.ndarray:
        return {"fit": self.split.fit, "validation": self.split.validation, "test": self.split.test,
                "train": self.split.train}[name]

    def reads(self, name: str) -> np.ndarray:
        """Indices of the reads of a part: admission decides on reads only."""
        part = self.part(name)
        return part[self.ios.is_read[part]]

    def X(self, depth: int) -> np.ndarray:
        if depth not in self._features:
            rows = features(self.ios, depth)
            self._features[depth] = MinMax(rows[self.split.fit])(rows)  # scaled on the training part only
        return self._features[depth]

    def threshold_us(self, percentile: float) -> float:
        """A latency percentile of the training reads: one threshold setting fits every trace."""
        return float(np.percentile(self.ios.latency_us[self.reads("fit")], percentile))

    def labels(self, cfg: AdmissionConfig, name: str) -> np.ndarray:
        """Slow (True) or fast, for the reads of a part. Period labels come from the part's whole I/O
        sequence (writes shape the periods)."""
        if cfg.model_kind == "regressor" or cfg.labeling == "cutoff":
            return cutoff_labels(self.ios.latency_us[self.reads(name)], self.threshold_us(cfg.threshold_percentile))
        part = self.part(name)
        labels = period_labels(self.ios.latency_us[part], self.ios.throughput[part])
        return labels[self.ios.is_read[part]]

    # --- models ----------------------------------------------------------------------------------------
    def model(self, cfg: AdmissionConfig) -> Any:
        from runners.admission.model import TrainSpec, train  # torch: loaded only when a model is trained

        key = (cfg.model_kind, cfg.network if cfg.model_kind != "boosted_trees" else None, cfg.history_depth,
               self.seed, self.epochs)
        if cfg.is_classifier:  # the decision threshold never retrains: it only reads the scores
            key += (cfg.labeling, cfg.class_weight, cfg.noise_filter)
            if cfg.labeling == "cutoff":
                key += (cfg.threshold_percentile,)
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
            self._models[key] = train(self.X(cfg.history_depth)[rows], target, spec)
        return self._models[key]

    def _kept_reads(self, cfg: AdmissionConfig) -> np.ndarray:
        part = self.split.fit
        lat, thpt = self.ios.latency_us[part], self.ios.throughput[part]
        labels = (period_labels(lat, thpt) if cfg.labeling == "period"
                  else cutoff_labels(lat, self.threshold_us(cfg.threshold_percentile)))
        return noise_filter(labels, lat, thpt)[self.ios.is_read[part]]

    def decide(self, cfg: AdmissionConfig, name: str, joint: int = 1) -> np.ndarray:
        """EBUSY decisions for the reads of a part."""
        model = self.model(cfg)
        threshold = self.threshold_us(cfg.threshold_percentile) if cfg.uses_threshold else None
        return model.busy(self.X(cfg.history_depth)[self.reads(name)], threshold, joint, cfg.decision_threshold)

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
