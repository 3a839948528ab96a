"""`storetune admission`: train and judge an admission model, simulate failover, run the baselines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
import typer

from storetune.api.cli.common import DbOption, JsonOption, UserError, console, open_history

app = typer.Typer(no_args_is_help=True, help="ML I/O admission on a block trace (FlashNet or replayed).")

TraceOption = Annotated[Path, typer.Option(help="A trace with per-I/O latency (FlashNet format, or a replay).")]
SplitOption = Annotated[float, typer.Option(help="Share of the trace, from its start, that trains.")]
SeedOption = Annotated[int, typer.Option(help="Seed of the model and of the failover draws.")]
ReplicasOption = Annotated[int, typer.Option(help="Replicas a request may try; the last always serves.")]
FailoverOption = Annotated[float, typer.Option(help="Cost of one failover, in microseconds.")]


def _config(model: str, labeling: str, network: str, history_depth: int, threshold_percentile: float,
            class_weight: float, loss_bias: float, noise_filter: bool, decision_threshold: float = 0.5,
            features: str = "extended", replicas: int = 3, failover_cost_us: float = 30.0) -> Any:
    from storetune.runners.admission.features import FEATURE_SETS
    from storetune.runners.admission.spec import KINDS
    from storetune.runners.admission.pipeline import AdmissionConfig

    if model not in KINDS:
        raise UserError(f"--model {model!r}: choose {', '.join(KINDS)}")
    if model != "regressor" and class_weight < 1:
        raise UserError(f"--class-weight must be at least 1 for a classifier, not {class_weight}")
    if not 0 < decision_threshold < 1:
        raise UserError(f"--decision-threshold must be in (0, 1), not {decision_threshold:g}")
    if model == "regressor" and not 0 <= loss_bias < 1:
        raise UserError(f"--loss-bias must be in [0, 1) for the regressor, not {loss_bias}")
    if not 0 < threshold_percentile < 100:
        raise UserError(f"--threshold-percentile must be in (0, 100), not {threshold_percentile:g}")
    if labeling not in ("cutoff", "period", "pays"):
        raise UserError(f"--labeling {labeling!r}: choose pays, cutoff or period")
    if features not in FEATURE_SETS:
        raise UserError(f"--features {features!r}: choose {', '.join(FEATURE_SETS)}")
    return AdmissionConfig(model_kind=model, labeling=labeling, network=network, history_depth=history_depth,
                           features=features, replicas=replicas, failover_cost_us=failover_cost_us,
                           threshold_percentile=threshold_percentile, class_weight=class_weight,
                           loss_bias=loss_bias, noise_filter=noise_filter, decision_threshold=decision_threshold)


def _failover_pipeline(trace: Path, split: float, seed: int, replicas: int, failover_cost_us: float,
                       epochs: int = 10, validation: float = 0.2, fmt: str | None = None) -> Any:
    from storetune.runners.admission.pipeline import Pipeline

    if replicas < 1:
        raise UserError(f"--replicas must be at least 1, not {replicas}")
    if not (np.isfinite(failover_cost_us) and failover_cost_us >= 0):
        raise UserError(f"--failover-cost-us must be a finite number of microseconds, at least 0, not {failover_cost_us}")
    return Pipeline(trace, train=split, validation=validation, seed=seed, epochs=epochs, fmt=fmt)


def _campaign_best(campaign: int, db: str | None, trace: Path, split: float, seed: int, replicas: int,
                   failover_cost_us: float) -> tuple[Any, Any]:
    """The pipeline an admission campaign judged its trials on (its trace, split, seed, epochs), and its best
    configuration; refused unless the trace, --split, --seed, r and f are the campaign's own."""
    from storetune.runners.admission.pipeline import AdmissionConfig
    from storetune.runners.settings import AdmissionSettings
    from storetune.tuner import best_trial

    history = open_history(db, migrate=False)
    record = history.campaign(campaign)
    if record.runner != "admission":
        raise UserError(f"campaign {campaign} tuned the {record.runner} runner, not admission")
    settings = AdmissionSettings(**record.runner_settings)
    if (settings.train, settings.seed) != (split, seed):
        raise UserError(f"campaign {campaign} was tuned with --split {settings.train} --seed {settings.seed}; pass "
                        "them, or its test part and models would differ")
    top = best_trial(history.trials(campaign), record.objective_direction, record.adaptive)
    if top is None:
        state = " yet" if record.state in ("queued", "running") else f" (it is {record.state})"
        raise UserError(f"campaign {campaign} has no succeeded trial{state}")
    cfg = AdmissionConfig.of(top.config)
    if (cfg.replicas, cfg.failover_cost_us) != (replicas, failover_cost_us):
        raise UserError(f"campaign {campaign}'s best runs r={cfg.replicas}, f={cfg.failover_cost_us:g} us; "
                        f"pass --replicas {cfg.replicas} --failover-cost-us {cfg.failover_cost_us:g}")
    pipeline = _failover_pipeline(trace, split, seed, replicas, failover_cost_us, settings.epochs,
                                  settings.validation, settings.format)
    if pipeline.sha256 != record.workload.get("params", {}).get("sha256"):
        raise UserError(f"campaign {campaign} was tuned on {record.workload_name}, not on {trace.name}: its test "
                        "part would differ")
    return pipeline, cfg


def _dumps(result: Any) -> str:
    """Strict JSON: a value that is not finite (the perfect predictor's threshold when no failover pays, an
    undefined share) is null, not Python's Infinity or NaN."""
    def finite(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [finite(v) for v in value]
        if isinstance(value, (float, np.floating)):
            return float(value) if np.isfinite(value) else None
        return value.item() if isinstance(value, np.generic) else value

    return json.dumps(finite(result), allow_nan=False)


def _emit(result: dict[str, Any], as_json: bool, title: str) -> None:
    if as_json:
        print(_dumps(result))
        return
    console.print(f"[bold]{title}[/]")
    for key, value in result.items():
        shown = f"{value:.6g}" if isinstance(value, float) else value  # 10400.5, not 1.04e+04
        console.print(f"  {key} = {shown}", markup=False, highlight=False)


@app.command()
def train(
    trace: TraceOption,
    model: Annotated[str, typer.Option(help="classifier (a network), regressor, or boosted_trees (a classifier "
                                            "of gradient-boosted trees).")] = "boosted_trees",
    labeling: Annotated[str, typer.Option(help="pays (slow where a perfect failover pays most on the training part), "
                                               "cutoff (LinnOS: a latency percentile) or period (HEIMDALL).")]
    = "pays",
    network: Annotated[str, typer.Option(help="heimdall (128-16-1) or linnos (256-1).")] = "heimdall",
    history_depth: Annotated[int, typer.Option(help="Past I/Os the features describe.")] = 3,
    features: Annotated[str, typer.Option(help="heimdall (HEIMDALL's five), linnos (LinnOS's digits), or extended "
                                               "(heimdall, outstanding I/Os and locality).")] = "extended",
    threshold_percentile: Annotated[float, typer.Option(help="Slow above this latency percentile (cutoff, regressor).")]
    = 90.0,
    class_weight: Annotated[float, typer.Option(help="A classifier's weight of the slow class (>= 1).")] = 1.0,
    decision_threshold: Annotated[float, typer.Option(help="A classifier fails a read over above this probability "
                                                           "of slow, in (0, 1).")] = 0.5,
    loss_bias: Annotated[float, typer.Option(help="The regressor's AMSE bias, in [0, 1).")] = 0.0,
    noise_filter: Annotated[bool, typer.Option(help="HEIMDALL's 3-stage filter on the training labels (made for "
                                                    "period labels).")] = False,
    joint: Annotated[int, typer.Option(help="I/Os per decision (joint inference).")] = 1,
    replicas: Annotated[int, typer.Option(help="Replicas of the deployment (pays labelling).")] = 3,
    failover_cost_us: Annotated[float, typer.Option(help="Cost of one failover, in microseconds (pays labelling).")]
    = 30.0,
    split: SplitOption = 0.8,
    seed: SeedOption = 0,
    as_json: JsonOption = False,
) -> None:
    """Train a model and report its accuracy on the test part: ROC-AUC, PR-AUC, F1, FNR, FPR."""
    from storetune.runners.admission.model import accuracy, inference_cost

    if joint < 1:
        raise UserError(f"--joint must be at least 1 (I/Os per decision), not {joint}")
    cfg = _config(model, labeling, network, history_depth, threshold_percentile, class_weight, loss_bias, noise_filter,
                  decision_threshold, features, replicas, failover_cost_us)
    pipeline = _failover_pipeline(trace, split, seed, replicas, failover_cost_us)
    labels = pipeline.slow_labels(cfg, "test")  # never filtered: the test part is judged as it is
    trained = pipeline.model(cfg)
    X = pipeline.inputs(cfg, "test")
    result: dict[str, Any] = {"trace": trace.name, "model": model, "labeling": labeling if cfg.is_classifier else
                              "cutoff", "network": network if model != "boosted_trees" else None,
                              "history_depth": history_depth, "features": features, "joint": joint,
                              "test_reads": int(len(labels)),
                              **({"decision_threshold": decision_threshold} if cfg.is_classifier else {})}
    result.update(accuracy(labels, trained.scores(X), pipeline.decide(cfg, "test", joint)))
    result.update(inference_cost(trained, X, joint=max(joint, 4)))
    _emit(result, as_json, f"{model} on {trace.name}, test part")


@app.command()
def simulate(
    trace: TraceOption,
    threshold_us: Annotated[Optional[float], typer.Option(help="Fail over when the predicted latency exceeds this "
                                                               "(default: the training part's 90th percentile).")]
    = None,
    replicas: ReplicasOption = 3,
    failover_cost_us: FailoverOption = 30.0,
    fan_out: Annotated[int, typer.Option(help="Sub-requests per user request (tail at scale); 1: none.")] = 1,
    split: SplitOption = 0.8,
    seed: SeedOption = 0,
    as_json: JsonOption = False,
) -> None:
    """Simulate failover on the test part with the regressor at a latency threshold."""
    from storetune.runners.admission.pipeline import AdmissionConfig
    from storetune.runners.admission.simulator import fan_out as tail_at_scale

    if fan_out < 1:
        raise UserError(f"--fan-out must be at least 1 (sub-requests per user request; 1: none), not {fan_out}")
    pipeline = _failover_pipeline(trace, split, seed, replicas, failover_cost_us)
    threshold = threshold_us if threshold_us is not None else pipeline.threshold_us(90)
    pipeline.check_threshold(threshold)
    regressor = AdmissionConfig(model_kind="regressor")
    X = pipeline.inputs(regressor, "test")
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
    campaign: Annotated[Optional[int], typer.Option(help="Also judge this admission campaign's best configuration "
                                                         "(tuned on this trace), as 'tuned'.")] = None,
    db: DbOption = None,
    split: SplitOption = 0.8,
    seed: SeedOption = 0,
    as_json: JsonOption = False,
) -> None:
    """Every baseline's mean and p99 latency and failover rate on the test part."""
    from storetune.runners.admission.baselines import baselines as run_baselines

    if not 0 < threshold_percentile < 100:
        raise UserError(f"--threshold-percentile must be in (0, 100), not {threshold_percentile:g}")
    tuned = None
    if campaign is None:
        pipeline = _failover_pipeline(trace, split, seed, replicas, failover_cost_us)
    else:  # the campaign's own pipeline (validation share, epochs): its best model, not a look-alike
        pipeline, best = _campaign_best(campaign, db, trace, split, seed, replicas, failover_cost_us)
        tuned = {"tuned": best}
    results = run_baselines(pipeline, replicas, failover_cost_us, threshold_percentile, seed, tuned)
    if as_json:
        print(_dumps({"baselines": results}))
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


@app.command()
def explain(
    trace: TraceOption,
    replicas: ReplicasOption = 3,
    failover_cost_us: FailoverOption = 30.0,
    model: Annotated[Optional[list[str]], typer.Option(help="Model kinds to compare (repeat); default: all three.")]
    = None,
    epochs: Annotated[int, typer.Option(help="Training epochs of the networks.")] = 10,
    part: Annotated[str, typer.Option(help="The part that judges: test, or validation (to choose without looking "
                                           "at the test part).")] = "test",
    split: SplitOption = 0.8,
    seed: SeedOption = 0,
    as_json: JsonOption = False,
) -> None:
    """Where the signal is: a feature ablation, ROC-AUC and PR-AUC per model kind and feature set, calibration,
    history depth and joint inference, for pays, cutoff and period labels of the test (or validation) part."""
    from storetune.runners.admission.explain import explain as run_explain
    from storetune.runners.admission.spec import KINDS

    kinds = tuple(model or KINDS)
    for kind in kinds:
        if kind not in KINDS:
            raise UserError(f"--model {kind!r}: choose {', '.join(KINDS)}")
    if epochs < 1:
        raise UserError(f"--epochs must be at least 1, not {epochs}")
    if part not in ("test", "validation"):
        raise UserError(f"--part {part!r}: choose test or validation")
    pipeline = _failover_pipeline(trace, split, seed, replicas, failover_cost_us, epochs)
    result = run_explain(pipeline, replicas, failover_cost_us, kinds, part=part)
    if as_json:
        print(_dumps(result))
        return
    show_explanation(result)


def show_explanation(result: dict[str, Any]) -> None:
    from rich.table import Table

    console.print(f"[bold]where the signal is: {result['trace']}, {result['part']} part ({result['reads']} reads)[/]")
    console.print(f"  pays: slow above {result['pays_us']:.0f} us (p{result['pays_percentile']:.1f} of the training "
                  f"reads), where a perfect predictor's failover pays most at r={result['replicas']}, "
                  f"f={result['failover_cost_us']:g} us; cutoff: slow above {result['cutoff_us']:.0f} us "
                  f"(p{result['cutoff_percentile']:g}); period: HEIMDALL's busy periods", markup=False, highlight=False)
    for labeling, r in result["labelings"].items():
        table = Table(title=f"{labeling} labels: {r['slow_share']:.1%} of the reads slow (PR-AUC of a coin: "
                            f"{r['slow_share']:.3f})", title_justify="left")
        for column in ("features / model", "ROC-AUC", "PR-AUC", "Brier"):
            table.add_column(column, justify="left" if column.startswith("features") else "right")
        for name, a in r["ablation"].items():
            shown = "all four (heimdall, pending, locality, recent)" if name == "all" else name
            table.add_row(f"boosted_trees, {shown}", f"{a['roc_auc']:.3f}", f"{a['pr_auc']:.3f}", "")
        for name, a in r["models"].items():
            brier = f"{a['calibration']['brier']:.3f}" if "calibration" in a else ""
            table.add_row(name, f"{a['roc_auc']:.3f}", f"{a['pr_auc']:.3f}", brier)
        for depth, a in r["history_depth"].items():
            table.add_row(f"boosted_trees, heimdall, depth {depth}", f"{a['roc_auc']:.3f}", f"{a['pr_auc']:.3f}", "")
        joint = next(v for k, v in r.items() if k.startswith("joint"))
        table.add_row("boosted_trees, extended, joint inference of 4", f"{joint['roc_auc']:.3f}",
                      f"{joint['pr_auc']:.3f}", "")
        console.print(table)
        loss = r["ablation"]["all"]["roc_auc"] - r["ablation"][f"without {r['most_signal']}"]["roc_auc"]
        console.print(f"  most signal ({labeling}): {r['most_signal']}, whose removal costs {loss:.3f} ROC-AUC",
                      markup=False, highlight=False)
        calibrated = {k: v for k, v in r["models"].items() if "calibration" in v}
        if calibrated:
            name = max(calibrated, key=lambda k: calibrated[k]["roc_auc"])
            curve = calibrated[name]["calibration"]["curve"]
            points = ", ".join(f"{p['predicted']:.2f}->{p['observed']:.2f}" for p in curve)
            console.print(f"  calibration of {name} (predicted -> observed share slow, deciles): {points}",
                          markup=False, highlight=False)
    console.print("  groups: " + "; ".join(f"{k}: {v}" for k, v in result["groups"].items()), markup=False,
                  highlight=False)
