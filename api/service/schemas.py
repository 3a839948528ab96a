"""The REST API's request and response bodies: ``XCreate`` in, ``XPublic`` out, lists as pages."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from storetune.tuner.algorithms.registry import DEFAULT_ALGORITHM, SEARCH_ALGORITHMS
from storetune.tuner.objectives.fidelity import BURN_IN, GUARD

T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    offset: int
    limit: int


class Objective(BaseModel):
    metric: str
    direction: Literal["min", "max"]


class CampaignCreate(BaseModel):
    """A new campaign: what `storetune tune` takes, as JSON."""

    model_config = ConfigDict(extra="forbid")

    runner: str = Field(description="dataset, command, device or admission (GET /runners).")
    runner_settings: dict[str, Any] = Field(default_factory=dict,
                                            description="The runner's settings (their schema: GET /runners).")
    algorithm: str | None = Field(None, description=f"GET /algorithms (default: {DEFAULT_ALGORITHM}; nsga2 for a pareto "
                                                    "objective).")
    algorithm_params: dict[str, Any] = Field(default_factory=dict, description="Hyperparameters (GET /algorithms).")
    budget: int = Field(50, ge=1, le=1_000_000, description="Evaluations to spend.")
    seed: int = Field(0, ge=0, lt=2**63)
    repeats: int = Field(1, ge=1, le=100, description="Measurements per configuration.")
    max_repeats: int | None = Field(None, ge=1, le=100, description=(
        "Adaptive repeats: a configuration that looks better than the best so far is measured again, up to this "
        "many runs, before it replaces it (and once the space is exhausted, those within noise of it); each "
        "re-measurement is one evaluation of the budget."))
    parallel: int = Field(1, ge=1, le=256, description="Configurations measured at once, in worker processes.")
    metric: str | None = Field(None, description="The metric to optimise (default: the runner's first).")
    direction: Literal["min", "max"] | None = None
    objective: str | None = Field(None, max_length=1000, description=(
        "Several metrics instead of metric: weights \"ops_per_s:3,lat_p99_us:2\" (each metric relative to the first "
        "succeeded trial), priorities \"rank:ops_per_s,lat_p99_us;tol=0.05\" (the next metric breaks ties within 5%), "
        "or the Pareto set \"pareto:ops_per_s,lat_p99_us\" (GET /campaigns/{id}/pareto)."))
    warm_start: Literal["none", "same", "similar"] = Field("none", description=(
        "same: learn from earlier trials of the same space, workload and device; similar: that, and first measure "
        "the near-optimal configurations of the nearest fingerprinted workloads (GET /recommendations)."))
    fix: dict[str, Any] = Field(default_factory=dict, description="Parameters pinned to one value.")
    executor: Literal["local", "ray"] | None = Field(None, description=(
        "Where its trials are measured: the service's Ray cluster, or the service's own machine (default: the "
        "cluster when the service has one, GET /cluster)."))
    fidelity: Literal["none", "asha"] = Field("none", description=(
        "asha: judge each run at rungs of its length (min_run_s, x eta, ... up to the whole run) and stop those not "
        "in the best 1/eta there (STOPPED trials); none: every benchmark runs whole. For runners with a run length: "
        "the device runner with fio, a table with per-second series."))
    eta: float = Field(3.0, gt=1, le=100, description="fidelity asha: the factor between rungs.")
    min_run_s: float = Field(1.0, gt=0, description="fidelity asha: the shortest rung, in seconds.")
    burn_in: int = Field(BURN_IN, ge=0, le=10_000, description=(
        "fidelity asha: whole runs before a rung stops any (0 with guard 0: plain ASHA)."))
    guard: int = Field(GUARD, ge=0, le=10_000, description=(
        "fidelity asha: a rung stops runs only while the best this many whole runs so far would pass it (0: always)."))
    race: Literal["none", "wilcoxon"] = Field("none", description=(
        "wilcoxon: with repeats 5 or more, a configuration's runs race the best configuration's run by run, and the "
        "rest are not taken once a Wilcoxon signed-rank test says it is worse (p < 0.1)."))
    budget_s: float | None = Field(None, gt=0, description=(
        "Device-seconds to spend: no trial starts once the runs took this long (their run lengths). Without "
        "budget, evaluations are then limited by it alone."))

    @model_validator(mode="after")
    def _rungs_need_asha(self) -> CampaignCreate:
        if self.fidelity != "asha" and {"eta", "min_run_s", "burn_in", "guard"} & self.model_fields_set:
            raise ValueError("eta, min_run_s, burn_in and guard set the rungs of fidelity asha: add \"fidelity\": "
                             "\"asha\", or leave them out")
        return self


class ParetoPoint(BaseModel):
    trial: int
    config: dict[str, Any]
    values: dict[str, float]


class ParetoSet(BaseModel):
    """A Pareto campaign's non-dominated trials, from the history, and their hypervolume."""

    campaign: int
    objective: Objective
    objective_spec: dict[str, Any]
    pareto: list[ParetoPoint]
    hypervolume: float | None
    reference_point: dict[str, float] | None = Field(description="The worst value of each metric measured.")


class Progress(BaseModel):
    evaluated: int
    budget: int
    trials_by_status: dict[str, int]


class Best(BaseModel):
    trial: int
    value: float
    config: dict[str, Any]


class CampaignPublic(BaseModel):
    id: int
    state: str
    cancel_requested: bool
    origin: str
    note: str | None
    created_at: datetime | None
    finished_at: datetime | None
    runner: str
    runner_settings: dict[str, Any]
    space: str
    workload: str
    device: str
    algorithm: str
    algorithm_params: dict[str, Any]
    resolved_params: dict[str, Any] | None = Field(None, description=(
        "Every hyperparameter as the algorithm resolved it when the campaign was created (the defaults of then "
        "included): what a resume runs, whatever the defaults are by that time."))
    objective: Objective
    objective_spec: dict[str, Any] | None = Field(None, description=(
        "An objective over several metrics: its kind (weighted, rank, pareto), metrics, directions, weights or "
        "tolerance, and the reference (each metric's mean in the first succeeded trial)."))
    budget: int
    seed: int
    repeats: int
    max_repeats: int | None = None
    fidelity: dict[str, Any] | None = Field(None, description=(
        "Multi-fidelity search: kind (asha), the rungs in seconds (the last the whole run), eta, and budget_s, the "
        "device-seconds to spend."))
    parallel: int
    warm_start: str
    fixed: dict[str, Any]
    comparison: int | None
    executor: dict[str, Any] | None = Field(None, description=(
        "Where its trials are measured: kind (local or ray); once its driver started, the cluster's address, "
        "the workers in flight and why fewer than asked (notes), and what one measurement holds (per_task)."))
    progress: Progress
    best: Best | None
    test_value: float | None
    links: dict[str, str]
    warnings: list[str] = Field([], description=(
        "What looked wrong in the inputs but was accepted (two tables read as one, a cut last line): only in "
        "the response that created the campaign."))


class SteadyStatePublic(BaseModel):
    reached: bool = Field(description="Whether any window of the run met the rule.")
    from_s: float | None = Field(description="The start of the first window that met it (seconds into the run).")
    rule: str


class SeriesPublic(BaseModel):
    """What the run did interval by interval (fio's per-second logs, summed over its jobs); a table's series of
    other metrics (its series:<metric> columns) come under their own names."""

    model_config = ConfigDict(extra="allow")

    interval_s: float
    ops_per_s: list[float] | None = Field(None, description="Operations a second, one value per interval from the "
                                                            "run's start.")
    mb_per_s: list[float] | None = Field(None, description="Megabytes (10^6 bytes) a second, per interval.")
    steady: SteadyStatePublic | None = Field(None, description="Where ops/s settled, by SNIA PTS's steady-state rule.")


class MeasurementPublic(BaseModel):
    repeat: int
    status: str
    reason: str | None
    metrics: dict[str, Any]
    env: dict[str, Any]
    duration_s: float
    node: str | None = Field(None, description="The machine that measured it (a Ray node: host/node id).")
    series: SeriesPublic | None = Field(None, description="The run's per-interval series, where its benchmark "
                                                            "gives one (the device runner's fio runs).")


class TrialPublic(BaseModel):
    number: int
    status: str
    value: float | None
    reason: str | None
    config: dict[str, Any]
    config_hash: str
    seed: int
    retry_of: int | None = Field(description="The number of the STALE trial this one re-runs, if any.")
    started_at: datetime | None
    finished_at: datetime | None
    nodes: list[str] = Field([], description="The machines that measured it.")


class TrialDetail(TrialPublic):
    measurements: list[MeasurementPublic]


class NearOptimal(BaseModel):
    within: float
    best_value: float | None
    objective: Objective
    items: list[TrialPublic]
    total: int


class Convergence(BaseModel):
    """Columns, one entry per evaluation (finished trials only), in the order they were asked."""

    campaign: int
    objective: Objective
    budget: int
    evaluation: list[int] = Field(description="1, 2, ...: the k-th finished trial.")
    trial: list[int] = Field(description="Its trial number.")
    status: list[str]
    value: list[float | None] = Field(description="Its value: what production suffers while tuning.")
    best: list[float | None] = Field(description="The best value so far; with adaptive repeats (max_repeats) the "
                                     "incumbent's mean, the best among the most-measured configurations, which a "
                                     "re-measurement can make worse.")
    elapsed_s: list[float | None] = Field(description="Seconds from the campaign's first start to its end.")


class VariantCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    algorithm: str
    params: dict[str, Any] = Field(default_factory=dict)


class ComparisonCreate(BaseModel):
    """An offline comparison: what `storetune compare` takes, as JSON."""

    model_config = ConfigDict(extra="forbid")

    dataset: list[str] = Field(min_length=1, description="The exhaustive table(s) to replay: a path, or a list of "
                                                         "paths (one table split over files).")
    context: dict[str, Any] = Field(default_factory=dict)

    @field_validator("dataset", mode="before")
    @classmethod
    def _one_path(cls, value: Any) -> Any:  # as POST /campaigns' runner_settings.dataset takes it
        return [value] if isinstance(value, str) else value

    algorithms: list[str | VariantCreate] = Field(
        default_factory=lambda: list(SEARCH_ALGORITHMS), min_length=1,
        description="Algorithms, each a name (\"ga\"), \"ga:mutation_rate=0.05\", or {algorithm, params}.")
    seeds: int = Field(20, ge=1, le=1000)
    budget: int = Field(100, ge=1, le=100_000)
    within: float = Field(0.99, gt=0, le=1, description="Near-optimal: within this fraction of the best mean.")
    repeats: int = Field(1, ge=1, le=100)
    first_seed: int = Field(0, ge=0, lt=2**62)
    metric: str | None = None
    direction: Literal["min", "max"] | None = None
    executor: Literal["local", "ray"] | None = Field(None, description=(
        "Where its seeds run: the service's Ray cluster (as many at once as it has CPUs), or the service's own "
        "machine (default: the cluster when the service has one)."))
    stop_at_near_optimal: bool = Field(False, description=(
        "Stop each seed at its first near-optimal configuration: evaluations to near-optimal and success rates "
        "stay exact, and a seed costs only what it needed; what needs every budget spent is left out: the best "
        "mean at budget, the instantaneous curve and ask+tell at the budget are null, GA diversity is absent."))
    judge: list[str] = Field(default_factory=list, description=(
        "Another table of the same configurations (paths, as `dataset`) whose means decide near-optimality: "
        "re-measured with more repeats, or a generated table's truth; the searches still draw `dataset`'s repeats."))


class ComparisonPublic(BaseModel):
    id: int
    state: str
    cancel_requested: bool = False
    origin: str
    note: str | None
    created_at: datetime | None
    finished_at: datetime | None
    workload: str
    runner_settings: dict[str, Any]
    settings: dict[str, Any]
    campaigns: int
    results: dict[str, Any] | None
    links: dict[str, str]
    warnings: list[str] = Field([], description=(
        "What looked wrong in the table but was accepted (two tables read as one, a cut last line): only in "
        "the response that created the comparison."))


class RunnerPublic(BaseModel):
    name: str
    description: str
    settings_schema: dict[str, Any]


class AlgorithmPublic(BaseModel):
    name: str
    description: str
    search: bool
    hyperparameters: dict[str, Any]


class SpaceSummary(BaseModel):
    name: str
    description: str
    parameters: int
    configurations: int | None


class DatasetPublic(BaseModel):
    path: str
    name: str
    kind: Literal["table", "dataset"]
    size_bytes: int


class Health(BaseModel):
    status: str
    database: str
    executor: dict[str, Any]
    campaigns: dict[str, int]
    auth: bool
