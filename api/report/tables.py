"""The report's tables: a campaign's summary, near-optimal set and trials, and a comparison's results, as
HTML (api/report.py draws the figures and the page around them)."""

from __future__ import annotations

import html
from typing import Any

from storetune.search_spaces import format_config, format_value
from storetune.search_spaces.table import holding
from storetune.tuner.analysis.convergence import median_in_words
from storetune.tuner.analysis.pareto import format_point


def campaign_tables(data: dict[str, Any]) -> str:
    e = html.escape
    objective = data["objective"]
    best = data["best"]
    score = f"{objective['score']} of {', '.join(objective['of'])}" if objective.get("score") else objective["metric"]
    rows = [("state", data["state"] + (f" ({data['note']})" if data["note"] else "")),
            ("algorithm", data["algorithm"] + (f" ({_params(data['params'])})" if data.get("params") else "")),
            ("space / workload", f"{data['space']} / {data['workload']}"
                                                                  + _pinned(data.get("fixed"))),
            *([("table holds", holding(data["holds"]["configurations"], data["holds"]["grid"]))]
              if data.get("holds") else []),
            ("objective", f"{objective['direction']} {score}"),
            ("evaluated", f"{data['evaluated']} of {data['budget']}"),
            (objective.get("best") or "best",
             "-" if best is None else f"{best['value']:.6g} (trial {best['trial']})"),
            ("best configuration", "-" if best is None else ", ".join(f"{k}={format_value(v)}" for k, v in best["config"].items()))]
    if data["test_value"] is not None:
        rows.append(("test value (held out)", f"{data['test_value']:.6g}"))
    nodes = data.get("nodes") or {}
    if (data.get("executor") or {}).get("kind") == "ray" or len(nodes) > 1:
        where = ", ".join(f"{name}: {n} trials" for name, n in nodes.items()) or "-"
        rows.append(("measured on", f"{(data.get('executor') or {}).get('address', 'Ray')}: {where}"))
    out = ['<table class="summary">', *(f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in rows), "</table>"]
    if data["empty"]:
        out.append(f'<p class="empty">This report is empty: {e(data["empty"])}.</p>')
    pareto = data.get("pareto")
    if pareto and pareto["pareto"]:
        reference = format_point(pareto["reference_point"])
        out.append(f"<h2>Pareto set: {len(pareto['pareto'])} trials, hypervolume {pareto['hypervolume']:.6g}</h2>"
                   f"<p>Against the worst value of each metric measured ({e(reference)}).</p>")
        names = list(dict.fromkeys(k for p in pareto["pareto"] for k in p["config"]))
        out += ['<table class="pareto"><tr><th>trial</th>', *(f"<th>{e(m)}</th>" for m in pareto["metrics"]),
                *(f"<th>{e(n)}</th>" for n in names), "</tr>"]
        for p in pareto["pareto"]:
            out.append(f"<tr><td>{p['trial']}</td>" + "".join(f"<td>{p['values'][m]:.6g}</td>" for m in pareto["metrics"])
                       + "".join(f"<td>{e(format_value(p['config'].get(n, 'n/a')))}</td>" for n in names) + "</tr>")
        out.append("</table>")
    near = data["near_optimal"]
    of = f" of the best {objective['score']}" if objective.get("score") else " of the best"
    out.append(f"<h2>Near-optimal configurations (within {near['within']:g}{of}): {near['count']}</h2>")
    if near["trials"]:
        names = list(dict.fromkeys(k for t in near["trials"] for k in t["config"]))
        out += ['<table class="near"><tr><th>trial</th><th>value</th>',
                *(f"<th>{e(n)}</th>" for n in names), "</tr>"]
        for t in near["trials"]:
            out.append(f"<tr><td>{t['trial']}</td><td>{t['value']:.6g}</td>"
                       + "".join(f"<td>{e(format_value(t['config'].get(n, 'n/a')))}</td>" for n in names) + "</tr>")
        out.append("</table>")
        common = [(n, rows[0]) for n, rows in near["common"].items() if rows and rows[0]["lift"] and
                  rows[0]["lift"] > 1 and rows[0]["near_optimal"] > 0]
        if common:
            out.append("<p>What they have in common (a value's share inside the set against all trials):</p><ul>")
            out += [f"<li>{e(n)} = {e(r['value'])}: {r['near_optimal']} of {near['count']} near-optimal, "
                    f"{r['all']} of all ({r['lift']:.1f}x)</li>" for n, r in common[:10]]
            out.append("</ul>")
    imp = data["importance"]
    if "error" in imp:
        out.append(f'<p class="empty">Importance: {e(imp["error"])}.</p>')
    reasons = data["statuses"]["reasons"]
    if reasons:
        out += ["<h2>Trials that did not succeed</h2>", '<table class="reasons"><tr><th>status</th><th>trials</th>'
                "<th>reason</th></tr>",
                *(f"<tr><td>{e(r['status'])}</td><td>{r['trials']}</td><td>{e(r['reason'])}</td></tr>"
                  for r in reasons), "</table>"]
    return "\n".join(out)


def comparison_tables(data: dict[str, Any]) -> str:
    e = html.escape
    s = data["settings"]
    out = [f"<p>{e(str(s.get('seeds')))} seeds x {e(str(s.get('budget')))} evaluations of "
           f"{e(', '.join(s.get('variants', [])))}; state {e(data['state'])}"
           + (f" ({e(data['note'])})" if data["note"] else "") + ".</p>"]
    if s.get("stop_at_near_optimal"):
        out.append("<p>Each seed stopped at its first near-optimal configuration: evaluations to near-optimal and "
                   "success rates are exact; the best-so-far and instantaneous curves, and the best mean at budget, "
                   "need every budget spent and are not drawn.</p>")
    if s.get("judge"):
        out.append(f"<p>Near-optimal is judged on the means of {e(', '.join(s['judge']))}, while the searches drew "
                   "the table's own repeats.</p>")
    if data["empty"]:
        out.append(f'<p class="empty">This report is empty: {e(data["empty"])}.</p>')
    if data["algorithms"]:
        budget = s.get("budget")
        out.append('<table class="summary"><tr><th>algorithm</th><th>median evaluations to near-optimal</th>'
                   "<th>seeds that found none</th><th>success at budget</th><th>best mean at budget</th></tr>")
        for label, a in data["algorithms"].items():
            median, censored, seeds = a["median_evals_to_near_optimal"], a.get("censored") or 0, s.get("seeds")
            shown = fmt(median) if median is None or budget is None else median_in_words(median, budget, censored,
                                                                                            seeds or 0, fmt)
            out.append(f"<tr><td>{e(label)}</td><td>{shown}</td><td>{fmt(a.get('censored'))}</td>"
                       f"<td>{fmt(a['success_at_budget'])}</td><td>{fmt(a['best_mean_at_budget'])}</td></tr>")
        out.append("</table>")
    return "\n".join(out)


def _params(params: dict[str, Any]) -> str:
    """Its hyperparameters as the campaign resolved them, each name=value."""
    return ", ".join(f"{k}={format_value(v)}" for k, v in params.items())


def _pinned(fixed: dict[str, Any] | None) -> str:
    """A campaign's --fix pins, as the CLI's summary shows them beside the workload."""
    return f", pinned: {format_config(fixed)}" if fixed else ""


def fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)
