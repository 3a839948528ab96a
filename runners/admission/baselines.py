"""The baselines an admission configuration is judged against, on the test part of a trace, all
with the same failover draws (common random numbers): no admission, random rejection, hedging
after a timeout, a perfect predictor, IODA's fail-if-slow, busy remaining time and time windows (which
need device support), ML-MittOS's threshold and bias equations, and its strategies over the regressor's
loss bias: bias_hindsight (the thesis's "oracle": the best of ten biases on the test part itself), global,
greedy and greedy-skip.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np

from storetune.runners.admission.analytics import Candidate, bias_equation, bias_shift, choose, threshold_equation
from storetune.runners.admission.pipeline import AdmissionConfig, Pipeline
from storetune.runners.admission.simulator import jumps, perfect, simulate, time_windows

BIAS_GRID = tuple(round(0.1 * i, 1) for i in range(10))  # 0.0 .. 0.9, as in the thesis
STRATEGIES = ("bias_hindsight", "global", "greedy", "greedy_skip")


def hedging(latency: np.ndarray, timeout_us: float, replicas: int, failover_cost_us: float,
            jump: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A request not done by k x timeout is also sent to the next replica (paying f); it completes
    with the first copy to finish. Returns latencies and whether it hedged."""
    n = len(latency)
    done = latency.copy()
    for k in range(1, replicas):
        target = jump[k - 1] + (jump[k - 1] >= np.arange(n))
        done = np.minimum(done, k * timeout_us + failover_cost_us + latency[target])
    return done, latency > timeout_us


def baselines(pipeline: Pipeline, replicas: int, failover_cost_us: float, threshold_percentile: float = 90.0,
              seed: int = 0, tuned: Mapping[str, AdmissionConfig] | None = None) -> dict[str, dict[str, Any]]:
    """Each baseline's mean and p99 latency and failover rate on the test reads; ``tuned``: more
    configurations to judge beside them (a campaign's best), on the same failover draws."""
    if replicas < 1:
        raise ValueError(f"replicas must be at least 1, not {replicas}")
    test, fit = pipeline.reads("test"), pipeline.reads("fit")
    latency, fit_latency = pipeline.ios.latency_us[test], pipeline.ios.latency_us[fit]
    threshold = pipeline.threshold_us(threshold_percentile)
    pipeline.slow_labels(AdmissionConfig(model_kind="regressor", threshold_percentile=threshold_percentile))
    rng = np.random.default_rng(seed)
    jump, fit_jump = jumps(len(test), replicas, rng), jumps(len(fit), replicas, rng)

    def on_test(busy: np.ndarray) -> dict[str, float]:
        return simulate(latency, busy, replicas, failover_cost_us, jump=jump).summary()

    def on_fit(busy: np.ndarray) -> float:
        return simulate(fit_latency, busy, replicas, failover_cost_us, jump=fit_jump).summary()["mean_latency_us"]

    out: dict[str, dict[str, Any]] = {
        "no_admission": on_test(np.zeros(len(test), bool)),
        "random": on_test(rng.random(len(test)) < 1 - threshold_percentile / 100),
        "perfect": perfect(latency, on_test),
    }
    # IODA's strategies, with device support the host-only policies do not have (a perfect busy flag)
    slow = latency > threshold
    out["fail_if_slow"] = {**on_test(slow), "assumes": "the device fails a read that would be slow (IOD1): a perfect "
                                                       "busy flag at the threshold"}
    out["brt"] = {**simulate(latency, slow, replicas, failover_cost_us, jump=jump, brt=True).summary(),
                  "assumes": "fail_if_slow, and when every replica is busy the one free first serves (IOD2)"}
    if replicas > 1:
        windows = time_windows(latency, slow, replicas, failover_cost_us, np.random.default_rng(seed))
        out["time_windows"] = {**windows.summary(), "assumes": "replicas take turns to be busy, so a failover "
                                                               "lands on a free one (IOD3)"}
    hedged, sent = hedging(latency, threshold, replicas, failover_cost_us, jump)
    p99 = float(np.percentile(hedged, 99))
    out["hedging"] = {"mean_latency_us": float(hedged.mean()), "p99_latency_us": p99, "failover_rate": float(sent.mean())}

    unbiased = AdmissionConfig(model_kind="regressor", loss_bias=0.0, threshold_percentile=threshold_percentile)
    X = pipeline.inputs(unbiased)
    fit_pred = pipeline.model(unbiased).scores(X[fit])
    test_pred = pipeline.model(unbiased).scores(X[test])
    chosen = threshold_equation(fit_pred, fit_latency, failover_cost_us, replicas)
    out["threshold_equation"] = {**on_test(test_pred > chosen), "threshold_us": chosen}
    b = bias_equation(fit_pred, fit_latency, threshold, failover_cost_us, replicas)
    shift = bias_shift(b, float(fit_latency.mean()))
    out["bias_equation"] = {**on_test(test_pred + shift > threshold), "loss_bias": b}

    candidates = []
    for value in BIAS_GRID:
        cfg = AdmissionConfig(model_kind="regressor", loss_bias=value, threshold_percentile=threshold_percentile)
        model = pipeline.model(cfg)
        candidates.append(Candidate(value, model.scores(X[fit]) > threshold, model.scores(X[test]) > threshold))
    for strategy in STRATEGIES:
        c = choose(strategy, candidates, lambda c: on_fit(c.train_busy), lambda c: on_test(c.test_busy)["mean_latency_us"])
        out[strategy] = {**on_test(c.test_busy), "loss_bias": c.value}
    for name, cfg in (tuned or {}).items():
        out[name] = {**on_test(pipeline.decide(cfg, "test")), "config": asdict(cfg)}
    none, best = out["no_admission"]["mean_latency_us"], out["perfect"]["mean_latency_us"]
    for values in out.values():
        values["threshold_us"] = values.get("threshold_us", threshold)
        values["perfect_gain_share"] = gain_share(none, best, values["mean_latency_us"])
    return out


def gain_share(none: float, perfect_mean: float, mean: float) -> float:
    """The share of the perfect predictor's gain over no admission that a strategy gets (1: all of
    it, 0: none, negative: worse than no admission)."""
    return (none - mean) / (none - perfect_mean) if none > perfect_mean else float("nan")
