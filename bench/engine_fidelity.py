"""Benchmark: does fio (StoreTune's default engine) rank storage configurations as real Filebench does?

    sudo .venv/bin/python bench/engine_fidelity.py --configs 12 --workloads varmail,fileserver,webserver,oltp

Needs the real `filebench` on PATH (no package registry has it; build 1.5-alpha3 from source). The same
storage_v2 configurations are measured with both engines, interleaved (fio, Filebench, fio, Filebench:
host drift hits both alike), --repeats times per engine in each of --passes passes. Printed per
workload, for each engine against the other (the peer is Filebench):
- Spearman's rho and Kendall's tau between the engines' rankings (means over every pass), with n;
- whether the best configuration is the same, and how many of the top 3 are shared;
- each engine's repeat noise (median CV over configurations, within a pass);
- each engine's agreement with itself, pass against pass (Spearman): the ceiling any cross-engine
  figure can reach;
- each engine's share of variance between configurations (the intraclass correlation ICC(1) of a one-way
  analysis of variance over every run): near 1, the configurations differ far beyond the noise and a
  ranking means something; near 0, they differ by less than the noise and no engine can rank them.
Targets (issue 16): self-agreement >= 0.9 for each engine; fio against Filebench >= 0.9 with the same
best configuration. Raw measurements go to --out as JSON; --from prints the figures of a saved run again.

    .venv/bin/python bench/engine_fidelity.py --datasets datasets/loop-storage-v3 datasets/loop-storage-v2-filebench \
        --plot docs/results/img/engine-fidelity.svg

compares two committed sweeps instead (fio's, then Filebench's; no root, no Filebench): the configurations
both measured, each repeat of a sweep standing for a pass (a sweep runs a configuration's repeats back to
back, and the two sweeps ran hours apart, not interleaved), and the sweeps' settings that differ, said.
With --plot, each workload's configurations are drawn as fio's mean against Filebench's, with rho.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.figures import COLOURS, Conditions, grid, legend, save  # noqa: E402
from storetune.runners import Status, make_runner  # noqa: E402
from storetune.runners.device.personalities import job_version  # noqa: E402
from storetune.runners.tables import load_table  # noqa: E402
from storetune.runners.device.personalities import MIB, device_bytes_needed, personality  # noqa: E402
from storetune.search_spaces import load_space  # noqa: E402
from storetune.tuner.algorithms.grid import GridSearch  # noqa: E402
from storetune.tuner.search.sweep import recorded_settings  # noqa: E402

ENGINES = ("fio", "filebench")


def configurations(n: int, seed: int) -> list:
    """At least n storage_v2 configurations from the sweep's grid (every file system x I/O scheduler pair
    before any twice), dealt round-robin over the file systems: the grid lists a file system's pairs
    together, so its first six were all ext2 and ext3, whose differences are mostly inside the noise."""
    space = load_space("storage_v2")
    per = math.ceil(n / (len(space["fs"].domain()) * len(space["io_scheduler"].domain())))
    grid = GridSearch(space, seed=seed, direction="max", params={"per_stratum": max(1, per)}).grid
    by_fs: dict = {}
    for config in grid:
        by_fs.setdefault(config["fs"], []).append(config)
    return [c for group in itertools.zip_longest(*by_fs.values()) for c in group if c is not None]


def loop_size_mib(workload: str, fileset_mib: int, runtime_s: float) -> int:
    """One device size for both engines: the larger need, at least 1 GiB, in whole 256 MiB."""
    need = max(device_bytes_needed(personality(workload, fileset_mib * MIB), e, runtime_s) for e in ENGINES)
    return max(1024, -(-need // (256 * MIB)) * 256)


def measure(workload: str, args: argparse.Namespace, engines: tuple[str, ...] = ENGINES,
            given: list | None = None) -> dict:
    """Both engines (or ``engines``) on --configs configurations, or on the ``given`` ones."""
    size = loop_size_mib(workload, args.fileset_mib, args.runtime)
    runners = {e: make_runner("device", workload=workload, engine=e, runtime_s=args.runtime, loop_dir=args.loop_dir,
                              loop_size_mib=size, fileset_mib=args.fileset_mib) for e in engines}
    space = runners[engines[0]].space
    pool = [space.validate(c) for c in given] if given else configurations(args.configs * 2, args.seed)  # + spares
    wanted = len(pool) if given else args.configs
    chosen: list = []
    values: dict[str, list[list[list[float]]]] = {e: [] for e in engines}  # engine -> config -> pass -> repeats

    def run(config, p: int) -> tuple[dict[str, list[float]], str | None]:
        row: dict[str, list[float]] = {e: [] for e in engines}
        for r in range(args.repeats):
            for e in engines:  # interleaved: A B A B
                m = runners[e].run(config, runners[e].workload, seed=1000 * p + r)
                if m.status is not Status.SUCCEEDED:
                    return row, f"{e}: {m.status.value} {m.reason}"
                row[e].append(m.metrics["ops_per_s"])
        return row, None

    try:
        for p in range(args.passes):
            for config in (pool if p == 0 else list(chosen)):
                if p == 0 and len(chosen) >= wanted:
                    break
                row, failed = run(config, p)
                if failed and p == 0:
                    print(f"  {workload}: dropped {dict(config)} ({failed[:160]})", flush=True)
                    continue
                if failed:  # intermittent (Filebench's fileserver on xfs, README): said, and left out of every figure
                    print(f"  {workload}: dropped {dict(config)}, which failed in pass {p + 1} ({failed[:300]})",
                          flush=True)
                    i = chosen.index(config)
                    del chosen[i]
                    for e in engines:
                        del values[e][i]
                    continue
                if p == 0:
                    chosen.append(config)
                    for e in engines:
                        values[e].append([])
                i = chosen.index(config)
                for e in engines:
                    values[e][i].append(row[e])
                print(f"  {workload} pass {p + 1} config {pool.index(config) + 1}: "  # numbered as drawn
                      + ", ".join(f"{e} {np.mean(row[e]):.0f}" for e in engines), flush=True)
    finally:
        for runner in runners.values():
            runner.close()
    return {"loop_size_mib": size, "configs": [dict(c) for c in chosen],
            "ops_per_s": values}


def against(workload: str, args: argparse.Namespace, earlier: dict) -> dict:
    """fio alone on an earlier run's configurations of ``workload``, beside that run's Filebench measurements."""
    if workload not in earlier:
        sys.exit(f"--against: {args.against} has no {workload} (it has {', '.join(earlier)})")
    old = earlier[workload]
    data = measure(workload, args, engines=("fio",), given=old["configs"])
    kept = [old["configs"].index(c) for c in data["configs"]]  # a configuration fio now fails is left out
    data["ops_per_s"]["filebench"] = [old["ops_per_s"]["filebench"][i] for i in kept]
    return data


def from_datasets(fio_dir: Path, filebench_dir: Path, workloads: list[str]) -> dict:
    """Two sweeps' measurements of the configurations both hold, as a run of this benchmark: repeat i of
    a sweep is pass i (a pass of one run), the first as many repeats as both sweeps have for every one;
    each configuration's mean, which ranks it, is over all its successful repeats."""
    recorded = {e: recorded_settings(json.loads((d / "manifest.json").read_text()))
                for e, d in zip(ENGINES, (fio_dir, filebench_dir))}
    engines = {e: m.get("engine") for e, m in recorded.items()}
    if engines != {e: e for e in ENGINES}:
        sys.exit(f"--datasets wants a fio sweep, then a Filebench sweep; these were measured with {engines}")
    for e, m in recorded.items():
        for w, version in m["jobs"].items():
            if w in workloads and version != job_version(e, w):
                print(f"  note: {e}'s sweep ran version {version} of its {w} job file; this StoreTune's is version "
                      f"{job_version(e, w)} (JOB_VERSIONS in runners/device/personalities.py says what changed)")
    own = ("engine", "jobs", "workloads", "per_stratum", "repeats")  # a sweep's own, not the conditions
    settings = {e: {k: v for k, v in m.items() if k not in own} for e, m in recorded.items()}
    for key in sorted(set(settings["fio"]) | set(settings["filebench"])):
        if settings["fio"].get(key) != settings["filebench"].get(key):
            print(f"  note: the sweeps differ in {key}: fio {settings['fio'].get(key)}, "
                  f"Filebench {settings['filebench'].get(key)}")
    both = [w for w in workloads if all(w in m["workloads"] for m in recorded.values())]
    if len(both) < len(workloads):
        print(f"  note: only {', '.join(both) or 'no workload'} of {', '.join(workloads)} measured by both sweeps")
    raw = {}
    for workload in both:
        tables = {e: load_table(d, context={"workload": workload}) for e, d in zip(ENGINES, (fio_dir, filebench_dir))}
        runs = {e: {c: r[:, list(t.metrics).index("ops_per_s")] for c, r in t.repeats.items()}
                for e, t in tables.items()}
        runs = {e: {c: r[np.isfinite(r)] for c, r in rs.items()} for e, rs in runs.items()}
        common = [c for c in runs["fio"] if c in runs["filebench"]]
        twice = [c for c in common if all(len(runs[e][c]) >= 2 for e in ENGINES)]  # a failed repeat: left out
        if len(twice) < len(common):
            print(f"  note: {workload}: {len(common) - len(twice)} of the {len(common)} configurations both sweeps "
                  "measured have fewer than two successful repeats in one of them; left out")
        common = twice
        k = min((len(runs[e][c]) for e in ENGINES for c in common), default=0)
        raw[workload] = {"configs": [dict(c) for c in common], "passes_are_repeats": True,
                         "ops_per_s": {e: [[[float(x)] for x in runs[e][c][:k]] for c in common] for e in ENGINES},
                         # ranks and the best from every successful repeat a sweep has; noise and self-agreement
                         # from the first k, as many as both have
                         "means": {e: [float(np.mean(runs[e][c])) for c in common] for e in ENGINES}}
    return raw


def summarise(workload: str, data: dict) -> dict:
    n = len(data["configs"])
    if n < 3:
        return {"workload": workload, "n": n, "too_few": True}
    ops = {e: np.array(data["ops_per_s"][e], dtype=float) for e in ENGINES}  # (config, pass, repeat)
    means = {e: np.array(data["means"][e]) if "means" in data else ops[e].mean(axis=(1, 2)) for e in ENGINES}
    rho = stats.spearmanr(means["fio"], means["filebench"]).statistic
    tau = stats.kendalltau(means["fio"], means["filebench"]).statistic
    top = {e: list(np.argsort(-means[e])[:3]) for e in ENGINES}
    # within a pass; for two sweeps (from_datasets), across a configuration's repeats, which ran back to back
    within = {e: ops[e].transpose(0, 2, 1) if data.get("passes_are_repeats") else ops[e] for e in ENGINES}
    noise = {e: float(np.median(w.std(axis=2, ddof=1) / w.mean(axis=2))) if w.shape[2] > 1 else float("nan")
             for e, w in within.items()}
    self_rho = {e: (stats.spearmanr(ops[e][:, 0].mean(axis=1), ops[e][:, 1].mean(axis=1)).statistic
                    if ops[e].shape[1] > 1 else float("nan")) for e in ENGINES}
    return {"workload": workload, "n": n, "spearman": float(rho), "kendall": float(tau), "icc": icc(ops),
            "same_best": bool(top["fio"][0] == top["filebench"][0]),
            "top3_shared": len(set(top["fio"]) & set(top["filebench"])), "repeat_cv": noise,
            "self_spearman": {e: float(v) for e, v in self_rho.items()},
            "ops_ratio_fio_over_filebench": float(statistics.median(means["fio"] / means["filebench"]))}


def icc(ops: dict[str, np.ndarray]) -> dict[str, float]:
    """Per engine, ICC(1): the share of the runs' variance that lies between configurations, from the one-way
    ANOVA mean squares (every pass and repeat of a configuration is one group). Hand-written: five lines
    of arithmetic that no library here computes for a one-way design without reshaping into a frame."""
    out = {}
    for e, a in ops.items():
        runs = a.reshape(a.shape[0], -1)
        k, n = runs.shape[1], runs.shape[0]
        if n < 2 or k < 2:  # one run per configuration: no noise to compare with
            out[e] = float("nan")
            continue
        msb = k * runs.mean(axis=1).var(ddof=1)
        msw = runs.var(axis=1, ddof=1).mean()
        out[e] = float((msb - msw) / (msb + (k - 1) * msw))
    return out


def report(results: list[dict]) -> None:
    print(f"{'workload':<11}{'n':>3}{'rho':>7}{'tau':>7}{'best':>6}{'top3':>6}{'CV fio':>8}{'CV fb':>7}"
          f"{'self fio':>10}{'self fb':>9}{'ICC fio':>9}{'ICC fb':>8}{'fio/fb ops':>12}")
    for r in results:
        if r.get("too_few"):
            print(f"{r['workload']:<11}{r['n']:>3}  too few configurations measured to rank")
            continue
        print(f"{r['workload']:<11}{r['n']:>3}{r['spearman']:>7.2f}{r['kendall']:>7.2f}"
              f"{'same' if r['same_best'] else 'diff':>6}{r['top3_shared']:>4}/3{100 * r['repeat_cv']['fio']:>7.1f}%"
              f"{100 * r['repeat_cv']['filebench']:>6.1f}%{r['self_spearman']['fio']:>10.2f}"
              f"{r['self_spearman']['filebench']:>9.2f}{r['icc']['fio']:>9.2f}{r['icc']['filebench']:>8.2f}"
              f"{r['ops_ratio_fio_over_filebench']:>12.2f}")
    print("targets: self >= 0.90 for each engine; rho >= 0.90 with the same best configuration; "
          "ICC: the share of variance between configurations (near 0: they differ by less than the noise)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=12)
    parser.add_argument("--workloads", default="varmail,fileserver,webserver,oltp")
    parser.add_argument("--runtime", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--fileset-mib", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loop-dir", default="/var/tmp/storetune-fidelity")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "engine_fidelity.json")
    parser.add_argument("--from", dest="saved", type=Path, help="print the figures of a saved --out again")
    parser.add_argument("--datasets", type=Path, nargs=2, metavar=("FIO_SWEEP", "FILEBENCH_SWEEP"),
                        help="compare two sweeps' committed measurements (storetune sweep --engine fio, "
                        "then --engine filebench)")
    parser.add_argument("--plot", type=Path, metavar="SVG", help="draw fio's mean against Filebench's per workload here")
    parser.add_argument("--against", type=Path, help="measure fio alone on a saved --out's configurations and "
                        "compare it with that run's Filebench measurements (to try a change to a fio job file)")
    args = parser.parse_args()
    conditions = Conditions()  # before the run loads the machine
    if args.saved:
        saved = json.loads(args.saved.read_text())
        raw = saved["raw"]
        results = [summarise(w, data) for w, data in raw.items()]
        report(results)
        if args.plot:
            plot(raw, results, args.plot, Conditions.of(saved["conditions"]) if "conditions" in saved else
                 Conditions(recorded=f"measured by the run saved in {args.saved.name}"))
        return
    if args.datasets:
        raw = from_datasets(*args.datasets, [w.strip() for w in args.workloads.split(",") if w.strip()])
        print(f"# {args.datasets[0]} (fio) against {args.datasets[1]} (Filebench): each repeat is a pass; "
              "the sweeps were not interleaved")
        results = [summarise(w, data) for w, data in raw.items()]
        report(results)
        if args.plot:
            plot(raw, results, args.plot, Conditions(recorded=measured_by(args.datasets)))
        return
    if os.geteuid() != 0:
        sys.exit("bench/engine_fidelity.py needs root (loop devices, mkfs, mount)")
    if shutil.which("filebench") is None:
        sys.exit("filebench is not on PATH: build Filebench 1.5-alpha3 from source (no package registry has it)")
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    started = time.time()
    print(f"# {args.configs} storage_v2 configurations x {len(workloads)} workloads, {args.runtime:g} s runs, "
          f"{args.repeats} repeats per engine x {args.passes} passes, interleaved; "
          f"load before: {os.getloadavg()[0]:.2f}")
    results, raw = [], {}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    earlier = json.loads(args.against.read_text())["raw"] if args.against else {}
    for workload in workloads:  # saved after each workload: an interrupted run keeps the workloads it finished
        if args.against:
            raw[workload] = against(workload, args, earlier)
        else:
            raw[workload] = measure(workload, args)
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "raw": raw,
                                        "conditions": conditions.as_dict()}, indent=1, default=str) + "\n")
        results.append(summarise(workload, raw[workload]))
    print(f"\n== fio against Filebench (the peer), {(time.time() - started) / 60:.0f} min")
    report(results)
    print(f"raw measurements: {args.out}")
    if args.plot:
        plot(raw, results, args.plot, conditions)


def measured_by(sweeps: list[Path]) -> str:
    """Where two sweeps were measured, from their manifests (which keep when)."""
    parts = []
    for engine, d in zip(ENGINES, sweeps):
        m = json.loads((d / "manifest.json").read_text())
        w = m.get("where", {})
        parts.append(f"{engine}: {d.name}")
    return (f"{'; '.join(parts)}; host {w.get('host', '?')} ({w.get('cpu', '?')}, {w.get('machine', '?')}, Linux "
            f"{w.get('kernel', '?')}), {w.get('device', '?')} device on {w.get('loop_backing_fs', '?').split()[0]} "
            "(the load of each run: in the manifests)")


def plot(raw: dict, results: list[dict], path: Path, conditions: Conditions) -> Path:
    """One panel per workload: each configuration's mean ops/s under fio against under Filebench (log axes), the
    best of each engine ringed, Spearman's rho in the title. A straight rising cloud is a ranking kept."""
    drawn = [r for r in results if not r.get("too_few")]
    fig, axes = grid(len(drawn), columns=4, size=(2.9, 2.7))
    for ax, r in zip(axes, drawn):
        data = raw[r["workload"]]
        means = {e: (np.array(data["means"][e]) if "means" in data
                     else np.array(data["ops_per_s"][e], dtype=float).mean(axis=(1, 2))) for e in ENGINES}
        fs = [c.get("fs", "?") for c in data["configs"]]
        for name in sorted(set(fs)):
            pick = [i for i, f in enumerate(fs) if f == name]
            ax.scatter(means["filebench"][pick], means["fio"][pick], s=14, label=name)
        for e, marker in (("fio", "s"), ("filebench", "D")):
            best = int(np.argmax(means[e]))
            ax.scatter(means["filebench"][best], means["fio"][best], s=90, facecolors="none",
                       edgecolors=COLOURS[e], marker=marker, lw=1.4, label=f"{e}'s best")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{r['workload']}: n={r['n']}, rho={r['spearman']:.2f}, best "
                     f"{'same' if r['same_best'] else 'different'}", fontsize=8)
        ax.set_xlabel("Filebench ops/s")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("fio ops/s")
    legend(fig, axes[0])
    return save(fig, path, "fio against real Filebench on the same storage_v2 configurations", conditions)


if __name__ == "__main__":
    main()
