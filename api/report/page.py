"""The web report: the figures (plotly, whose JavaScript ships inside its Python package, so no CDN)
and the page around them, for a campaign or a comparison.

One builder serves the CLI's self-contained HTML file (plotly.js inlined) and the service's live page
(plotly.js served by the service; the page asks ``.../report/data`` for new figures every few seconds
while the campaign runs and redraws them with ``Plotly.react``).
"""

from __future__ import annotations

import html
import itertools
import json
import math
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

from storetune.api.report.tables import campaign_tables, comparison_tables, fmt  # noqa: F401 (re-exported for page and tests)

REFRESH_MS = 3000
IMPORTANCE_BARS = 15  # parameters drawn in the importance chart, the largest ANOVA shares first


# --- the figures ------------------------------------------------------------------------------------
def _layout(title: str, x: str, y: str, log: bool = False, **extra: Any) -> dict[str, Any]:
    layout = dict(title=dict(text=title), xaxis=dict(title=dict(text=x)),
                  yaxis=dict(title=dict(text=y), **({"type": "log"} if log else {})),
                  margin=dict(l=70, r=20, t=50, b=55), height=380, template="none")
    return {**layout, **extra}


def _figure(fig: go.Figure, caption: str) -> dict[str, Any]:
    """A figure as JSON, without its template: the page applies one template to every figure (each
    figure carrying its own copy cost a third of the page's build at 10,000 trials, and its bytes)."""
    return {"figure": json.loads(fig.to_json()), "caption": caption}


TEMPLATE = "plotly_white"


def _steps(x: list[Any], best: list[Any]) -> tuple[list[Any], list[Any]]:
    """The best-so-far curve at its changes only (and its end), drawn as steps: the same line, with
    as many points as improvements instead of one per evaluation."""
    keep = [i for i in range(len(best)) if i == 0 or i == len(best) - 1 or best[i] != best[i - 1]]
    return [x[i] for i in keep], [best[i] for i in keep]


def _instant_traces(instant: dict[str, Any], axis: str) -> list[Any]:
    """Each evaluation's value: a dot each, or (binned on the server) a band from each bin's minimum
    to its maximum with its median. SVG only: WebGL costs a second to start in a browser without a GPU."""
    x = instant[axis]
    if instant["bin"] == 1:
        return [go.Scatter(x=x, y=instant["value"], mode="markers", name="each evaluation",
                           marker=dict(size=5, opacity=0.5))]
    band = f"range of each {instant['bin']} evaluations"
    return [go.Scatter(x=x, y=instant["high"], mode="lines", line=dict(width=0), showlegend=False, hoverinfo="skip",
                       legendgroup="band"),
            go.Scatter(x=x, y=instant["low"], mode="lines", line=dict(width=0), fill="tonexty", name=band,
                       fillcolor="rgba(99,110,250,0.25)", legendgroup="band"),
            go.Scatter(x=x, y=instant["median"], mode="lines", name=f"median of each {instant['bin']} evaluations",
                       line=dict(width=1, color="rgb(99,110,250)"))]


def campaign_figures(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    metric = data["objective"].get("score") or data["objective"]["metric"]  # several metrics: the score drawn
    better = "lower" if data["objective"]["direction"] == "min" else "higher"
    curve, log, instant = data["convergence"], data["log_scale"], data["instant"]
    binned = f" (binned by {instant['bin']} evaluations)" if instant["bin"] > 1 else ""
    # with adaptive repeats the line is the incumbent, which a re-measurement can make worse: said, not hidden
    line, race = ("incumbent", " The line is the incumbent (adaptive repeats): the best mean among the "
                  "configurations measured the most times. It gets worse when a re-measurement shows that one was "
                  "lucky, and a dot below it is a run not yet measured as often.") if data.get("adaptive") else \
        ("best so far", "")
    figures: dict[str, dict[str, Any]] = {}
    for name, axis, title, label, caption in (
            ("convergence", "evaluation", "Convergence by evaluation", "evaluation (finished trials)",
             "Where the line flattens, more evaluations stopped paying; the dots (or the band) are what each "
             f"evaluation cost production while tuning.{race}"),
            ("convergence_time", "elapsed_s", "Convergence by wall time", "seconds since the first trial started",
             "The same search against the clock: benchmarks, not the algorithm, set the pace (a stopped and "
             "resumed campaign includes the pause).")):
        steps_x, steps_y = _steps(curve[axis], curve["best"])
        fig = go.Figure([
            *_instant_traces(instant, axis),
            go.Scatter(x=steps_x, y=steps_y, mode="lines", name=line, line=dict(width=3, shape="hv")),
        ], layout=_layout(f"{title}{binned}", label, f"{metric} ({better} is better)", log))
        figures[name] = _figure(fig, caption)
    counts = data["statuses"]["counts"]
    fig = go.Figure([go.Bar(x=list(counts), y=list(counts.values()), text=list(counts.values()))],
                    layout=_layout("Trial statuses", "status", "trials"))
    figures["statuses"] = _figure(fig, "FAILED, INVALID and TIMEOUT trials are data: their reasons are listed below.")
    imp = data["importance"]
    if "parameters" in imp:
        shown = IMPORTANCE_BARS
        params = imp["parameters"][:shown][::-1]
        names = [p["name"] for p in params]
        title = "Which parameters matter" + (f" (the {shown} of {len(imp['parameters'])} with the largest ANOVA share; "
                                             "storetune importance lists all)" if len(imp["parameters"]) > shown else "")
        fig = go.Figure([
            go.Bar(y=names, x=[p["anova_share"] for p in params], orientation="h", name="OLS type-II ANOVA share"),
            go.Bar(y=names, x=[p["forest_share"] for p in params], orientation="h", name="random-forest variance share"),
        ], layout=_layout(title, "share of the objective's variance", "parameter",
                          barmode="group", height=max(320, 34 * len(names) + 120)))
        caution = f" Caution: {imp['forest_caution']}." if imp.get("forest_caution") else ""
        figures["importance"] = _figure(fig, f"Both methods on the same {imp['trials']} trials (their rankings agree "
                                             f"at Spearman {fmt(imp['rank_agreement'])}); a long bar in both is a "
                                             f"parameter worth tuning.{caution}")
        rows = [(p["name"], c) for p in imp["parameters"][:10] for c in p["coefficients"]][:60]
        labels = [f"{name} = {c['level']}" for name, c in rows][::-1]
        estimates = [c["estimate"] for _, c in rows][::-1]
        high = [(c["ci_high"] - c["estimate"]) if c["ci_high"] is not None else 0 for _, c in rows][::-1]
        low = [(c["estimate"] - c["ci_low"]) if c["ci_low"] is not None else 0 for _, c in rows][::-1]
        fig = go.Figure([go.Scatter(x=estimates, y=labels, mode="markers", name="coefficient",
                                    error_x=dict(type="data", array=high, arrayminus=low))],
                        layout=_layout("OLS coefficients with 95% intervals", f"effect on {metric} against the "
                                       "parameter's baseline value", "parameter = value",
                                       height=max(320, 22 * len(labels) + 120)))
        figures["coefficients"] = _figure(fig, "The ATC'18 regression: each value against its parameter's most "
                                               "common one; an interval that crosses 0 is not a measured effect.")
    if (data.get("pareto") or {}).get("pareto") and len(data["pareto"]["metrics"]) >= 2:
        metrics = data["pareto"]["metrics"]
        for k, (x, y) in enumerate(itertools.combinations(metrics, 2)):  # three metrics: three pairs
            figures["pareto" if k == 0 else f"pareto_{k}"] = _figure(
                _pareto_figure(data["pareto"], x, y),
                f"Each dot is a succeeded trial{_last(data['pareto'])}; the Pareto set is the trials no other trial "
                "beats in every metric at once: the trade-offs worth choosing among. The cross is the reference "
                "point the hypervolume is measured from" + ("" if len(metrics) == 2 else
                                                            f"; a pair of the {len(metrics)} metrics, so some of "
                                                            "the set lies behind others here") + ".")
    if data.get("series"):
        figures["series"] = _figure(*_series_figure(data["series"]))
    par = data["parallel"]
    if par["lines"]:
        sampled = f" (a seeded sample of {par['lines']:,} of {par['of']:,} trials)" if par["lines"] < par["of"] else ""
        figures["parallel"] = {
            **_figure(_parallel_lines(par, metric, log, f"Every succeeded trial{sampled}"),
                      "Each line is a trial, coloured by how good its value is (the best on top): click a band in "
                      "the legend to hide it, double-click to see it alone; the interactive plot selects by axis."),
            "alternate": {"label": "interactive plot: drag along an axis to select (WebGL, slow without a GPU)",
                          "back": "back to the lines", **_figure(_parcoords(par, metric, f"Every succeeded trial{sampled}"), "")},
        }
    return figures


def _series_figure(series: dict[str, Any]) -> tuple[go.Figure, str]:
    """Each drawn run's ops/s second by second: the best trial's thick, a run that never reached steady state
    dashed, a diamond where a run did."""
    traces = []
    for r in series["runs"]:
        x = [i * r["interval_s"] for i in range(1, len(r["ops_per_s"]) + 1)]
        steady = r["steady"] or {}
        name = f"trial {r['trial']}" + (f" run {r['repeat'] + 1}" if r["repeat"] else "") + (" (best)" if r["best"] else "")
        traces.append(go.Scatter(x=x, y=r["ops_per_s"], mode="lines", name=name + ("" if steady.get("reached") else ", never steady"),
                                 line=dict(width=3 if r["best"] else 1.2, dash="solid" if steady.get("reached") else "dash")))
        if steady.get("reached"):
            at = int(round(steady["from_s"] / r["interval_s"]))
            traces.append(go.Scatter(x=[x[at]], y=[r["ops_per_s"][at]], mode="markers", showlegend=False,
                                     marker=dict(symbol="diamond", size=9), name=f"{name}: steady from {steady['from_s']:g} s"))
    drawn = len(series["runs"])
    unsteady = series["unsteady_trials"]
    caption = (f"{drawn} of the campaign's {series['total']} runs, second by second (the best trial's and the latest). "
               f"{series['unsteady_runs']} of the {series['total']} never reached steady state"
               + (f" (trials {', '.join(map(str, unsteady[:20]))}{', ...' if len(unsteady) > 20 else ''})" if unsteady else "")
               + f": their figure depends on how long they ran. Steady state: {series['rule']}; a diamond marks where "
               "a run reached it, a dashed line a run that never did.")
    fig = go.Figure(traces, layout=_layout("Runs second by second", "seconds into the run", "ops/s"))
    return fig, caption


def _last(pareto: dict[str, Any]) -> str:
    shown, of = len(pareto["points"]), pareto["trials"]
    return f" (the last {shown:,} of {of:,})" if shown < of else ""


def _pareto_figure(pareto: dict[str, Any], x: str, y: str) -> go.Figure:
    """Two metrics of every succeeded trial: the others faint, the Pareto set's on top (joined when the
    objective has just these two: with a third metric, the set seen on two of them is no front), and the
    hypervolume's reference point."""
    two = len(pareto["metrics"]) == 2
    front = sorted(pareto["pareto"], key=lambda p: (p["values"][x], p["values"][y]))
    ahead = {p["trial"] for p in front}
    rest = [p for p in pareto["points"] if p["trial"] not in ahead]
    better = {m: "lower" if d == "min" else "higher" for m, d in zip(pareto["metrics"], pareto["directions"])}
    traces = [
        go.Scatter(x=[p["values"][x] for p in rest], y=[p["values"][y] for p in rest], mode="markers",
                   name="other trials", marker=dict(color="rgba(120,120,120,0.35)"),
                   text=[f"trial {p['trial']}" for p in rest]),
        go.Scatter(x=[p["values"][x] for p in front], y=[p["values"][y] for p in front],
                   mode="lines+markers" if two else "markers",
                   name=f"Pareto set ({len(front)} trials)",
                   marker=dict(size=9), text=[f"trial {p['trial']}" for p in front]),
    ]
    reference = pareto.get("reference_point")
    if reference:
        traces.append(go.Scatter(x=[reference[x]], y=[reference[y]], mode="markers", name="reference point",
                                 marker=dict(symbol="x", size=12, color="black"),
                                 text=["the worst value of each metric: the hypervolume is measured from here"]))
    figure = go.Figure(traces, layout=_layout(
        f"Pareto set: {x} against {y}" + ("" if two else f" (of {len(pareto['metrics'])} metrics)"),
        f"{x} ({better[x]} is better)", f"{y} ({better[y]} is better)", pareto["log_scale"][y]))
    if pareto["log_scale"][x]:
        figure.update_xaxes(type="log")
    return figure


BANDS = ((0.10, "best 10%"), (0.25, "next 15%"), (0.50, "next 25%"), (1.00, "worst 50%"))


def _parallel_lines(par: dict[str, Any], metric: str, log: bool, title: str) -> go.Figure:
    """Parallel coordinates as SVG lines, one colour per band of value (best 10%, ...). By hand on
    plotly's scatter because plotly's parcoords is WebGL only: over a second to first draw without a GPU."""
    from plotly.colors import sample_colorscale

    axes = [*par["dimensions"], {"name": metric, "values": par["value"], "log": log}]
    scaled, ticks = [], []
    for axis in axes:
        values = np.asarray(axis["values"], dtype=float)
        if "labels" in axis:
            span = max(len(axis["labels"]) - 1, 1)
            scaled.append(values / span if len(axis["labels"]) > 1 else np.full(len(values), 0.5))
            ticks.append([(i / span if len(axis["labels"]) > 1 else 0.5, label)
                          for i, label in enumerate(axis["labels"])])
            continue
        missing = np.isnan(values)  # where a conditional parameter does not apply: at the foot, as n/a
        known = values[~missing]
        use_log = axis.get("log") and (known > 0).all()
        shown = np.where(missing, np.nan, np.log10(np.where(missing, 1.0, values))) if use_log else values
        low, high = (float(np.nanmin(shown)), float(np.nanmax(shown))) if len(known) else (0.0, 1.0)
        width = high - low or 1.0
        foot, room = (0.12, 0.88) if missing.any() else (0.0, 1.0)
        place = foot + room * ((shown - low) / width if high > low else np.full(len(values), 0.5))
        scaled.append(np.where(missing, 0.0, place))
        distinct = np.unique(shown[~missing])
        marks = distinct if len(distinct) <= 5 else np.linspace(low, high, 5)  # a flag's 0 and 1, not 0.25 ...
        labels = _ticks([10 ** m if use_log else m for m in marks], sizes=axis is not axes[-1])
        ticks.append([(foot + room * ((m - low) / width if high > low else 0.5), label)
                      for m, label in zip(marks, labels)] + ([(0.0, "n/a")] if missing.any() else []))
    lines = np.column_stack(scaled)
    rank = np.asarray(par["rank"], dtype=float)
    colours = sample_colorscale("Viridis", [0.25 + 0.75 * (1 - i / (len(BANDS) - 1)) for i in range(len(BANDS))])
    traces, floor = [], 0.0
    for (ceiling, label), colour in zip(BANDS, colours):
        members = np.flatnonzero((rank > floor) & (rank <= ceiling))
        floor = ceiling
        if not len(members):
            continue
        x = np.tile(np.append(np.arange(len(axes), dtype=float), np.nan), len(members))
        y = np.column_stack([lines[members], np.full(len(members), np.nan)]).ravel()
        traces.append(go.Scatter(x=x, y=y, mode="lines", name=f"{label} ({len(members):,})", hoverinfo="skip",
                                 line=dict(width=1, color=colour), opacity=0.5 if ceiling > 0.1 else 0.9))
    traces.reverse()  # the best band last: drawn on top
    traces.append(go.Scatter(x=[i for i, t in enumerate(ticks) for _ in t], y=[p for t in ticks for p, _ in t],
                             text=[label for t in ticks for _, label in t], mode="text", textposition="middle right",
                             textfont=dict(size=10), showlegend=False, hoverinfo="skip"))
    layout = dict(title=dict(text=title), height=480, template="none", margin=dict(l=40, r=40, t=60, b=60),
                  xaxis=dict(tickvals=list(range(len(axes))), ticktext=[a["name"] for a in axes], showgrid=False,
                             zeroline=False, range=[-0.3, len(axes) - 0.45], title=dict(text="parameter (axis)")),
                  yaxis=dict(visible=False, range=[-0.05, 1.05]),
                  shapes=[dict(type="line", x0=i, x1=i, y0=0, y1=1, line=dict(color="#888", width=1))
                          for i in range(len(axes))],
                  legend=dict(title=dict(text=f"{metric}, by rank"), traceorder="reversed"))
    return go.Figure(traces, layout=layout)


def _parcoords(par: dict[str, Any], metric: str, title: str) -> go.Figure:
    """plotly's own parallel coordinates (WebGL): select trials by dragging along an axis. Coloured by
    rank, as the lines are: the best bright."""
    dims = [dict(label=d["name"], **({"values": np.asarray(d["values"], dtype=float),  # numpy: one array
                                       "tickvals": list(range(len(d["labels"]))), "ticktext": d["labels"]}
                                      if "labels" in d else _at_foot(np.asarray(d["values"], dtype=float))))
            for d in par["dimensions"]]
    value = np.asarray(par["value"], dtype=float)
    dims.append(dict(label=metric, values=value))
    return go.Figure([go.Parcoords(line=dict(color=np.asarray(par["rank"]), colorscale="Viridis", showscale=True,
                                            reversescale=True, colorbar=dict(title=dict(text="rank (0: best)"))),
                                   dimensions=dims)],
                     layout=dict(title=dict(text=title), height=480, margin=dict(l=70, r=70, t=80, b=40),
                                 template="none"))


def _at_foot(values: np.ndarray) -> dict[str, Any]:
    """A number axis's values and, if a parameter does not apply somewhere (NaN, which parcoords would not
    draw), those placed below the others with a tick of their own, n/a, beside five of the values."""
    missing = np.isnan(values)
    if not missing.any():
        return {"values": values}
    if missing.all():
        return {"values": np.zeros(len(values)), "tickvals": [0.0], "ticktext": ["n/a"]}
    low, high = float(np.nanmin(values)), float(np.nanmax(values))
    foot = low - 0.1 * ((high - low) or 1.0)
    marks = np.unique(values[~missing]) if len(np.unique(values[~missing])) <= 5 else np.linspace(low, high, 5)
    return {"values": np.where(missing, foot, values), "tickvals": [foot, *marks.tolist()],
            "ticktext": ["n/a", *_ticks(marks.tolist())]}


def _ticks(values: list[float], sizes: bool = True) -> list[str]:
    """An axis's numbers, short. Where every one is a whole multiple of 1024 (block, inode and journal
    sizes, on a parameter's axis: ``sizes``), as 4K, 256K or 4M: 262144 read 2.621e+05 and ran into the next
    axis's labels. Otherwise whole numbers below a million as they are, the rest to 4 significant digits."""
    rounded = [float(f"{v:.10g}") for v in values]  # 10 ** log10(262144) is 262144.0000000001
    whole = [int(v) for v in rounded if math.isfinite(v) and v == int(v)]
    if sizes and len(whole) == len(rounded) and any(whole) and all(w % 1024 == 0 and abs(w) < 1 << 50 for w in whole):
        out = []
        for w in whole:
            suffix, size = next(((s, z) for s, z in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10))
                                 if w % z == 0 and abs(w) >= z), ("", 1))
            out.append(f"{w // size}{suffix}")
        return out
    return [str(int(v)) if math.isfinite(v) and v == int(v) and abs(v) < 1_000_000 else f"{v:.4g}" for v in rounded]


def comparison_figures(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    metric = data["objective"].get("metric", "value")
    better = "lower" if data["objective"].get("direction") == "min" else "higher"
    algorithms = data["algorithms"]
    figures: dict[str, dict[str, Any]] = {}
    if not algorithms:
        return figures
    # one colour per algorithm in every figure (plotly colours traces by their position in each figure)
    palette = qualitative.Plotly
    labels = dict.fromkeys([*algorithms, *data["best_so_far"]])
    colour = {label: palette[i % len(palette)] for i, label in enumerate(labels)}
    # the share of seeds that have found one by each evaluation: a step at each seed's first find
    traces = [go.Scatter(x=list(range(1, len(a["success_at"]) + 1)), y=a["success_at"], mode="lines", name=label,
                         line=dict(color=colour[label], shape="hv")) for label, a in algorithms.items()]
    if data["random_exact"]:
        traces.append(go.Scatter(x=list(range(1, len(data["random_exact"]) + 1)), y=data["random_exact"],
                                 mode="lines", name="random search, exact", line=dict(dash="dash", color="black")))
    within = data["settings"].get("within", 0.99)
    figures["success"] = _figure(
        go.Figure(traces, layout=_layout(f"Success rate: a configuration within {within:g} of the table's best mean",
                                         "evaluations", "share of seeds", yaxis_range=[0, 1.02])),
        "Higher and further left is better; the dashed line is what random search achieves, computed exactly.")
    if not data["settings"].get("stop_at_near_optimal"):  # a stopped seed has no k-th value, nor a best at every k
        figures["best_so_far"] = _figure(
            go.Figure([go.Scatter(x=list(range(1, len(c) + 1)), y=c, mode="lines", name=label,
                                  line=dict(color=colour[label])) for label, c in data["best_so_far"].items()],
                      layout=_layout("Median best-so-far over seeds", "evaluations", f"{metric} ({better} is better)",
                                     data["log_scale"])),
            "How good the configuration a typical seed reports as its best so far is: the table's mean of it, "
            "not its best measurement, which on a noisy table is partly a lucky draw." if data.get("best_so_far_of")
            != "best value seen" else "The best value a typical seed has seen so far, not judged by the table: "
            f"{data.get('table_error') or 'it could not be read again'} (on a table with noisy repeats the best "
            "value seen flatters every algorithm).")
        figures["instant"] = _figure(
            go.Figure([go.Scatter(x=list(range(1, len(a["instant_mean"] or []) + 1)), y=a["instant_mean"], mode="lines",
                                  name=label, line=dict(color=colour[label])) for label, a in algorithms.items()],
                      layout=_layout("Instantaneous value: the table mean of the k-th evaluation, averaged over seeds",
                                     "evaluations", f"{metric} ({better} is better)", data["log_scale"])),
            "What production suffers while each algorithm tunes: an algorithm that explores wildly pays here.")
    figures["evals"] = _figure(
        go.Figure([go.Box(y=a["evals_to_near_optimal"], name=label, boxpoints="outliers", marker=dict(color=colour[label]))
                   for label, a in algorithms.items()],
                  layout=_layout("Evaluations to a near-optimal configuration", "algorithm",
                                 "evaluations (budget + 1: never within the budget)")),
        "Lower is better; a box pressed against the top never found one within the budget.")
    return figures


# --- the page ---------------------------------------------------------------------------------------
STYLE = """body{font-family:system-ui,sans-serif;margin:24px;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:28px}.chart{margin:18px 0 4px}
.caption{color:#555;font-size:.9em;margin:0 0 18px 8px}table{border-collapse:collapse;font-size:.9em}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}.empty{color:#a33}#live{color:#555;font-size:.85em}
.toggle{font-size:.85em;margin:0 0 4px 8px}"""

SCRIPT = """
const FIGURES = {};
function show(name){
  const f = FIGURES[name], div = document.getElementById('chart-' + name);
  const alt = Boolean(f.alternate && div.dataset.alternate);
  if (f.alternate) document.getElementById('toggle-' + name).textContent = alt ? f.alternate.back : f.alternate.label;
  document.getElementById('caption-' + name).textContent = f.caption;
  const shown = alt ? f.alternate : f;
  const layout = Object.assign({}, shown.figure.layout, {template: TEMPLATE});
  Plotly.react(div, shown.figure.data, layout, {responsive: true, displaylogo: false});
}
function draw(figures){
  for (const [name, f] of Object.entries(figures)) {
    let div = document.getElementById('chart-' + name);
    if (!div) {
      const box = document.createElement('div'); box.className = 'chart';
      div = document.createElement('div'); div.id = 'chart-' + name;
      if (f.alternate) {
        const b = document.createElement('button'); b.id = 'toggle-' + name; b.className = 'toggle';
        b.onclick = () => { div.dataset.alternate = div.dataset.alternate ? '' : '1'; Plotly.purge(div); show(name); };
        box.appendChild(b);
      }
      box.appendChild(div);
      const cap = document.createElement('p'); cap.className = 'caption'; cap.id = 'caption-' + name;
      document.getElementById('charts').appendChild(box); document.getElementById('charts').appendChild(cap);
    }
    FIGURES[name] = f; show(name);
  }
}
draw(REPORT.figures);
if (REPORT.live && ['queued', 'running'].includes(REPORT.state)) {
  const timer = setInterval(async () => {
    const r = await fetch(REPORT.live); if (!r.ok) return;
    const next = await r.json();
    document.getElementById('tables').innerHTML = next.tables;
    const running = ['queued', 'running'].includes(next.state);
    document.getElementById('live').textContent = (running ? 'live: updated ' : next.state + ' at ')
      + new Date().toLocaleTimeString() + (running ? '' : ': no longer refreshed');
    draw(next.figures);
    if (!running) clearInterval(timer);
  }, REFRESH);
}
"""


def payload(data: dict[str, Any]) -> dict[str, Any]:
    """What the page draws: the figures and the tables' HTML (also what the live page refetches)."""
    if data["kind"] == "campaign":
        return {"state": data["state"], "figures": campaign_figures(data), "tables": campaign_tables(data)}
    return {"state": data["state"], "figures": comparison_figures(data), "tables": comparison_tables(data)}


def page(data: dict[str, Any], *, plotly_src: str | None = None, live: str | None = None) -> str:
    """The HTML page. Without ``plotly_src``, plotly.js is inlined: one self-contained file that
    opens without a network. ``live`` is the URL the page polls while the campaign runs."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs
    from plotly.utils import PlotlyJSONEncoder

    body = payload(data)
    # its layout only: the trace defaults of every trace type cost the browser more than the charts
    template = {"layout": json.loads(json.dumps(pio.templates[TEMPLATE].layout.to_plotly_json(), cls=PlotlyJSONEncoder))}
    report = {"figures": body["figures"], "state": data["state"], "live": live}
    script = f'<script src="{html.escape(plotly_src)}"></script>' if plotly_src else f"<script>{get_plotlyjs()}</script>"
    title = html.escape(data["title"])
    # a finished campaign's page no longer polls: it said "live" all the same
    live_note = f"live: refreshes while the {data['kind']} runs" if live and data["state"] in ("queued", "running") else ""
    return (f"<!doctype html><html><head><meta charset='utf-8'><link rel='icon' href='data:,'><title>StoreTune: {title}</title>"
            f"<style>{STYLE}</style>{script}</head><body><h1>StoreTune report: {title}</h1>"
            f"<p id='live'>{live_note}</p>"
            f"<div id='tables'>{body['tables']}</div><div id='charts'></div>"
            f"<script>const REFRESH = {REFRESH_MS}; const TEMPLATE = {_script_json(template)};\n"
            f"const REPORT = {_script_json(report)};{SCRIPT}</script>"
            "</body></html>")


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element (a trial's reason may hold '</script>')."""
    return json.dumps(value).replace("</", "<\\/")
