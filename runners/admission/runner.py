"""Evaluates an ``admission`` configuration on a trace: train (or reuse) the model it names,
decide EBUSY for the reads, and simulate failover to replicas.

While tuning, the configuration is judged on the validation part of the training split; the same
model's result on the untouched test part is recorded beside it (``test_*`` metrics), which is what
a campaign reports as ``test_value`` at the end, never what it optimises.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from storetune.runners.admission.pipeline import AdmissionConfig, Pipeline
from storetune.runners.base import Direction, Measurement, RunnerBase, Status, Workload
from storetune.runners.settings import AdmissionSettings
from storetune.search_spaces import Config, load_space


class AdmissionRunner(RunnerBase):
    name: ClassVar[str] = "admission"

    def __init__(self, settings: AdmissionSettings):
        super().__init__(settings.model_copy(update={"trace": str(Path(settings.trace).resolve())}))
        trace, train, validation, seed, epochs = (settings.trace, settings.train, settings.validation,
                                                  settings.seed, settings.epochs)
        self.space = load_space(settings.space)
        foreign = [n for n in self.space.names if n not in AdmissionConfig.__dataclass_fields__]
        if foreign:  # measure() reads only the policy's knobs: any other would be tuned on noise
            raise ValueError(f"the admission runner measures admission spaces, not {settings.space!r}: "
                             f"{', '.join(foreign[:3])}{' ...' if len(foreign) > 3 else ''} "
                             f"{'is no knob' if len(foreign) == 1 else 'are no knobs'} of the admission policy")
        self.pipeline = Pipeline(trace, train, validation, seed, epochs, settings.format)
        self.replica_cost_us = settings.replica_cost_us
        self.workload = Workload("trace", Path(trace).name.split(".trace")[0], {
            "sha256": self.pipeline.sha256, "train": train, "validation": validation, "seed": seed, "epochs": epochs})
        self.device = "simulated"

    def workload_fingerprint(self) -> dict[str, Any]:
        """The replayed trace's fingerprint (``runners.fingerprint``)."""
        from storetune.runners.fingerprint import trace_fingerprint

        return trace_fingerprint(self.pipeline.trace)

    def check_pins(self, fixed: dict[str, Any]) -> None:
        """One replica leaves a read nowhere to fail over to: the model, its labels and its threshold change
        nothing, and a campaign would measure one outcome over and over (in a search, r=1 is a fair point:
        no failover, the cheapest in replicas)."""
        if fixed.get("replicas") == 1:
            raise ValueError("replicas=1 leaves a read no replica to fail over to, so every configuration measures "
                             "the same: pin 2 or more, or leave replicas to the search")

    def metrics(self) -> dict[str, Direction | None]:
        return {"mean_latency_us": "min", "p99_latency_us": "min", "cost_us": "min", "failover_rate": "min"}

    def measure(self, config: Config, workload: Workload, *, seed: int) -> Measurement:
        cfg = AdmissionConfig.of(config)
        metrics: dict[str, float] = {}
        for part, prefix in (("validation", ""), ("test", "test_")):
            busy = self.pipeline.decide(cfg, part)
            outcome = self.pipeline.simulate(busy, part, cfg.replicas, cfg.failover_cost_us, seed)
            summary = outcome.summary()
            summary["cost_us"] = summary["mean_latency_us"] + self.replica_cost_us * cfg.replicas
            metrics.update({prefix + k: v for k, v in summary.items()})
        env = {"engine": "failover-simulator", "trace": self.pipeline.path.name, "seed": seed,
               "threshold_us": self.pipeline.threshold_us(cfg.threshold_percentile) if cfg.uses_threshold else None}
        return Measurement(Status.SUCCEEDED, metrics, env=env)
