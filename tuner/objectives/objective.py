"""What a campaign optimises: one metric and the direction that is better, or several metrics
(``MultiObjective``: a weighted preference, lexicographic priorities, or the Pareto set)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Any

import numpy as np

from storetune.runners import Direction, Measurement, Status, guess_direction
from storetune.search_spaces.status import better
from storetune.tuner.history.views import TrialView


def whole_runs(measurements: Sequence[Measurement]) -> list[Measurement]:
    """The runs a trial's value is the mean of: a run stopped at a rung (multi-fidelity search) says how its first
    seconds went, not what a whole run measures, and is left out once the trial was measured whole after it."""
    return [m for m in measurements if m.status is not Status.STOPPED]


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: Direction
    kind: ClassVar[str | None] = None  # one metric; a MultiObjective's is weighted, rank or pareto

    @classmethod
    def resolve(
        cls, reported: Mapping[str, Direction | None], metric: str | None, direction: str | None
    ) -> Objective:
        """The objective from what the runner reports and what the user asked for.

        ``reported`` is empty for runners whose metrics are only known after a run (a command).
        """
        if metric is None:
            if not reported:
                raise ValueError("name the metric to optimise with `metric` (this runner's metrics come from its output)")
            metric = next(iter(reported))
        elif reported and metric not in reported:
            raise ValueError(f"unknown metric {metric!r}; this runner reports: {', '.join(reported)}")
        if direction is None:
            direction = reported.get(metric) or guess_direction(metric)
        if direction not in ("min", "max"):
            raise ValueError(f"say whether to minimise or maximise {metric!r}: `direction` min or `direction` max")
        return cls(metric, direction)  # type: ignore[arg-type]

    def outcome(self, measurements: Sequence[Measurement]) -> tuple[Status, float | None, str | None]:
        """A trial's status, value (the mean over its whole runs) and reason, from its measurements."""
        if not measurements:
            return Status.FAILED, None, "no measurement was taken"
        last = measurements[-1]
        if last.status is not Status.SUCCEEDED:
            return last.status, None, last.reason
        measurements = whole_runs(measurements)
        missing = [m for m in measurements if self.metric not in m.metrics]
        if missing:
            reported = ", ".join(missing[0].metrics) or "nothing"
            return Status.FAILED, None, f"the runner reported no {self.metric!r}; it reported: {reported}"
        values = [m.metrics[self.metric] for m in measurements]
        if not all(isinstance(v, (int, float)) and np.isfinite(v) for v in values):
            shown = ", ".join(map(str, values))
            return Status.FAILED, None, f"the runner reported {self.metric} = {shown}: a value must be a finite number"
        return Status.SUCCEEDED, float(np.mean(values)), None

    def better(self, a: float, b: float) -> bool:
        """Is ``a`` strictly better than ``b``?"""
        return better(a, b, self.direction)

    def to_dict(self) -> dict[str, str]:
        return {"metric": self.metric, "direction": self.direction}

    def vector(self, measurements: Sequence[Measurement]) -> tuple[float, ...] | None:
        """One metric has no vector: only a Pareto objective gives multi-objective algorithms one."""
        return None


# --- objectives over several metrics (issue 14) ------------------------------------------------------

KINDS = ("weighted", "rank", "pareto")
DEFAULT_TOL = 0.05  # rank: two values within 5% of each other tie on that metric
OBJECTIVE_FORMS = "metric:weight,... (e.g. ops_per_s:3,lat_p99_us:2), rank:a,b[;tol=0.05] or pareto:a,b"


def _squash(z: float) -> float:
    """A monotone map of the reals into (0, 1)."""
    return 0.5 + math.atan(z) / math.pi


class MultiObjective:
    """An objective over several metrics: a weighted preference, lexicographic priorities (Zhang and Bhargava's UP
    vector, ``rank``), or the Pareto set. Every trial still gets one scalar value (the algorithms need
    one); its raw metrics stay in its measurements, from which the Pareto set and the lexicographic best
    are computed (``tuner/pareto.py``, ``best_trial``).

    The scalar is stable: each metric is divided by its mean in the campaign's first succeeded trial
    (``reference``, fixed once known and stored in ``campaigns.objective``), so a trial's value never
    changes as later trials arrive, and a resume computes the same values.

    - weighted: sum_i w_i b_i / sum_i w_i, with the benefit b_i = x_i / ref_i for a metric to maximise
      and ref_i / x_i for one to minimise (1 at the reference; twice as good counts 2 either way).
    - rank: every metric but the last in bins of a factor (1 + tol) of its benefit, the last squashed
      into (0, 1): value = bin_1 + s(bin_2 + s(... + s(log b_K))), monotone in the lexicographic order
      where two values of a metric within a factor (1 + tol) tie (up to a bin edge).
    - pareto: the weighted score with equal weights (a compromise that is itself Pareto-optimal when it
      is the best); what matters is the set, which multi-objective algorithms (nsga2) search for.
    The campaign's direction is max. The reference needs positive values: a trial with a metric at 0 or
    below fails, with its reason.
    """

    direction: Direction = "max"

    def __init__(self, kind: str, metrics: Sequence[str], directions: Sequence[Direction],
                 weights: Sequence[float] | None = None, tol: float = DEFAULT_TOL,
                 reference: Mapping[str, float] | None = None):
        self.kind = kind
        self.metrics = tuple(metrics)
        self.directions = tuple(directions)
        self.weights = tuple(float(w) for w in weights) if weights else (1.0,) * len(self.metrics)
        self.tol = float(tol)
        self.reference: dict[str, float] | None = dict(reference) if reference else None
        self.on_reference: Callable[[dict[str, Any]], None] | None = None  # persists the reference once known

    # --- parsing ----------------------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str, reported: Mapping[str, Direction | None]) -> MultiObjective:
        """``--objective``: ``a:3,b:2`` (weights), ``rank:a,b[;tol=0.05]`` or ``pareto:a,b``. ``reported``
        holds the runner's metrics and directions (empty when they are only known after a run)."""
        text = text.strip()
        kind, names, weights, tol = _parse_objective(text)
        for name in names:
            if reported and name not in reported:
                raise ValueError(f"`objective` {text!r}: unknown metric {name!r}; this runner reports: "
                                 f"{', '.join(reported)}")
        directions = []
        for name in names:
            direction = (reported.get(name) if reported else None) or guess_direction(name)
            if direction not in ("min", "max"):
                raise ValueError(f"`objective` {text!r}: cannot tell whether to minimise or maximise {name!r} "
                                 "(its name does not say and the runner does not declare it)")
            directions.append(direction)
        return cls(kind, names, directions, weights, tol)

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> MultiObjective:
        """The objective recorded in ``campaigns.objective`` (``spec()``)."""
        return cls(spec["kind"], spec["metrics"], spec["directions"], spec.get("weights"),
                   spec.get("tol", DEFAULT_TOL), spec.get("reference"))

    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "text": self.text, "metrics": list(self.metrics),
                               "directions": list(self.directions), "reference": self.reference}
        if self.kind == "weighted":
            out["weights"] = list(self.weights)
        if self.kind == "rank":
            out["tol"] = self.tol
        return out

    @property
    def text(self) -> str:
        """The canonical form, as `objective` takes it."""
        if self.kind == "weighted":
            return ",".join(f"{m}:{w:g}" for m, w in zip(self.metrics, self.weights))
        if self.kind == "rank":
            return f"rank:{','.join(self.metrics)};tol={self.tol:g}"
        return f"pareto:{','.join(self.metrics)}"

    @property
    def metric(self) -> str:
        """What the history's ``objective_metric`` column shows: the canonical text (at most 100 characters)."""
        return self.text[:100]

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "direction": self.direction, **self.spec()}

    # --- a trial's value ----------------------------------------------------------------------------------
    def means(self, measurements: Sequence[Measurement]) -> tuple[Status, dict[str, float] | None, str | None]:
        """Each metric's mean over a trial's measurements, or why there is none."""
        if not measurements:
            return Status.FAILED, None, "no measurement was taken"
        last = measurements[-1]
        if last.status is not Status.SUCCEEDED:
            return last.status, None, last.reason
        measurements = whole_runs(measurements)
        out = {}
        for metric in self.metrics:
            missing = [m for m in measurements if metric not in m.metrics]
            if missing:
                reported = ", ".join(missing[0].metrics) or "nothing"
                return Status.FAILED, None, f"the runner reported no {metric!r}; it reported: {reported}"
            values = [m.metrics[metric] for m in measurements]
            if not all(isinstance(v, (int, float)) and np.isfinite(v) for v in values):
                shown = ", ".join(map(str, values))
                return Status.FAILED, None, f"the runner reported {metric} = {shown}: a value must be a finite number"
            out[metric] = float(np.mean(values))
        return Status.SUCCEEDED, out, None

    def outcome(self, measurements: Sequence[Measurement]) -> tuple[Status, float | None, str | None]:
        status, means, reason = self.means(measurements)
        if means is None:
            return status, None, reason
        bad = [m for m in self.metrics if means[m] <= 0]
        if bad:
            reason = (f"{bad[0]} = {means[bad[0]]:g}: a {self.kind} objective compares metrics by their ratio to "
                      "the first succeeded trial's, so it needs values above 0")
            return Status.FAILED, None, reason
        if self.reference is None:
            self.reference = dict(means)
            if self.on_reference is not None:
                self.on_reference(self.spec())
        return Status.SUCCEEDED, self.score(means), None

    def benefits(self, means: Mapping[str, float]) -> list[float]:
        """Each metric's benefit: its ratio to the reference, turned so that larger is better."""
        assert self.reference is not None
        return [means[m] / self.reference[m] if d == "max" else self.reference[m] / means[m]
                for m, d in zip(self.metrics, self.directions)]

    def score(self, means: Mapping[str, float]) -> float:
        b = self.benefits(means)
        if self.kind == "rank":
            width = math.log1p(self.tol)
            z = [math.log(x) for x in b]
            inner = _squash(z[-1])
            for level in reversed(z[1:-1]):
                inner = _squash(math.floor(level / width) + inner)
            return float(math.floor(z[0] / width) + inner)
        return float(sum(w * x for w, x in zip(self.weights, b)) / sum(self.weights))

    def vector(self, measurements: Sequence[Measurement]) -> tuple[float, ...] | None:
        """A Pareto objective's trial as losses (lower is better), one per metric, for multi-objective
        algorithms; None for a trial without values, and for the scalar kinds."""
        if self.kind != "pareto":
            return None
        _, means, _ = self.means(measurements)
        return None if means is None else self.losses(means)

    def losses(self, means: Mapping[str, float]) -> tuple[float, ...]:
        return tuple(means[m] if d == "min" else -means[m] for m, d in zip(self.metrics, self.directions))

    def better(self, a: float, b: float) -> bool:
        return a > b

    # --- what a campaign reports ----------------------------------------------------------------------
    def best_trial(self, trials: Sequence[TrialView], most_measured: bool = False) -> TrialView | None:
        """The trial the campaign reports: the best score, or for ``rank`` the lexicographic best with
        ties within ``tol``: the best on the first metric, then among those within a factor (1 + tol)
        of it the best on the second, and so on (read from the trials' measurements)."""
        scored = [t for t in trials if t.status == Status.SUCCEEDED.value and t.value is not None]
        if most_measured and scored:
            most = max(t.whole_runs for t in scored)
            scored = [t for t in scored if t.whole_runs == most]
        if self.kind != "rank" or not scored or any(t.measurements is None for t in scored):
            return max(scored, key=lambda t: (t.value, -t.number)) if scored else None
        candidates = [(t, trial_means(t, self.metrics)) for t in scored]
        candidates = [(t, m) for t, m in candidates if m is not None]
        for i, (metric, direction) in enumerate(zip(self.metrics, self.directions)):
            sign = 1.0 if direction == "max" else -1.0
            top = max(sign * m[metric] for _, m in candidates)
            if i == len(self.metrics) - 1:
                candidates = [(t, m) for t, m in candidates if sign * m[metric] == top]
            elif direction == "max":
                candidates = [(t, m) for t, m in candidates if m[metric] * (1 + self.tol) >= top]
            else:
                candidates = [(t, m) for t, m in candidates if m[metric] <= -top * (1 + self.tol)]
        return min(candidates, key=lambda c: c[0].number)[0] if candidates else None


def trial_means(trial: TrialView, metrics: Sequence[str]) -> dict[str, float] | None:
    """A trial's mean of each metric over its succeeded measurements (read with them); None if one is missing."""
    runs = [m for m in trial.measurements or () if m.status == Status.SUCCEEDED.value]
    out = {}
    for metric in metrics:
        values = [m.metrics[metric] for m in runs if metric in m.metrics]
        if not values:
            return None
        out[metric] = float(np.mean(values))
    return out


def _parse_objective(text: str) -> tuple[str, list[str], list[float] | None, float]:
    head, sep, rest = text.partition(":")
    if head in ("rank", "pareto"):
        body, _, options = rest.partition(";")
        names = [n.strip() for n in body.split(",")]
        if not all(names):
            raise ValueError(f"`objective` {text!r}: name the metrics, e.g. {head}:ops_per_s,lat_p99_us")
        tol = DEFAULT_TOL
        for option in filter(None, (o.strip() for o in options.split(";"))):
            key, eq, value = option.partition("=")
            if head != "rank" or key.strip() != "tol" or not eq:
                raise ValueError(f"`objective` {text!r}: unknown option {option!r} (rank takes ;tol=0.05)")
            try:
                tol = float(value)
            except ValueError:
                raise ValueError(f"`objective` {text!r}: tol must be a number, not {value.strip()!r}") from None
            if not 0 < tol < 1:
                raise ValueError(f"`objective` {text!r}: tol must be above 0 and below 1 (0.05: within 5%), not {tol:g}")
        _no_repeats(text, names)
        if head == "pareto" and not 2 <= len(names) <= 3:
            raise ValueError(f"`objective` {text!r}: a pareto objective needs two or three metrics, e.g. "
                             "pareto:ops_per_s,lat_p99_us")
        if head == "rank" and len(names) < 2:
            raise ValueError(f"`objective` {text!r}: rank orders two metrics or more; for one, use `metric`")
        return head, names, None, tol
    names, weights = [], []
    for item in text.split(","):
        name, sep, weight = item.strip().rpartition(":")
        try:
            w = float(weight) if sep and name.strip() else None
        except ValueError:
            w = None
        if w is None:
            raise ValueError(f"`objective` {text!r}: unknown form; write {OBJECTIVE_FORMS}")
        if not math.isfinite(w) or w <= 0:
            raise ValueError(f"`objective` {text!r}: the weight of {name.strip()!r} must be a positive number, "
                             f"not {weight.strip()}")
        names.append(name.strip())
        weights.append(w)
    _no_repeats(text, names)
    return "weighted", names, weights, DEFAULT_TOL


def _no_repeats(text: str, names: list[str]) -> None:
    twice = [n for i, n in enumerate(names) if n in names[:i]]
    if twice:
        raise ValueError(f"`objective` {text!r}: metric {twice[0]!r} is named twice")


def resolve_objective(reported: Mapping[str, Direction | None], metric: str | None, direction: str | None,
                      objective: str | None) -> Objective | MultiObjective:
    """The campaign's objective: ``--objective`` over several metrics, or ``--metric`` alone."""
    if objective is None:
        return Objective.resolve(reported, metric, direction)
    if metric is not None or direction is not None:
        raise ValueError("`objective` names the metrics and their directions itself: use it without `metric` "
                         "and `direction`")
    return MultiObjective.parse(objective, reported)


def objective_kind(text: str | None) -> str | None:
    """weighted, rank or pareto, from an ``--objective`` text's form; None without one."""
    if text is None:
        return None
    head = text.strip().partition(":")[0]
    return head if head in ("rank", "pareto") else "weighted"


def objective_metrics(text: str) -> list[str]:
    """The metric names of an ``--objective`` text, before they are checked against a runner (a
    two-objective table needs one named to load). A text that does not parse raises its ValueError here,
    so that its own words, not the table's, say what is wrong."""
    return _parse_objective(text.strip())[1]


def campaign_objective(record: Any) -> Objective | MultiObjective:
    """The objective recorded for a campaign."""
    if record.objective:
        return MultiObjective.from_spec(record.objective)
    return Objective(record.objective_metric, record.objective_direction)


def table_metric(metric: str | None, objective: str | None) -> str | None:
    """A replayed table's objective column: the metric asked for, or the first metric of an objective over
    several (a table with two objectives loads with one of them named; the others are kept as metrics)."""
    if metric is not None or objective is None:
        return metric
    return next(iter(objective_metrics(objective)), None)
