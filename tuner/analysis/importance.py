"""Which parameters matter: the ATC'18 regression and a variance-based importance, on the same trials.

- **OLS, the ATC'18 way** (statsmodels): the objective regressed on the parameters, each one-hot with
  treatment coding against its most frequent value. A parameter inactive under its condition (an XFS
  option on ext4) gets its own level, ``n/a``: a full one-hot with an intercept would be singular.
  A parameter with more than ``MAX_LEVELS`` distinct values is a linear term instead (with an ``n/a``
  indicator where it is inactive). Coefficients come with standard errors, p-values and 95% intervals.
- **ANOVA share**: each parameter's type-II sum of squares (``anova_lm(typ=2)``) over the total.
- **Forest share** (fANOVA-style): a random-forest surrogate of the objective, and each parameter's
  first-order share of its variance: the variance of the surrogate's mean prediction as that parameter
  alone varies over its observed values (the others as observed), over the variance of the predictions.
  Written here rather than taken from Optuna: it works on StoreTune's trials and spaces directly, and
  ``bench/`` compares it with Optuna's ``FanovaImportanceEvaluator``.

statsmodels and scikit-learn are imported only here (``import tuner`` does not load them).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from storetune.search_spaces import format_value
from storetune.tuner.analysis.summary import TableGone, json_safe, replayed_table, searched_means, table_digest

NA = "n/a"  # the level of a parameter inactive under its condition
MAX_LEVELS = 12  # more distinct values than this: a numeric (linear) term, not one-hot
MARGINAL_ROWS = 512  # rows the forest's marginal predictions average over (a sample of the trials)
MARGINAL_LEVELS = 16  # values a numeric parameter is swept over (quantiles) for its marginal
FOREST_ROWS = 3000  # trials the surrogate is trained on at most (a seeded sample): the OLS takes them all


@dataclass(frozen=True)
class Coefficient:
    """One OLS coefficient: a level against the parameter's baseline (or the slope of a numeric one)."""

    level: str
    estimate: float
    std_error: float | None
    p_value: float | None
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class ParameterImportance:
    name: str
    kind: str  # categorical | numeric
    baseline: str | None  # the treatment-coding reference level (categorical)
    levels: int  # distinct values seen, n/a included
    anova_share: float  # type-II sum of squares over the total
    anova_p: float | None
    forest_share: float  # first-order share of the surrogate's variance
    coefficients: list[Coefficient] = field(default_factory=list)


@dataclass(frozen=True)
class Importance:
    trials: int
    parameters: list[ParameterImportance]  # most important first (by ANOVA share)
    constant: list[str]  # parameters with one value in these trials: nothing to say about them
    r_squared: float
    forest_r2: float  # out-of-bag R^2 of the surrogate
    rank_agreement: float | None  # Spearman's rho between the two rankings

    def to_dict(self) -> dict[str, Any]:
        return json_safe({**asdict(self), "forest_caution": self.forest_caution()})

    def forest_caution(self) -> str | None:
        """Why the forest's shares say nothing, when its out-of-bag predictions are worse than the mean's."""
        if math.isfinite(self.forest_r2) and self.forest_r2 < 0:
            return (f"the forest predicts worse than the trials' mean (out-of-bag R^2 {self.forest_r2:.2f}): its "
                    "shares describe noise, not the objective; read the ANOVA shares")
        return None

    def ranking(self, method: str = "anova") -> list[str]:
        key = "anova_share" if method == "anova" else "forest_share"
        return [p.name for p in sorted(self.parameters, key=lambda p: -getattr(p, key))]


def required_trials(configs: Sequence[Mapping[str, Any]], names: Sequence[str]) -> int:
    """How many trials the OLS needs for these parameters: one per coefficient, and one more."""
    frame, _ = _design(configs, names)
    return _columns(frame) + 1


def importance(configs: Sequence[Mapping[str, Any]], values: Sequence[float], names: Sequence[str],
               *, seed: int = 0) -> Importance:
    """The importance of ``names`` for ``values`` measured at ``configs`` (succeeded trials only).
    Raises ValueError, saying how many trials are needed, when there are too few to fit."""
    import statsmodels.formula.api as smf
    from sklearn.ensemble import RandomForestRegressor
    from statsmodels.stats.anova import anova_lm

    y = np.asarray(values, dtype=float)
    if len(configs) != len(y) or not np.isfinite(y).all():
        raise ValueError("importance needs one finite value per configuration")
    frame, kinds = _design(configs, names)
    constant = [n for n in names if n not in kinds]
    needed = _columns(frame) + 1
    if len(y) < needed or not kinds:
        raise ValueError(f"importance needs at least {needed} successful trials for "
                         f"{len(kinds) or len(names)} parameters (one per coefficient, and one more); "
                         f"there are {len(y)}")
    columns = {name: f"x{i}" for i, name in enumerate(kinds)}  # names like 'Throughput+' break formulas
    data = frame.rename(columns={**columns, **{f"{n}_na": f"{c}_na" for n, c in columns.items()}})
    data["y"] = y
    terms, term_of = [], {}
    baselines: dict[str, str | None] = {}
    for name, column in columns.items():
        if kinds[name] == "categorical":
            baseline = str(data[column].value_counts().idxmax())
            baselines[name] = baseline
            # treatment coding against the most common value: it comes first among the categories. A pandas
            # Categorical, not C(x, Treatment(...)): patsy reads a Categorical's codes, boxed strings one by one
            data[column] = pd.Categorical(data[column], categories=[baseline, *sorted(set(data[column]) - {baseline})])
            terms.append(column)
            term_of[column] = name
        else:
            baselines[name] = None
            terms.append(column)
            term_of[column] = name
            if f"{column}_na" in data:  # inactive under its condition: a level of its own, against active
                data[f"{column}_na"] = pd.Categorical(data[f"{column}_na"], categories=["active", "inactive"])
                terms.append(f"{column}_na")
                term_of[f"{column}_na"] = name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rank-deficient designs (nested conditions) warn; pinv handles them
        try:
            model = smf.ols("y ~ " + " + ".join(terms), data=data).fit()
            table = anova_lm(model, typ=2)
        except (ValueError, np.linalg.LinAlgError):
            raise ValueError(f"importance cannot separate the effects of {len(kinds)} parameters with these "
                             f"{len(y)} trials (their {needed - 1} coefficients are not all identifiable; the "
                             "parameters' conditions overlap): more trials help") from None
    residual = float(table.loc["Residual", "sum_sq"])
    ss = {name: 0.0 for name in kinds}
    p_values: dict[str, float | None] = {name: None for name in kinds}
    for term, row in table.drop(index="Residual").iterrows():
        name = term_of[str(term)]
        ss[name] += float(row["sum_sq"]) if math.isfinite(row["sum_sq"]) else 0.0
        p = row.get("PR(>F)")
        if p is not None and math.isfinite(p):
            p_values[name] = float(p) if p_values[name] is None else min(p_values[name], float(p))
    total = sum(ss.values()) + residual
    forest_share, forest_r2 = _forest(frame, kinds, y, seed, RandomForestRegressor)
    intervals = model.conf_int()
    parameters = []
    for name, column in columns.items():
        coefficients = []
        for label in model.params.index:
            if label == "Intercept" or not _belongs(label, column):
                continue
            coefficients.append(Coefficient(
                level=_level(label, column), estimate=float(model.params[label]),
                std_error=_num(model.bse[label]), p_value=_num(model.pvalues[label]),
                ci_low=_num(intervals.loc[label, 0]), ci_high=_num(intervals.loc[label, 1])))
        parameters.append(ParameterImportance(
            name=name, kind=kinds[name], baseline=baselines[name], levels=int(frame[name].nunique()),
            anova_share=ss[name] / total if total > 0 else 0.0, anova_p=p_values[name],
            forest_share=forest_share[name], coefficients=coefficients))
    parameters.sort(key=lambda p: (-p.anova_share, -p.forest_share, p.name))
    return Importance(trials=len(y), parameters=parameters, constant=constant,
                      r_squared=float(model.rsquared), forest_r2=forest_r2,
                      rank_agreement=_spearman([p.anova_share for p in parameters],
                                               [p.forest_share for p in parameters]))


def of_campaign(history: Any, campaign_id: int, *, seed: int = 0) -> dict[str, Any]:
    """The importance of a campaign's parameters on its succeeded trials, as ``storetune importance
    --json`` prints it. On a replayed table, the same analysis on the whole table (on a campaign with
    ``--fix``, on the configurations with its pins) is the ground truth, and ``table`` says how close
    the campaign's ranking came to it."""
    record = history.campaign(campaign_id)
    names = [p["name"] for p in record.space["parameters"]]
    trials = [t for t in history.trials(campaign_id) if t.status == "SUCCEEDED" and t.value is not None]
    if not trials:
        raise ValueError(f"campaign {campaign_id} has no succeeded trial yet: nothing to analyse")
    result = importance([t.config for t in trials], [t.value for t in trials], names, seed=seed)
    out: dict[str, Any] = {"campaign": campaign_id, "objective": {"metric": record.objective_metric,
                                                                  "direction": record.objective_direction},
                           **result.to_dict()}
    if record.runner == "dataset" and record.objective:  # a score of several metrics: the table has no one mean
        out["table"] = {"error": "not compared with the table: its means are of one metric, and this campaign's "
                                 f"objective is a score of several ({record.objective_metric})"}
    elif record.runner == "dataset":
        try:
            runner = replayed_table(record.runner_settings, [table_digest(record)])
        except TableGone as e:  # the campaign's own analysis stands; only the truth to compare it with is gone
            out["table"] = {"error": f"not compared with the table: {e}"}
            return out
        # the truth of what the campaign searched: with --fix, the configurations with its pins
        means = searched_means(record, runner.space, runner.table.means(record.objective_metric))
        truth = importance(list(means), list(means.values()), names, seed=seed)
        out["table"] = {
            "configurations": len(means), "fixed": record.fixed or {}, "ranking": truth.ranking(),
            "rank_agreement": _rank_agreement(result, truth),
        }
    return out


def _rank_agreement(found: Importance, truth: Importance) -> float | None:
    """Spearman's rho between two analyses' ANOVA shares over the parameters both rank."""
    mine = {p.name: p.anova_share for p in found.parameters}
    theirs = {p.name: p.anova_share for p in truth.parameters}
    both = sorted(set(mine) & set(theirs))
    return _spearman([mine[n] for n in both], [theirs[n] for n in both])


def common_values(near: Sequence[Mapping[str, Any]], everything: Sequence[Mapping[str, Any]],
                  names: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """What the near-optimal configurations have in common: for each parameter, each value's count
    inside the near-optimal set against its count over all configurations, most over-represented first."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        inside = pd.Series([format_value(c.get(name, NA)) for c in near]).value_counts()
        overall = pd.Series([format_value(c.get(name, NA)) for c in everything]).value_counts()
        rows = []
        for value, total in overall.items():
            count = int(inside.get(value, 0))
            share_in, share_all = count / max(len(near), 1), int(total) / max(len(everything), 1)
            rows.append({"value": value, "near_optimal": count, "all": int(total),
                         "share_near_optimal": share_in, "share_all": share_all,
                         "lift": share_in / share_all if share_all else None})
        out[name] = sorted(rows, key=lambda r: (-(r["lift"] or 0), r["value"]))
    return out


# --- the design -------------------------------------------------------------------------------------
def _design(configs: Sequence[Mapping[str, Any]], names: Sequence[str]) -> tuple[pd.DataFrame, dict[str, str]]:
    """The parameters as a frame (inactive: ``n/a``), and each varying parameter's kind."""
    frame = pd.DataFrame({n: [c.get(n, NA) for c in configs] for n in names})
    kinds: dict[str, str] = {}
    for name in names:
        column = frame[name]
        if column.astype(str).nunique() < 2:
            continue  # one value everywhere: no contrast to estimate
        active = column[column.astype(str) != NA]
        numeric = pd.to_numeric(active, errors="coerce")
        if numeric.notna().all() and active.nunique() > MAX_LEVELS:
            kinds[name] = "numeric"
            filled = pd.to_numeric(column.where(column.astype(str) != NA), errors="coerce")
            if filled.isna().any():
                frame[f"{name}_na"] = filled.isna().map({True: "inactive", False: "active"})
            frame[name] = filled.fillna(float(numeric.mean()))
        else:
            kinds[name] = "categorical"
            frame[name] = column.astype(str)
    return frame, kinds


def _columns(frame: pd.DataFrame) -> int:
    """Coefficients of the OLS, the intercept included."""
    count = 1
    for name in frame.columns:
        if name.endswith("_na") and name[:-3] in frame:
            count += 1
        elif not pd.api.types.is_numeric_dtype(frame[name]):  # pandas 3 gives strings the 'str' dtype, not object
            count += max(frame[name].nunique() - 1, 0)
        else:
            count += 1
    return count


def _forest(frame: pd.DataFrame, kinds: Mapping[str, str], y: np.ndarray, seed: int,
            forest_type: Any) -> tuple[dict[str, float], float]:
    """First-order variance shares of a random-forest surrogate, and its out-of-bag R^2."""
    names = list(kinds)
    encoded = pd.DataFrame(index=frame.index)
    for name in names:
        if kinds[name] == "categorical":
            encoded[name] = pd.Categorical(frame[name]).codes.astype(float)
        else:
            encoded[name] = frame[name].astype(float)
            if f"{name}_na" in frame:
                encoded.loc[frame[f"{name}_na"] == "inactive", name] = np.nan
                encoded[name] = encoded[name].fillna(encoded[name].min() - 1.0)  # inactive: its own side of a split
    X = encoded.to_numpy()
    if len(X) > FOREST_ROWS:
        picks = np.random.default_rng(seed).choice(len(X), FOREST_ROWS, replace=False)
        X, y = X[picks], y[picks]
    forest = forest_type(n_estimators=100, min_samples_leaf=2, oob_score=len(y) >= 20, random_state=seed,
                         n_jobs=-1)  # threads: the trees release the GIL
    forest.fit(X, y)
    oob = float(forest.oob_score_) if len(y) >= 20 else float("nan")
    rng = np.random.default_rng(seed)
    rows = X[rng.choice(len(X), size=min(len(X), MARGINAL_ROWS), replace=False)]
    total = float(np.var(forest.predict(rows)))
    # every parameter's probes in one predict call: a call per level costs more in overhead than the trees
    probes, spans = [], []
    for j in range(len(names)):
        column = X[:, j]
        levels, counts = np.unique(column, return_counts=True)
        if len(levels) > MARGINAL_LEVELS:
            levels = np.unique(np.quantile(column, np.linspace(0, 1, MARGINAL_LEVELS)))
            counts = np.ones(len(levels))
        for level in levels:
            probe = rows.copy()
            probe[:, j] = level
            probes.append(probe)
        spans.append(counts / counts.sum())
    predicted = forest.predict(np.vstack(probes)).reshape(-1, len(rows)).mean(axis=1)
    shares, start = {}, 0
    for name, weights in zip(names, spans):
        means = predicted[start:start + len(weights)]
        start += len(weights)
        centre = float(np.dot(weights, means))
        # at most 1: the marginals average over a sample of rows, not the product of the observed values, so a
        # parameter that explains (nearly) everything came out at 1.001
        shares[name] = min(1.0, float(np.dot(weights, (means - centre) ** 2) / total)) if total > 0 else 0.0
    return shares, oob


# --- helpers ----------------------------------------------------------------------------------------
def _belongs(label: str, column: str) -> bool:
    return label == column or label.startswith((f"{column}[T.", f"{column}_na[T."))


def _level(label: str, column: str) -> str:
    if label == column:
        return "slope"
    if label.startswith(f"{column}_na[T."):
        return NA
    return label[len(column) + 3:-1]  # 'x3[T.ext4]': the level, whatever brackets or dots it holds


def _num(value: Any) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    if len(a) < 3:
        return None
    from scipy.stats import spearmanr

    rho = spearmanr(a, b).statistic
    return float(rho) if math.isfinite(rho) else None
