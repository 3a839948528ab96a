"""The files `storetune compare --out DIR` writes, for plots and spreadsheets."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def write_comparison(out: Path, results: Mapping[str, Any], runs: Mapping[str, Sequence[Any]]) -> list[Path]:
    """summary.json, success.csv (share of seeds near-optimal by evaluation k), instant.csv (mean
    table value of the k-th evaluation; not when each seed stopped at its first near-optimal
    configuration), evaluations.csv (per seed), diversity.csv (GA variants)."""
    out.mkdir(parents=True, exist_ok=True)
    algorithms = results["algorithms"]
    labels = list(algorithms)
    written = [out / "summary.json"]
    written[0].write_text(json.dumps(results, indent=1))

    def table(name: str, header: list[str], rows: list[list[Any]]) -> None:
        path = out / name
        with path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(rows)
        written.append(path)

    budget = results["budget"]
    table("success.csv", ["k", "random_expected", *labels],
          [[k + 1, results["random_expected_success_at"][k], *(algorithms[a]["success_at"][k] for a in labels)]
           for k in range(budget)])
    if not results.get("stop_at_near_optimal"):  # seeds stopped early have no value at every k
        table("instant.csv", ["k", *labels],
              [[k + 1, *(algorithms[a]["instant_mean"][k] for a in labels)] for k in range(budget)])
    table("evaluations.csv", ["algorithm", "seed", "campaign", "evals_to_near_optimal"],
          [[label, r.seed, r.campaign_id, e] for label in labels
           for r, e in zip(sorted(runs[label], key=lambda r: r.seed), algorithms[label]["evals_to_near_optimal"])])
    diverse = [a for a in labels if "diversity" in algorithms[a]]
    if diverse:
        longest = max(len(algorithms[a]["diversity"]) for a in diverse)
        table("diversity.csv", ["generation", *diverse],
              [[g, *(_at(algorithms[a]["diversity"], g) for a in diverse)] for g in range(longest)])
    return written


def _at(values: Sequence[float], i: int) -> float | str:
    return values[i] if i < len(values) else ""
