"""How the CLI shows spaces, campaigns, trials and summaries in a terminal (rich tables)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.markup import escape
from rich.table import Table

from storetune.search_spaces import SearchSpace, format_config
from storetune.tuner import CampaignSummary, best_trial
from storetune.tuner.analysis.convergence import median_in_words
from storetune.tuner.analysis.summary import pins
from storetune.tuner.analysis.pareto import format_point
from storetune.tuner.history.views import CampaignView, TrialView


def space_table(space: SearchSpace) -> Table:
    size = space.cardinality() if space.finite else None
    caption = f"{size:,} valid configurations" if size is not None else "continuous (real-valued parameters)"
    table = Table(title=f"{space.name}: {space.description}", caption=caption, title_justify="left")
    for column in ("parameter", "kind", "domain", "default", "applies when", "source"):
        table.add_column(column, overflow="fold")
    for p in space.parameters:
        kind = p.kind.value + (" (log)" if p.log else "")
        domain = p.describe_domain() + (f" {p.unit}" if p.unit else "")
        cells = (p.name, kind, domain, str(p.default), p.when.describe() or "always", p.source or p.doc)
        table.add_row(*map(escape, cells))
    for rule in space.forbidden:
        table.add_row("[dim]forbidden[/]", "", rule.condition.describe(), "", "", rule.reason)
    return table


def campaigns_table(records: Sequence[CampaignView]) -> Table:
    table = Table(title="campaigns", title_justify="left")
    for column in ("id", "created", "state", "algorithm", "space", "workload", "objective", "budget", "seed"):
        table.add_column(column)
    for r in records:
        table.add_row(
            str(r.id),
            r.created_at.strftime("%Y-%m-%d %H:%M"),
            r.state,
            r.algorithm,
            r.space_name,
            r.workload_name + (f" ({format_config(pinned)})" if (pinned := pins(r)) else ""),
            f"{r.objective_direction} {r.objective_metric}",
            str(r.budget),
            str(r.seed),
        )
    return table


def trials_table(record: CampaignView, trials: Sequence[TrialView], nodes: dict[int, list[str]] | None = None) -> Table:
    """Every trial; with a ``node`` column when the campaign ran on a cluster or on more than one machine."""
    best = best_trial(trials, record.objective_direction, record.adaptive)
    title = f"campaign {record.id}: {record.algorithm} on {record.workload_name}, {record.objective_direction} {record.objective_metric}"
    table = Table(title=title, title_justify="left")
    nodes = nodes or {}
    show_nodes = (record.executor or {}).get("kind") == "ray" or len({n for ns in nodes.values() for n in ns}) > 1
    columns = [("#", "right"), ("status", "left"), ("value", "right"), ("configuration", "left"), ("reason", "left")]
    # runs watched second by second (a device's, a replayed series'): how long each ran, and its metric per second
    runs = any(m.series is not None or "run_length_s" in m.env for t in trials for m in t.measurements or ())
    extra = [("run", "right"), (f"{record.objective_metric} per second", "left")] if runs else []
    for column, justify in columns + extra + ([("node", "left")] if show_nodes else []):
        table.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    full = (record.fidelity or {}).get("rungs", [None])[-1]
    for t in trials:
        value = "" if t.value is None else f"{t.value:.6g}"
        style = "bold green" if best is not None and t.id == best.id else None
        cells = [str(t.number), t.status, value, escape(format_config(t.config)), escape(t.reason or "")]
        if runs:
            last = (t.measurements or [None])[-1]
            length = None if last is None else last.env.get("run_length_s")
            cells.append("" if length is None else f"{length:g}" + (f"/{full:g} s" if full else " s"))
            series = {} if last is None or last.series is None else last.series
            cells.append(sparkline(series.get(record.objective_metric, ())))
        table.add_row(*cells, *([escape(", ".join(nodes.get(t.id, [])))] if show_nodes else []), style=style)
    return table


BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 30) -> str:
    """A series as a line of block characters, from its lowest value to its highest (written here: a line of
    text is all a terminal's table cell takes); a long one is averaged into ``width`` bins."""
    if not values:
        return ""
    if len(values) > width:
        edges = [round(i * len(values) / width) for i in range(width + 1)]
        values = [sum(values[a:b]) / (b - a) for a, b in zip(edges, edges[1:]) if b > a]
    low, high = min(values), max(values)
    if high == low:
        return BARS[3] * len(values)
    return "".join(BARS[min(len(BARS) - 1, int((v - low) / (high - low) * len(BARS)))] for v in values)


def summary_table(summary: CampaignSummary) -> Table:
    table = Table(show_header=False, title=f"campaign {summary.campaign}", title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    objective = f"{summary.objective['direction']} {summary.objective['metric']}"
    status = ", ".join(f"{k} {v}" for k, v in summary.trials_by_status.items())
    rows = [
        ("state", summary.state + (f" ({summary.note})" if summary.note else "")),
        ("algorithm", f"{summary.algorithm}, seed {summary.seed}"),
        ("workload", f"{summary.workload} on space {summary.space}"
                     + (f", pinned: {format_config(summary.pinned)}" if summary.pinned else "")),
        ("objective", objective),
        ("trials", f"{summary.evaluated} of {summary.budget} evaluated: {status}"),
        ("best value", "-" if summary.best_value is None else f"{summary.best_value:.6g}"),
        ("best configuration", format_config(summary.best_config or {})),
        ("history", summary.database),
    ]
    if summary.pareto is not None:
        reference = format_point(summary.reference_point)
        hv = "-" if summary.hypervolume is None else f"{summary.hypervolume:.6g}"
        line = (f"{len(summary.pareto)} trials, hypervolume {hv} (reference: the worst measured, {reference}); "
                "storetune best lists them")
        rows.insert(7, ("Pareto set", line))
    if summary.test_value is not None:  # the best configuration on data the search never saw (admission)
        rows.insert(7, ("held-out value", f"{summary.test_value:.6g} (the best configuration on the test part)"))
    if summary.similar is not None:
        near = ", ".join(f"{n['workload']} ({n['distance']:.2f})" for n in summary.similar.get("neighbours", []))
        first = len(summary.similar.get("first", []))
        rows.insert(5, ("similar workloads", f"{first} of their near-optimal configurations measured first"
                                             + (f"; nearest: {near}" if near else "")))
    if summary.warm_started is not None:
        rows.insert(5, ("warm start", f"{summary.warm_started} earlier trials of the same space, workload and device "
                                      "told first; not in the budget, nor in the best"))
    for key, value in rows:
        table.add_row(key, escape(str(value)))
    return table


def comparison_table(results: dict) -> Table:
    """One row per algorithm: evaluations to near-optimal, success rates, best found, overhead."""
    budget = results["budget"]
    marks = [k for k in (50, 100, 200) if k < budget] + [budget]
    title = (
        f"comparison {results['comparison']} on {results['dataset']}: {results['seeds']} seeds x {budget} evaluations; "
        f"near-optimal = within {results['within']:g} of the best"
        + (f" mean of {', '.join(results['judge'])}" if results.get("judge") else "")
        + f", {results['near_optimal']} of "
        f"{results['configurations']} configurations ({100 * results['near_optimal_share']:.2f}%)"
        + ("; each seed stopped at its first near-optimal configuration" if results.get("stop_at_near_optimal")
           else "")
    )
    table = Table(title=title, title_justify="left")
    table.add_column("algorithm")
    table.add_column("median evals (IQR)", justify="right")
    table.add_column("censored", justify="right")
    for k in marks:
        table.add_column(f"success@{k}", justify="right")
    table.add_column("best mean at budget", justify="right")
    stopped = results.get("stop_at_near_optimal")  # then over the evaluations made, not the time at the budget
    table.add_column("ask+tell ms, mean to near-optimal" if stopped else "ask+tell ms, mean", justify="right")
    random_curve = results["random_expected_success_at"]
    for label, a in results["algorithms"].items():
        # a seed that never got there counts as budget + 1, which is no count of evaluations: say "more than" it
        quartiles = " - ".join(f"{q:g}" if q <= budget else f">{budget}" for q in (a["evals_p25"], a["evals_p75"]))
        median = (f"{median_in_words(a['median_evals_to_near_optimal'], budget, a['censored'], results['seeds'])}"
                  f" ({quartiles})")
        row = [escape(label), median, str(a["censored"]), *(f"{a['success_at'][k - 1]:.2f}" for k in marks)]
        best = a["best_mean_at_budget"]
        tell = a["ask_tell_ms"]  # None where every seed was measured before a resume
        table.add_row(*row, "-" if best is None else f"{best:.6g}", "-" if tell is None else f"{tell:.2f}")
    table.add_row("[dim]random, exact[/]", "", "", *(f"[dim]{random_curve[k - 1]:.2f}[/]" for k in marks), "", "")
    return table


def importance_table(result: dict) -> Table:
    """One row per parameter, most important first, with its strongest OLS coefficient."""
    objective = result["objective"]
    title = (f"campaign {result['campaign']}: what matters for {objective['direction']} {objective['metric']} "
             f"({result['trials']} succeeded trials; OLS R^2 {result['r_squared']:.2f}, forest OOB R^2 "
             f"{_fmt(result['forest_r2'], '.2f')}; the two rankings agree at Spearman "
             f"{_fmt(result['rank_agreement'], '.2f')})")
    if result.get("forest_caution"):
        title += f"\n[yellow]{escape(result['forest_caution'])}[/]"
    table = Table(title=title, title_justify="left")
    for column, justify in (("parameter", "left"), ("ANOVA share", "right"), ("p", "right"),
                            ("forest share", "right"), ("strongest level vs baseline", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for p in result["parameters"]:
        strongest = max(p["coefficients"], key=lambda c: abs(c["estimate"]), default=None)
        effect = "" if strongest is None else (
            f"{strongest['level']} vs {p['baseline']}: {strongest['estimate']:+.4g}" if p["baseline"] is not None
            else f"slope {strongest['estimate']:+.4g}")
        table.add_row(escape(p["name"]), f"{p['anova_share']:.3f}", _fmt(p["anova_p"], ".2g"),
                      f"{p['forest_share']:.3f}", escape(effect))
    if (result.get("table") or {}).get("error"):
        table.caption = escape(result["table"]["error"])
    elif result.get("table"):
        t = result["table"]
        fixed = t.get("fixed") or {}
        where = (f"on the table's {t['configurations']} configurations with "
                 f"{', '.join(f'{k}={v}' for k, v in fixed.items())}" if fixed
                 else f"on the whole table ({t['configurations']} configurations)")
        table.caption = (f"{where} the ranking is "
                         f"{', '.join(t['ranking'][:5])}...; its Spearman agreement with this campaign's "
                         f"ANOVA ranking: {_fmt(t['rank_agreement'], '.2f')}")
    return table


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
