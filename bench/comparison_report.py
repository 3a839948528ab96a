"""What a run of bench/compare_algorithms.py shows, from its saved compare_algorithms.json alone: each table's
figures as the run printed them, the default's ratio to each peer against its target, the searches of ours that
are not above random search, the Markdown table of the results pages, and the success curves.

Every function here is a pure function of the saved report, so `compare_algorithms.py --from JSON` prints and
draws a run again without measuring, and the results pages are never worked out by hand.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.figures import COLOURS, Conditions, grid, legend, save
from storetune.tuner.search.compare import Variant

SEARCHERS = ("sa", "ga", "bo")  # each must beat random search's exact success curve
PEER = "optuna-tpe"  # the peer of runs saved before --peers existed


def ratios_by_peer(table: dict) -> dict[str, dict]:
    """A table's default and best ratios to each peer, in --peers order; a run saved before --peers has TPE's
    alone, as ``ratios``."""
    return table.get("ratios_by_peer") or {PEER: table["ratios"]}


def table_lines(r: dict) -> list[str]:
    """One table's figures as the run prints them when it finishes the table: per search the median evaluations
    to near-optimal with the IQR, the success at 50/100/200 and at the budget against random search's exact
    curve, and the ask+tell time; then the default's and our best's ratio to each peer, and the wall times."""
    budget, random_exact = r["budget"], r["ours"]["random_expected_success_at"]
    marks = [k for k in (50, 100, 200) if k < budget] + [budget]
    algorithms = {**r["ours"]["algorithms"], **r["peer"]["algorithms"]}
    seeds = len(next(iter(algorithms.values()))["evals_to_near_optimal"])
    lines = [f"\n== {r['title']}: near-optimal = within {r['within']:.5g} of the best: {r['near_optimal']} of "
             f"{r['size']} ({100 * r['near_optimal'] / r['size']:.2f}%); {seeds} seeds x {budget} evaluations",
             f"{'algorithm':<14}{'median evals (IQR)':>22}{'censored':>10}"
             + "".join(f"{'success@' + str(k):>13}" for k in marks) + f"{'vs random':>11}"
             + f"{'ask+tell ms @' + str(budget):>18}"]
    for label, a in algorithms.items():
        iqr = f"{a['median_evals_to_near_optimal']:g} ({a['evals_p25']:g}-{a['evals_p75']:g})"
        versus = a["success_at_budget"] - random_exact[budget - 1]
        lines.append(f"{label:<14}{iqr:>22}{a['censored']:>10}"
                     + "".join(f"{a['success_at'][k - 1]:>13.2f}" for k in marks) + f"{versus:>+11.2f}"
                     + (f"{'-':>18}" if a["ask_tell_ms_at_budget"] is None else f"{a['ask_tell_ms_at_budget']:>18.2f}"))
    lines.append(f"{'(random, exact)':<14}{'':>32}" + "".join(f"{random_exact[k - 1]:>13.2f}" for k in marks))
    for name, roles in ratios_by_peer(r).items():
        lines += [f"ours/{name} ({role}: {d['algorithm']}, {d['measure']}): {d['ratio']:.2f}  95% CI "
                  f"[{d['low']:.2f}, {d['high']:.2f}]" for role, d in roles.items()]
    lines.append("wall time: ours " + ", ".join([f"{r['wall_s']['ours']:.0f} s"] + [
        f"{n} {s:.0f} s" for n, s in r["wall_s"].items() if n != "ours"]))
    return lines


TARGETS = {"optuna-tpe": 0.8, "smac3": 1.0}  # the default's median over the peer's, at most, where search matters


def peer_figures(report: dict, default: str) -> dict[str, dict]:
    """Per peer: the default's ratio on each table, their geometric mean, the tables whose interval is below 1,
    and the tables where search matters that miss its target (TARGETS; a censored table's success ratio of 1
    or more)."""
    first = next(iter(report.values()))
    peers = list(ratios_by_peer(first))
    by_peer = {k: ratios_by_peer(r) for k, r in report.items()}
    searched = [k for k, r in report.items() if r["budget"] < r["size"]]  # else success is 1 for all
    out = {}
    for name in peers:
        ratios = {k: by_peer[k][name]["default"] for k in report}
        finite = [d["ratio"] for d in ratios.values() if 0 < d["ratio"] < float("inf")]
        target = TARGETS.get(Variant.parse_list(name)[0].algorithm, 1.0)
        missed = [k for k in searched if (ratios[k]["ratio"] >= 1 if ratios[k]["measure"].startswith("success")
                                          else ratios[k]["ratio"] > target)]
        out[name] = {"ratios": ratios, "geometric_mean": float(np.exp(np.mean(np.log(finite)))) if finite else None,
                     "tables": len(finite), "confident": [k for k, d in ratios.items() if d["high"] < 1],
                     "target": target, "searched": searched, "missed": missed}
    return out


def not_above_random(report: dict, default: str) -> dict[str, list[str]]:
    """Per search of ours (SA, GA, BO and the default, those the run measured): the tables where search matters
    and it was measured on which its success at the budget is not above random search's exact curve."""
    out: dict[str, list[str]] = {}
    for label in dict.fromkeys((*SEARCHERS, default)):
        for key, r in report.items():
            a = r["ours"]["algorithms"].get(label)
            if a is not None and r["budget"] < r["size"]:
                out.setdefault(label, [])
                if a["success_at_budget"] <= r["ours"]["random_expected_success_at"][r["budget"] - 1]:
                    out[label].append(key)
    return out


def summary_lines(report: dict, default: str, bold: bool = False) -> list[str]:
    """Per peer, the default's geometric mean and the tables that miss the target; per search of ours, where it
    is not above random search (``bold``: Markdown emphasis on the means)."""
    lines = []
    for name, f in peer_figures(report, default).items():
        if f["geometric_mean"] is None:
            continue
        mean = f"**{f['geometric_mean']:.2f}**" if bold else f"{f['geometric_mean']:.2f}"
        lines.append(f"{default} / {name}: geometric mean over {f['tables']} tables {mean}; upper end of the "
                     f"interval below 1 on {len(f['confident'])} of {len(report)}; at most {f['target']} on "
                     f"{len(f['searched']) - len(f['missed'])} of the {len(f['searched'])} where search matters"
                     + (f" (not: {'; '.join(report[k]['title'] for k in f['missed'])})" if f["missed"] else ""))
    for label, keys in not_above_random(report, default).items():
        measured = sum(r["budget"] < r["size"] and label in r["ours"]["algorithms"] for r in report.values())
        lines.append(f"{label}: above random search's exact success at the budget on {measured - len(keys)} of "
                     f"{measured}" + (f" (not: {'; '.join(report[k]['title'] for k in keys)})" if keys else ""))
    return lines


def cell(d: dict) -> str:
    """A ratio with its interval; ``s`` where it is a censored table's ratio of success rates."""
    return f"{d['ratio']:.2f} [{d['low']:.2f}, {d['high']:.2f}]{'s' if d['measure'].startswith('success') else ''}"


def summarize(report: dict, default: str) -> None:
    """One line per table with the default's ratio to each peer, then per peer the geometric mean and the tables
    that miss its target, then the searches of ours that are not above random search somewhere."""
    figures = peer_figures(report, default)
    print(f"\n== {default} against {', '.join(figures)}, every table (below 1: fewer evaluations than the peer)")
    widths = {name: max(26, len(name) + 2) for name in figures}
    print(f"{'table':<40}" + "".join(f"{name:>{widths[name]}}" for name in figures))
    for key, r in report.items():
        note = "" if r["budget"] < r["size"] else "   (budget = whole table)"
        print(f"{r['title'][:39]:<40}" + "".join(f"{cell(f['ratios'][key]):>{widths[name]}}"
                                                  for name, f in figures.items()) + note)
    print("(s: a censored table's ratio of success rates at the budget, the peer's over ours)")
    print("\n".join(summary_lines(report, default)))


def markdown(report: dict, default: str) -> str:
    """The run as a Markdown table for the results pages, each figure as the run computed it: per table the
    success at the budget of each search, random search's exact success, the medians of the default and the
    peers, and the default's ratio to each peer with its interval; then the summary lines."""
    figures = peer_figures(report, default)
    ours = [s for s in dict.fromkeys((*SEARCHERS, default)) if any(s in r["ours"]["algorithms"] for r in report.values())]
    head = (["table (near-optimal of all)", "random, exact"] + [f"`{s}`" if s == default else s.upper() for s in ours]
            + list(figures) + [f"median: `{default}`"] + [f"median: {p}" for p in figures]
            + [f"`{default}` / {p}" for p in figures])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def median(a: dict, budget: int) -> str:
        m = a["median_evals_to_near_optimal"]
        return f"more than {budget}" if m > budget else f"{m:g}"

    for key, r in report.items():
        algorithms = {**r["ours"]["algorithms"], **r["peer"]["algorithms"]}
        budget = r["budget"]
        row = [f"{r['title']} ({r['near_optimal']:,} of {r['size']:,})",
               f"{r['ours']['random_expected_success_at'][budget - 1]:.2f}"]
        row += [f"{algorithms[s]['success_at_budget']:.2f}" if s in algorithms else "" for s in [*ours, *figures]]
        row += [median(algorithms[default], budget)] + [median(algorithms[p], budget) for p in figures]
        row += [cell(f["ratios"][key]) for f in figures.values()]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines += [f"- {line}" for line in summary_lines(report, default, bold=True)]
    return "\n".join(lines)


def first_peer(table: dict) -> str:
    """The peer a table's "ratios" are against: the first of --peers (TPE in a run saved before --peers)."""
    return next(iter(ratios_by_peer(table)))


def plot(report: dict, default: str, path: Path, conditions: Conditions) -> Path:
    """One panel per table: the share of seeds that have found a near-optimal configuration after k evaluations,
    for each algorithm, each peer and random search's exact curve (dashed); the default and the first peer
    (whose ratio the title gives) drawn heaviest."""
    fig, axes = grid(len(report))
    for ax, r in zip(axes, report.values()):
        curves = {**r["ours"]["algorithms"], **r["peer"]["algorithms"]}
        x = np.arange(1, r["budget"] + 1)
        for label, a in curves.items():
            lead = label in (default, first_peer(r))
            ax.plot(x, a["success_at"], color=COLOURS.get(label.split("[")[0]), lw=2.0 if lead else 0.9,
                    alpha=1.0 if lead else 0.6, label=label)
        ax.plot(x, r["ours"]["random_expected_success_at"], color=COLOURS["random"], ls="--", lw=1.0,
                label="random (exact)")
        d = r["ratios"]["default"]
        ratio = f"{default}/{first_peer(r)} {d['ratio']:.2f} [{d['low']:.2f}, {d['high']:.2f}]"
        ax.set_title(f"{r['title']}\n{r['near_optimal']} of {r['size']:,} near-optimal; {ratio}", fontsize=8)
        ax.set_ylim(0, 1.02)
        ax.set_xlim(0, r["budget"])
        ax.grid(alpha=0.3)
    for ax in axes[::4]:
        ax.set_ylabel("share of seeds at near-optimal")
    for ax in axes[-4:]:
        ax.set_xlabel("evaluations")
    legend(fig, axes[0])
    first = next(iter(report.values()))
    seeds = len(first["peer"]["algorithms"][first_peer(first)]["evals_to_near_optimal"])
    return save(fig, path, f"Success against evaluations, {seeds} seeds per table", conditions)
