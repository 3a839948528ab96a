"""Benchmark: the speed-up of measuring in parallel, on the process pool and on Ray, and the offline
comparison on both.

    .venv/bin/python bench/parallel_speedup.py [--evaluations 12] [--seconds 1] [--workers 2]
                                               [--seeds 100] [--budget 200] [--algorithms random,sa,ga,bo,dqn]

1. Speed-up. A runner whose evaluation takes a fixed time (the command runner on `sleep 1`, so a
   real process per evaluation, as a user's benchmark is) measures --evaluations configurations:
   serially (LocalExecutor, the peer), then with --workers tasks in flight on the process pool
   (ProcessExecutor) and on an embedded Ray (RayExecutor). Each executor is started and warmed up
   with one batch before the clock runs, so the figure is scheduling, not start-up (start-up is
   printed apart). Prints each speed-up against serial (target: >= 1.8x with 2 workers on 2 cores)
   and the scheduling overhead per task: (wall - evaluations x seconds / workers) / evaluations.
2. The offline comparison (`storetune compare`'s engine, tuner/compare.py) of --algorithms x --seeds
   x --budget on BDBC (../shared/datasets/moot_configs/BDBC.csv), with the process pool and with Ray,
   each with --workers workers: the wall time of each and Ray's as a ratio to the pool's.

Run it alone: the machine's load average is printed first, and figures taken beside other work are
not results.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storetune.runners import make_runner  # noqa: E402
from storetune.tuner.execution.jobs import Job
from storetune.tuner.execution.local import LocalExecutor, ProcessExecutor  # noqa: E402

BDBC = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "moot_configs" / "BDBC.csv"
TARGET = 1.8


def jobs(runner: Any, n: int, offset: int) -> list[Job]:
    import numpy as np

    rng = np.random.default_rng(offset)
    return [Job(offset + i, runner.space.sample(rng), (offset + i,)) for i in range(n)]


def timed(executor: Any, runner: Any, batch: list[Job]) -> tuple[float, int]:
    started = time.perf_counter()
    done = sum(1 for _ in executor.run(runner, runner.workload, batch))
    return time.perf_counter() - started, done


def speedup(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from storetune.tuner.execution.ray import RayExecutor

    script = work / "sleep.sh"
    script.write_text(f'#!/bin/sh\nsleep {args.seconds}\necho \'{{"ops": 1}}\'\n')
    script.chmod(0o755)
    runner = make_runner("command", command=str(script), space="storage_v1", timeout_s=60)
    out: dict[str, Any] = {}
    serial, done = timed(LocalExecutor(), runner, jobs(runner, args.evaluations, 0))
    assert done == args.evaluations
    out["serial_s"] = serial
    print(f"serial (LocalExecutor, the peer): {args.evaluations} evaluations of {args.seconds:g} s in {serial:.2f} s",
          flush=True)
    for name, make in (("process pool", lambda: ProcessExecutor(args.workers)),
                       ("ray (embedded)", lambda: RayExecutor(args.workers))):
        executor = make()
        try:
            started = time.perf_counter()
            timed(executor, runner, jobs(runner, args.workers, 10_000))  # start and warm up the workers
            start_s = time.perf_counter() - started - args.seconds
            wall, done = timed(executor, runner, jobs(runner, args.evaluations, 20_000))
        finally:
            executor.close()
        assert done == args.evaluations
        ideal = args.evaluations * args.seconds / args.workers
        row = {"wall_s": wall, "speedup": serial / wall, "overhead_ms_per_task": (wall - ideal) / args.evaluations * 1e3,
               "start_s": start_s}
        out[name] = row
        print(f"{name:>16}: {wall:.2f} s, speed-up {row['speedup']:.2f}x over serial with {args.workers} workers "
              f"(target >= {TARGET}x: {'met' if row['speedup'] >= TARGET else 'NOT met'}), scheduling overhead "
              f"{row['overhead_ms_per_task']:.0f} ms per task; start-up {start_s:.1f} s (not in the figure)",
              flush=True)
    return out


def comparison(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from storetune.api.cli.common import table_settings
    from storetune.tuner.search.compare import CompareSpec, Comparison, Variant
    from storetune.tuner.history.store import History
    from storetune.tuner.execution.ray import RayExecutor

    if not BDBC.exists():
        print(f"skipping the comparison: no {BDBC} (clone the shared data beside this repository)")
        return {}
    out: dict[str, Any] = {}
    for name, make in (("process pool", lambda: ProcessExecutor(args.workers)),
                       ("ray (embedded)", lambda: RayExecutor(args.workers))):
        history = History(f"sqlite:///{work / (name.split()[0] + '.sqlite')}")
        spec = CompareSpec(runner_settings=table_settings([BDBC], [], None),
                           variants=tuple(Variant.parse_list(args.algorithms)), seeds=args.seeds, budget=args.budget)
        compare = Comparison.create(history, spec)
        executor = make()
        started = time.perf_counter()
        compare.run(executor)  # closes the executor
        out[name] = time.perf_counter() - started
        print(f"comparison ({args.algorithms} x {args.seeds} seeds x {args.budget} evaluations on BDBC), {name} "
              f"with {args.workers} workers: {out[name]:.1f} s (start-up included)", flush=True)
    out["ray_over_pool"] = out["ray (embedded)"] / out["process pool"]
    print(f"Ray / process pool, wall time of the comparison: {out['ray_over_pool']:.2f}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evaluations", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--algorithms", default="random,sa,ga,bo,dqn")
    parser.add_argument("--skip-comparison", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    print(f"machine load: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1/5/15 min) on {os.cpu_count()} cores",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="storetune-speedup-") as tmp:
        report = {"speedup": speedup(args, Path(tmp))}
        if not args.skip_comparison:
            report["comparison"] = comparison(args, Path(tmp))
    if args.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
