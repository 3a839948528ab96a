"""Exhaustive tables of a known shape, for checking algorithms on tables nobody tuned them on.

    .venv/bin/python bench/synthetic_tables.py --out results/synthetic --tables 4 [--options 12]

Each table lists every combination of ``--options`` binary options; its objective (a time, lower is
better) is exp(sum of main effects + a few pairwise interactions) times a little measurement noise:
the shape of the configurable-systems tables (BDBC, LLVM, X264), where a handful of options matter
much, most matter little, and a few pairs interact. Each option is influential with probability 0.4 (a
Laplace main effect of scale 0.3 on the log) and otherwise nearly inert (scale 0.003), so that several
configurations sit within 1% of the best; ``--interactions`` pairs get a Laplace effect of their own.
Written by hand: the generator is twenty lines and must be reproducible from its seed. The tables are
written in the MOOT format (options, then ``Performance-``), so every StoreTune command reads them.

    .venv/bin/python bench/synthetic_tables.py --out results/ordinal --options 11 --ordinals 2 --levels 6 --shape cliff

``--ordinals N`` adds N ordinal options of ``--levels`` values each (``d0``, ``d1``, ...; their effects are
drawn from a second random stream, so the binary options' effects are those of the same seed without
them). ``--shape smooth`` makes each influential ordinal act in order, a random quadratic of its position
(HSMGP's `Pre` and `Post`, SS-A's `Spliters`); ``--shape cliff`` makes it act apart from its order: the
objective improves steadily up to a random value and jumps 3-20x past it (7z's `Xval`, best at 4 and
9x worse at 6).

    .venv/bin/python bench/synthetic_tables.py --out results/sampled --sample 7z:0.05,7z:0.2,BDBC:0.2,HSMGP_num:0.2

    .venv/bin/python bench/synthetic_tables.py --out results/numeric --tables 4 --numeric --first-seed 2000

``--numeric`` writes sampled tables of many-valued numeric knobs, the shape of a real server's measured
table (buffer sizes, thresholds, timer frequencies): 6 to 12 knobs of 5 to 5,000 levels (on a log grid for
most, as the kernel's own sizes are), a smooth response with a few interactions and a cliff or two, noise
that grows with the objective, and a random sample of 2,000 to 5,000 of the grid's configurations, each
measured 1 to 10 times (one row per run).

``--response bottleneck`` makes the time the slowest of 2 to 4 resources, each loaded by its own knobs, so
that the response is flat along most moves; ``--noise X`` gives every configuration, fast or slow, a CV of
2% + X x U(0, 1), the regime where a lucky repeat passes for a better configuration.

Beside each numeric table, ``truth/NAME`` holds every configuration's noiseless objective, one row each, and
the generator prints where the benchmark's near-optimal set (its best means) sits in that truth. With
``--noise 0.3`` the best means are mostly lucky repeats of middling configurations (numeric-2113's bottleneck
table: noiseless ranks 289 to 687 of 3,630); ``bench/compare_algorithms.py --truth`` judges success on the
truth instead, while the searches still see the repeats.

    .venv/bin/python bench/synthetic_tables.py --out results/binary --tables 20 --structure random --first-seed 3000

``--structure random`` draws a 12-binary table's interactions too: 0 to 8 terms among 2 or 3 options each
(biased towards the influential options), and the share of influential options from 0.2 to 0.6.

``--sample NAME:SHARE`` instead writes a table of ``SHARE`` of the rows of a measured MOOT table, drawn at
random (pandas, seed ``--first-seed``): a sampled table, whose configurations no longer form a grid, so
that one-option moves land on the nearest listed configuration, as on SQL_AllMeasurements.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np


def table(seed: int, options: int = 12, interactions: int = 3, scale: float = 0.3, ordinals: int = 0,
          levels: int = 6, shape: str = "smooth", structure: str = "pairs") -> tuple[np.ndarray, np.ndarray]:
    """Every configuration (binary options, then ordinal positions) and its objective. ``structure="random"``
    draws the interactions too: 0 to 8 terms, each among 2 or 3 options (chosen with a bias towards the
    influential ones, as hierarchical effects are), and the share of influential options from 0.2 to 0.6."""
    rng = np.random.default_rng(seed)
    X = np.array(list(itertools.product(*[(0, 1)] * options, *[range(levels)] * ordinals)), dtype=int)
    influential = rng.random(options) < 0.4  # the rest change the objective by well under 1% each
    main = np.where(influential, rng.laplace(0.0, scale, size=options), rng.laplace(0.0, scale / 100, size=options))
    pairs = [tuple(rng.choice(options, size=2, replace=False)) for _ in range(interactions)]
    log_y = X[:, :options] @ main
    if structure == "random":  # its own stream, redrawing the main effects' influence and every interaction
        drawn = np.random.default_rng([seed, 4])
        influential = drawn.random(options) < drawn.uniform(0.2, 0.6)
        main = np.where(influential, drawn.laplace(0.0, scale, size=options),
                        drawn.laplace(0.0, scale / 100, size=options))
        log_y = X[:, :options] @ main
        weights = np.where(influential, 3.0, 1.0) / np.where(influential, 3.0, 1.0).sum()
        for _ in range(int(drawn.integers(0, 9))):
            members = drawn.choice(options, size=int(drawn.integers(2, 4)), replace=False, p=weights)
            log_y = log_y + drawn.laplace(0.0, 2 * scale) * np.prod(X[:, members], axis=1)
        pairs = []
    elif structure != "pairs":
        raise ValueError(f"structure {structure!r}: choose pairs or random")
    for i, j in pairs:
        log_y = log_y + rng.laplace(0.0, 2 * scale) * X[:, i] * X[:, j]
    extra = np.random.default_rng([seed, 1])  # the ordinals' own stream: the binary effects stay the seed's
    for k in range(ordinals):
        log_y = log_y + ordinal_effect(extra, levels, shape, scale)[X[:, options + k]]
    y = 100.0 * np.exp(log_y - log_y.min()) * np.exp(rng.normal(0.0, 0.002, size=len(X)))
    return X, y


def numeric_table(seed: int, knobs: int | None = None, rows: int | None = None,
                  response: str = "smooth", noise: float | None = None
                  ) -> tuple[list[dict], np.ndarray, list[np.ndarray], np.ndarray]:
    """A sampled table of many-valued numeric knobs, as a measured server's table is: ``knobs`` (6 to 12) integer
    or real knobs of 5 to 5,000 levels (buffer sizes and counts on a log grid, ratios and intervals on a linear
    one); a smooth response on each knob's own scale with a few interactions and a cliff or two; noise that grows
    with the objective; and a random *sample* of ``rows`` (2,000 to 5,000) configurations of the full grid, each
    measured 1 to 10 times. Returns the knobs (name, levels, log), the sample's level values and its repeats'
    objectives (a time: lower is better). ``response="bottleneck"``: the time is set by the slowest of 2 to 4
    resources, each loaded by its own knobs (a soft maximum of their sums), so a knob matters only while its
    resource is the bottleneck and the response is flat along most moves; its noise scale is drawn (3% to 15%).
    ``noise`` makes the noise as large for the fastest configurations as for the slowest: each configuration's
    CV is 2% + ``noise`` x U(0, 1), the regime where a lucky repeat passes for a better configuration. Last, the
    truth the repeats were drawn around: each configuration's noiseless objective."""
    rng = np.random.default_rng([seed, 2])
    noise_scale = noise
    k = int(knobs or rng.integers(6, 13))
    n = int(rows or rng.integers(2000, 5001))
    specs = []
    for i in range(k):
        levels = int(np.exp(rng.uniform(np.log(5), np.log(5000))))
        log = bool(rng.random() < 0.6)  # sizes and counts: the kernel's own scale is a power of two
        if log:
            low = float(2 ** rng.integers(0, 6))
            grid = np.unique(np.round(np.geomspace(low, low * 2 ** rng.uniform(6, 16), levels)))
        else:
            low = float(rng.integers(0, 10))
            grid = np.unique(np.round(np.linspace(low, low + levels * rng.choice([1, 2, 5, 10]), levels)))
        specs.append({"name": f"k{i}", "values": grid, "log": log})
    influential = rng.random(k) < 0.6
    influential[rng.integers(k)] = True  # at least one knob matters
    # each knob's effect on the log objective, a function of its position u in [0, 1] on its own scale:
    # a bowl with a random optimum (a buffer too small or too large), or a monotone trend with saturation
    effects = []
    for i in range(k):
        size = rng.laplace(0.0, 0.4) if influential[i] else rng.laplace(0.0, 0.004)
        if rng.random() < 0.5:
            centre = rng.uniform(0.1, 0.9)
            effects.append(lambda u, c=centre, s=size: abs(s) * 4 * (u - c) ** 2)
        else:
            rate = rng.uniform(2, 10)
            effects.append(lambda u, r=rate, s=size: s * (1 - np.exp(-r * u)))
    pairs = [tuple(rng.choice(k, size=2, replace=False)) for _ in range(int(rng.integers(1, 4)))]
    pair_size = [rng.laplace(0.0, 0.4) for _ in pairs]
    cliffs = [(int(rng.integers(k)), rng.uniform(0.5, 0.95), rng.uniform(np.log(3), np.log(20)))
              for _ in range(int(rng.integers(1, 3)))]
    # the sample: each knob's level drawn uniformly, as a study's design draws it
    picks = np.column_stack([rng.integers(len(s["values"]), size=n) for s in specs])
    picks = np.unique(picks, axis=0)
    u = np.column_stack([picks[:, i] / (len(specs[i]["values"]) - 1) for i in range(k)])
    log_y = sum(effects[i](u[:, i]) for i in range(k))
    for (i, j), s in zip(pairs, pair_size):
        log_y = log_y + s * (u[:, i] - 0.5) * (u[:, j] - 0.5) * 4
    for i, edge, jump in cliffs:
        log_y = log_y + np.where(u[:, i] > edge, jump, 0.0)
    noise = 0.08
    if response == "bottleneck":  # its own stream: the smooth tables of a seed stay what they were
        extra = np.random.default_rng([seed, 3])
        resources = int(extra.integers(2, 5))
        owner = extra.integers(resources, size=k)  # the resource each knob loads
        parts = np.tile(extra.uniform(0.0, 0.5, resources), (len(u), 1))
        for i in range(k):
            parts[:, owner[i]] += effects[i](u[:, i])
        for (i, j), size in zip(pairs, pair_size):
            parts[:, owner[i]] += size * (u[:, i] - 0.5) * (u[:, j] - 0.5) * 4
        for i, edge, jump in cliffs:
            parts[:, owner[i]] += np.where(u[:, i] > edge, jump, 0.0)
        sharp = 8.0  # a soft maximum: the slowest resource sets the time, the next ones a little
        log_y = np.log(np.exp(sharp * (parts - parts.max(axis=1, keepdims=True))).sum(axis=1)) / sharp + parts.max(axis=1)
        noise = float(extra.uniform(0.03, 0.15))
    elif response != "smooth":
        raise ValueError(f"response {response!r}: choose smooth or bottleneck")
    mean = 100.0 * np.exp(log_y - log_y.min())
    slower = (mean / mean.max()) ** 0.5 if noise_scale is None else 1.0  # by default the slow ones are noisier
    cv = 0.02 + (noise if noise_scale is None else noise_scale) * rng.random(len(mean)) * slower
    repeats = rng.integers(1, 11, size=len(mean))
    values = np.column_stack([specs[i]["values"][picks[:, i]] for i in range(k)])
    runs = [mean[r] * np.exp(rng.normal(0.0, cv[r], size=repeats[r])) for r in range(len(mean))]
    return specs, values, runs, mean


def true_ranks(path: Path, truth: np.ndarray) -> tuple[float, list[int]]:
    """The near-optimal threshold ``bench/compare_algorithms.py`` sets on the written table, and the rank in the
    noiseless truth (0: the best) of each configuration its means put within it, best mean first: where the
    repeats' noise is larger than the spread among the best, the set is lucky repeats, not good configurations."""
    from storetune.runners import make_runner
    from storetune.tuner.analysis.convergence import near_optimal_share

    means = make_runner("dataset", {"dataset": [str(path)]}).table.means("Performance")
    within, chosen = near_optimal_share(means, "min")
    order = {c: i for i, c in enumerate(means)}  # the table's configurations, in the order they were written
    rank = np.empty(len(truth), int)
    rank[np.argsort(truth, kind="stable")] = np.arange(len(truth))
    return within, [int(rank[order[c]]) for c in sorted(chosen, key=means.__getitem__)]


def write_numeric(path: Path, specs: list[dict], values: np.ndarray, runs: list[np.ndarray]) -> None:
    """One row per run (rows with the same configuration are its repeats), in the MOOT format."""
    header = ",".join(s["name"] for s in specs) + ",Performance-"
    lines = []
    for x, measured in zip(values, runs):
        knobs = ",".join(f"{int(v)}" if float(v).is_integer() else f"{v:g}" for v in x)
        lines += [f"{knobs},{v:.4f}" for v in measured]
    path.write_text(header + "\n" + "\n".join(lines) + "\n")


def ordinal_effect(rng: np.random.Generator, levels: int, shape: str, scale: float) -> np.ndarray:
    """The effect on the log objective of each of an ordinal's values, in order."""
    t = np.arange(levels) / (levels - 1)
    if shape == "smooth":  # a quadratic of the position: mostly monotone, sometimes a broad valley
        return rng.laplace(0.0, scale) * t + rng.laplace(0.0, scale / 2) * t**2
    if shape != "cliff":
        raise ValueError(f"--shape {shape!r}: choose smooth or cliff")
    if levels < 3:
        raise ValueError(f"--shape cliff needs --levels 3 or more (a good value short of the last), not {levels}")
    edge = int(rng.integers(1, levels - 1))  # the last good value: improving up to it, far worse past it
    slope = abs(rng.laplace(0.0, scale)) / edge
    return np.where(np.arange(levels) <= edge, -slope * np.arange(levels),
                    -slope * edge + rng.uniform(np.log(3), np.log(20)) + slope * (np.arange(levels) - edge))


def write(path: Path, X: np.ndarray, y: np.ndarray, options: int | None = None) -> None:
    options = X.shape[1] if options is None else options
    names = [f"o{i}" for i in range(options)] + [f"d{k}" for k in range(X.shape[1] - options)]
    header = ",".join(names) + ",Performance-"
    rows = [",".join(map(str, x)) + f",{v:.4f}" for x, v in zip(X, y)]
    path.write_text(header + "\n" + "\n".join(rows) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/synthetic"))
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--options", type=int, default=12)
    parser.add_argument("--interactions", type=int, default=3)
    parser.add_argument("--ordinals", type=int, default=0, help="ordinal options beside the binary ones")
    parser.add_argument("--levels", type=int, default=6, help="values of each ordinal option")
    parser.add_argument("--shape", choices=("smooth", "cliff"), default="smooth", help="how the ordinals act")
    parser.add_argument("--structure", choices=("pairs", "random"), default="pairs",
                        help="the binary options' interactions: --interactions pairs, or drawn at random (table)")
    parser.add_argument("--sample", default="", help="NAME:SHARE,...: rows sampled from ../shared's MOOT tables")
    parser.add_argument("--numeric", action="store_true",
                        help="sampled tables of 6 to 12 many-valued numeric knobs instead (numeric_table)")
    parser.add_argument("--noise", type=float, default=None,
                        help="of a --numeric table: each configuration's CV is 2%% + NOISE x U(0, 1), fast or slow (default: "
                             "up to 10%% for the slowest, less for the faster)")
    parser.add_argument("--response", choices=("smooth", "bottleneck"), default="smooth",
                        help="of a --numeric table: a smooth sum of effects, or the slowest of a few resources")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.numeric:
        for seed in range(args.first_seed, args.first_seed + args.tables):
            specs, values, runs, truth = numeric_table(seed, response=args.response, noise=args.noise)
            tag = ("" if args.response == "smooth" else f"-{args.response}") + ("" if args.noise is None else f"-noise{args.noise:g}")
            path = args.out / f"numeric-{seed}{tag}.csv"
            write_numeric(path, specs, values, runs)
            # the noiseless objective of each configuration, one row each, for compare_algorithms.py --truth
            (args.out / "truth").mkdir(exist_ok=True)
            write_numeric(args.out / "truth" / path.name, specs, values, [np.array([m]) for m in truth])
            means = np.array([r.mean() for r in runs])
            near = int(np.sum(means <= means.min() / 0.9))
            grid = int(np.prod([len(s["values"]) for s in specs], dtype=float))
            print(f"{path}: {len(specs)} knobs of {', '.join(str(len(s['values'])) for s in specs)} levels, "
                  f"{len(runs)} configurations of {grid:.3g} ({sum(map(len, runs))} runs), {near} within 10% of "
                  f"the best, spread {means.max() / means.min():.1f}x")
            within, ranks = true_ranks(path, truth)
            print(f"  near-optimal in the benchmark (within {within:g} of the best mean): noiseless ranks "
                  f"{', '.join(map(str, ranks))} of {len(truth)}")
        return
    if args.sample:
        sample(args.sample, args.out, args.first_seed)
        return
    for seed in range(args.first_seed, args.first_seed + args.tables):
        X, y = table(seed, args.options, args.interactions, ordinals=args.ordinals, levels=args.levels,
                     shape=args.shape, structure=args.structure)
        tag = (f"-{args.shape}" if args.ordinals else "") + ("-random" if args.structure == "random" else "")
        path = args.out / f"synthetic-{seed}{tag}.csv"
        write(path, X, y, args.options)
        near = int(np.sum(y <= y.min() / 0.99))
        # how additive the table is: the share of the log objective's variance a least-squares fit of the options'
        # main effects explains (where it is low, TPE was ahead of auto on twenty random-structure tables)
        design = np.column_stack([np.ones(len(X)), X])
        fitted = design @ np.linalg.lstsq(design, np.log(y), rcond=None)[0]
        additive = 1 - np.var(np.log(y) - fitted) / np.var(np.log(y))
        print(f"{path}: {len(y)} configurations, {near} within 1% of the best, spread {y.max() / y.min():.1f}x, "
              f"main effects explain {additive:.2f} of the log objective's variance")


def sample(spec: str, out: Path, seed: int) -> None:
    import pandas as pd

    moot = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "moot_configs"
    for item in filter(None, spec.split(",")):
        name, _, share = item.partition(":")
        frame = pd.read_csv(moot / f"{name}.csv")
        rows = frame.sample(max(2, round(len(frame) * float(share or 0.1))), random_state=seed)
        path = out / f"{name}-{len(rows)}.csv"
        rows.to_csv(path, index=False)
        print(f"{path}: {len(rows)} of {len(frame)} rows of {name}")


if __name__ == "__main__":
    main()
