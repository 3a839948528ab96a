"""`storetune admission`: train and judge an admission model, simulate failover, run the baselines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
import typer

from api.common import JsonOption, UserError, console

app = typer.Typer(no_args_is_help=True, help="ML I/O admission on a block trace (FlashNet or replayed).")

TraceOption = Annotated[Path, typer.Option(help="A trace with per-I/O latency (FlashNet format, or a replay).")]
SplitOption = Annotated[float, typer.Option(help="Share of the trace, from its start, that trains.")]
SeedOption = Annotated[int, typer.Option(help="Seed of the model and of the failover draws.")]
ReplicasOption = Annotated[int, typer.Option(help="Replicas a request may try; the last always serves.")]
FailoverOption = Annotated[float, typer.Option(help="Cost of one failover, in microseconds.")]


def _config(model: str, labeling: str, network: str, history_depth: int, threshold_percentile: float,
            class_weight: float, loss_bias: float, noise_filter: bool, decision_threshold: float = 0.5) -> Any:
    from runners.admission.model import KINDS
    from runners.admission.pipeline import AdmissionConfig

    if model not in KINDS:
        raise UserError(f"--model {model!r}: choose {', '.join(KINDS)}")
    if model != "regressor" and class_weight < 1:
        raise UserError(f"--class-weight must be at least 1 for a classifier, not {class_weight}")
    if not 0 < decision_threshold < 1:
        raise UserError(f"--decision-threshold must be in (0, 1), not {decision_threshold:g}")
    if model == "regressor" and not 0 <= loss_bias < 1:
        raise UserError(f"--loss-bias must be in [0, 1) for the regressor, not {loss_bias}")
    if labeling not in ("cutoff", "period"):
        raise UserError(f"--labeling {labeling!r}: choose cutoff or period")
    return AdmissionConfig(model_kind=model, labeling=labeling, network=network, history_depth=history_depth,
                           threshold_percentile=threshold_percentile, class_weight=class_weight,
                           loss_bias=loss_bias, noise_filter=noise_filter, decision_threshold=decision_threshold)


def _failover_pipeline(trace: Path, split: float, seed: int, replicas: int, failover_cost_us: float) -> Any:
    from runners.admission.pipeline import Pipeline

    if replicas < 1:
        raise UserError(f"--replicas must be at least 1, not {replicas}")
    if not (np.isfinite(failover_cost_us) and failover_cost_us >= 0):
        raise UserError(f"--failover-cost-us must be a finite number of microseconds, at least 0, not {failover_cost_us}")
    return Pipeline(trace, train=split, seed=seed)


def _emit(result: dict[str, Any], as_json: bool, title: str) -> None:
    if as_json:
        print(json.dumps(result, default=float))
        return
    console.print(f"[bold]{title}[/]")
    for key, value in result.items():
        shown = f"{value:.4g}" if isinstance(value, float) else value
        console.print(f"  {key} = {shown}", markup=False, highlight=False)


@app.command()
def train(
    trace: TraceOption,
    model: Annotated[str, typer.Option(help="classifier (a network), regressor, or boosted_trees (a classifier "
                                            "of gradient-boosted trees).")] = "classifier",
    labeling: Annotated[str, typer.Option(help="cutoff (LinnOS) or period (HEIMDALL).")] = "period",
    network: Annotated[str, typer.Option(help="heimdall (128-16-1) or linnos (256-1).")] = "heimdall",
    history_depth: Annotated[int, typer.Option(help="Past I/Os the features describe.")] = 3,
    threshold_percentile: Annotated[float, typer.Option(help="Slow above this latency percentile (cutoff, regressor).")]
    = 90.0,
    class_weight: Annotated[float, typer.Option(help="A classifier's weight of the slow class (>= 1).")] = 1.0,
    decision_threshold: Annotated[float, typer.Option(help="A classifier fails a read over above this probability "
                                                           "of slow, in (0, 1).")] = 0.5,
    loss_bias: Annotated[float, typer.Option(help="The regressor's AMSE bias, in [0, 1).")] = 0.0,
    noise_filter: Annotated[bool, typer.Option(help="HEIMDALL's 3-stage filter on the training labels.")] = True,
    joint: Annotated[int, typer.Option(help="I/Os per decision (joint inference).")] = 1,
    split: SplitOption = 0.8,
    seed: SeedOption = 0,
    as_json: JsonOption = False,
) -> None:
    """Train a model and report its accuracy on the test part: ROC-AUC, PR-AUC, F1, FNR, FPR."""
    from runners.admission.model import accuracy, inference_cost
    from runners.admission.pipeline import Pipeline

    cfg = _config(model, labeling, network, history_depth, threshold_percentile, class_weight, loss_bias, noise_filter,
                  decision_threshold)
    pipeline = Pipeline(trace, train=split, seed=seed)
    trained = pipeline.model(cfg)
    X = pipeline.X(cfg.history_depth)[pipeline.reads("test")]
    labels = pipeline.labels(cfg, "test")  # never filtered: the test part is judged as it is
    result: dict[str, Any] = {"trace": trace.name, "model": model, "labeling": labeling if cfg.is_classifier else
                              "cutoff", "network": network if model != "boosted_trees" else None,
                              "history_depth": history_depth, "joint": joint, "test_reads": int(len(labels)),
                              **({"decision_threshold": decision_threshold} if cfg.is_classifier else {})}
    result.update(accuracy(labels, trained.scores(X), pipeline.decide(cfg, "test", joint)))
    result.update(inference_cost(trained, X, joint=max(joint, 4)))
    _emit(result, as_json, f"{model} on {trace.name}, test part")


@app.command()
def simulate(
    trace: TraceOption,
    threshold_us: Annotated[Optional[float], typer.Option(help="Fail over when the predicted latency exceeds this.")]
    = None,
    replicas: ReplicasOption = 3,
    failover_cost_us: FailoverOption = 30.0,
    fan_out: Annotated[int, typer.Option(help="Sub-requests per user request (tail at scale); 1: none.")] = 1,
    split: SplitOption = 0.8,
    seed: SeedOption = 0,
    as_json: JsonOption = False,
) -> None:
    """Simulate failover on the test part with the regressor at a latency threshold."""
    from runners.admission.pipeline import AdmissionConfig
    from runners.admission.simulator import fan_out as tail_at_scale

    pipeline = _failover_pipeline(trace, split, seed, replicas, failover_cost_us)
    threshold = threshold_us if threshold_us is not None else pipeline.threshold_us(90)
    pipeline.check_threshold(threshold)
    regressor = AdmissionConfig(model_kind="regressor")
    X = pipeline.X(regressor.history_depth)[pipeline.reads("test")]
    busy = pipeline.model(regressor).scores(X) > threshold
    outcome = pipeline.simulate(busy, "test", replicas, failover_cost_us, seed)
    result: dict[str, Any] = {"trace": trace.name, "threshold_us": threshold, "replicas": replicas,
                              "failover_cost_us": failover_cost_us, **outcome.summary()}
    if fan_out > 1:
        users = tail_at_scale(outcome.latency_us, fan_out, np.random.default_rng(seed))
        result.update({"fan_out": fan_out, "fan_out_mean_latency_us": float(users.mean()),
                       "fan_out_p99_latency_us": float(np.percentile(users, 99))})
    _emit(result, as_json, f"failover on {trace.name}, test part")


@app.command()
def baselines(
    trace: TraceOption,
    replicas: ReplicasOption = 3,
    failover_cost_us: FailoverOption = 30.0,
    threshold_percentile: Annotated[float, typer.Option(help="The hand-chosen threshold, as a percentile.")] = 90.0,
    split: SplitOption = 0.8,
    seed: SeedOption = 0,
    as_json: JsonOption = False,
) -> None:
    """Every baseline's mean and p99 latency and failover rate on the test part."""
    from runners.admission.baselines import baselines as run_baselines

    pipeline = _failover_pipeline(trace, split, seed, replicas, failover_cost_us)
    results = run_baselines(pipeline, replicas, failover_cost_us, threshold_percentile, seed)
    if as_json:
        print(json.dumps({"baselines": results}, default=float))
        return
    console.print(f"[bold]baselines on {trace.name}, test part, r={replicas}, f={failover_cost_us:g} us[/]")
    for name, r in results.items():
        if "assumes" in r:
            name = f"{name}*"
        console.print(f"  {name:<20}mean {r['mean_latency_us']:9.1f} us   p99 {r['p99_latency_us']:9.1f} us   "
                      f"failover {r['failover_rate']:.3f}   share of the perfect gain {r['perfect_gain_share']:6.1%}",
                      markup=False, highlight=False)
    for name, r in results.items():
        if "assumes" in r:
            console.print(f"  * {name}: {r['assumes']}", markup=False, highlight=False)
