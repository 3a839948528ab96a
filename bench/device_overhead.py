"""Benchmark: the device runner's cost and noise on loop devices, against fio alone.

    sudo .venv/bin/python bench/device_overhead.py [--runtime 10] [--repeats 5]

Prints three things, each against a peer measured in the same run:
1. per file system, the fixed cost of an evaluation (mkfs + mount + queue settings + unmount and
   restore), and the whole evaluation's wall time divided by fio's own wall time for the same job on
   an already-built file system (the peer). Target: fixed cost <= 3 s.
2. per workload, the coefficient of variation (CV) of ops/s over --repeats evaluations at --runtime s,
   next to the CV of fio alone repeating the job on one file system. Target: CV <= 5% for at least
   one workload at a 10 s run.
3. the trace replayer's mean and p99 latency for 4 KiB random reads against fio's (io_uring, O_DIRECT)
   on the same loop device, at queue depths 1, 8 and 32, fio and the replayer alternating --rounds times
   (medians compared), with fio's own p99 spread over its rounds. Target: both within 10%.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from storetune.runners import make_runner  # noqa: E402
from storetune.runners.device.engines import run_fio  # noqa: E402
from storetune.runners.device.replay import replay  # noqa: E402
from storetune.runners.device.shell import Shell  # noqa: E402
from storetune.runners.device.state import SetupLog  # noqa: E402
from storetune.runners.device.target import close_loop, open_loop  # noqa: E402
from storetune.runners.traces import Trace  # noqa: E402

FILE_SYSTEMS = ("ext2", "ext3", "ext4", "xfs", "btrfs")
WORKLOADS = ("fileserver", "varmail", "webserver", "oltp")


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else float("nan")


def fixed_costs(args: argparse.Namespace, loop_dir: str) -> None:
    print("\n== fixed cost per evaluation (varmail, 2 s runs), against fio alone")
    print(f"{'file system':<12}{'mkfs s':>8}{'mount s':>9}{'teardown s':>12}{'fixed s':>9}{'eval/fio-alone':>16}")
    for fs in FILE_SYSTEMS:
        runner = make_runner("device", workload="varmail", runtime_s=2, loop_dir=loop_dir, fileset_mib=64)
        config = runner.space.validate({"fs": fs, "io_scheduler": "mq-deadline"}, fill_defaults=True)
        rows = []
        for seed in range(3):
            started = time.monotonic()
            m = runner.run(config, runner.workload, seed=seed)
            rows.append((m.env["timings_s"], time.monotonic() - started))
        alone = fio_alone(runner, config, repeats=3)
        runner.close()
        t = {k: float(np.mean([r[0][k] for r in rows])) for k in ("mkfs", "mount", "teardown")}
        fixed = t["mkfs"] + t["mount"] + t["teardown"]
        ratio = np.mean([r[1] for r in rows]) / np.mean(alone["wall"])
        print(f"{fs:<12}{t['mkfs']:>8.2f}{t['mount']:>9.2f}{t['teardown']:>12.2f}{fixed:>9.2f}{ratio:>16.2f}")


def fio_alone(runner, config, repeats: int) -> dict[str, list[float]]:
    """The peer: the same fio job repeated on one file system built once, nothing else."""
    from storetune.runners.device.filesystems import build

    shell, target = runner.shell, runner.target()
    plan = build(config)
    mnt = Path(tempfile.mkdtemp(dir=runner.loop_dir))
    shell.run(plan.mkfs_argv(target.device), timeout=300)
    shell.run(plan.mount_argv(target.device, str(mnt)), timeout=60)
    out: dict[str, list[float]] = {"wall": [], "ops": []}
    try:
        for seed in range(repeats):
            shell.run(["sync"])
            Path("/proc/sys/vm/drop_caches").write_text("3")
            started = time.monotonic()
            metrics, _ = run_fio(shell, runner.personality, str(mnt), mnt.parent, runner.runtime_s, seed, 600)
            out["wall"].append(time.monotonic() - started)
            out["ops"].append(metrics["ops_per_s"])
            for child in mnt.iterdir():  # the next repetition lays out its files afresh
                subprocess.run(["rm", "-rf", str(child)], check=True)
    finally:
        shell.run(["umount", str(mnt)], check=False)
        mnt.rmdir()
    return out


def noise(args: argparse.Namespace, loop_dir: str) -> None:
    print(f"\n== repeat noise: CV of ops/s over {args.repeats} evaluations of {args.runtime:g} s (ext4, mq-deadline), "
          f"loop file in {loop_dir}; load before: {os.getloadavg()[0]:.2f}")
    print(f"{'workload':<12}{'mean ops/s':>12}{'CV':>8}{'fio-alone CV':>14}{'target':>10}")
    for workload in args.workloads.split(","):
        runner = make_runner("device", workload=workload, runtime_s=args.runtime, loop_dir=loop_dir)
        config = runner.space.validate({"fs": "ext4", "io_scheduler": "mq-deadline"}, fill_defaults=True)
        ops = [runner.run(config, runner.workload, seed=s).metrics["ops_per_s"] for s in range(args.repeats)]
        alone = fio_alone(runner, config, repeats=args.repeats)
        runner.close()
        verdict = "<= 5%" if cv(ops) <= 0.05 else "> 5%"
        print(f"{workload:<12}{np.mean(ops):>12.0f}{100 * cv(ops):>7.1f}%{100 * cv(alone['ops']):>13.1f}%{verdict:>10}")


def replayer_check(loop_dir: str, rounds: int = 3, seconds: float = 5.0) -> None:
    """Per depth, fio and the replayer take turns ``rounds`` times on one device (A B, B A, A B, ...: neither
    always goes first), each replay issuing as many I/Os as the depth's first fio run; the ratios are of
    the medians over rounds, and the verdict is the target's 10%. fio's own spread over its rounds (max
    over min of its p99) is printed beside it: how far the device's tail moves between minutes."""
    print(f"\n== trace replayer vs fio (the peer): 4 KiB random reads, O_DIRECT, io_uring, latency in us, "
          f"median of {rounds} alternating rounds of {seconds:g} s; loop file in {loop_dir}")
    print(f"{'queue depth':<12}{'mean':>8}{'fio mean':>10}{'ratio':>8}{'p99':>8}{'fio p99':>9}{'ratio':>8}"
          f"{'fio p99 spread':>16}{'target':>18}")
    shell, log = Shell(), SetupLog()
    target = open_loop(shell, log, Path(loop_dir), 1024 * 2**20)
    try:
        shell.run(["dd", "if=/dev/zero", f"of={target.device}", "bs=1M", "count=1024", "oflag=direct"], timeout=600)
        size = 1024 * 2**20
        for depth in (1, 8, 32):
            got: dict[str, list[tuple[float, float]]] = {"fio": [], "replayer": []}
            n = 0

            def fio(r: int) -> None:
                nonlocal n
                job = ["fio", "--name=rr", f"--filename={target.device}", "--rw=randread", "--bs=4k", "--direct=1",
                       "--ioengine=io_uring", f"--iodepth={depth}", f"--runtime={seconds:g}", "--time_based",
                       "--lat_percentiles=1", "--output-format=json", f"--randseed={r + 1}"]
                report = json.loads(shell.run(job, timeout=120).stdout)["jobs"][0]["read"]
                got["fio"].append((report["lat_ns"]["mean"] / 1e3, report["lat_ns"]["percentile"]["99.000000"] / 1e3))
                n = n or int(report["total_ios"])  # as many I/Os as fio did, so both run about as long

            def replayer(r: int) -> None:
                offsets = np.random.default_rng(1000 * depth + r).integers(0, size // 4096, n) * 4096
                trace = Trace(np.zeros(n), np.ones(n, bool), np.full(n, 4096), offsets, np.full(n, np.nan),
                              np.full(n, np.nan), np.full(n, -1))
                latency = replay(trace, target.device, speed=0, queue_depth=depth).trace.latency_us
                got["replayer"].append((float(np.mean(latency)), float(np.percentile(latency, 99))))

            for r in range(rounds):
                for turn in ((fio, replayer) if r % 2 == 0 else (replayer, fio)):
                    turn(r)
            (mean, p99), (fio_mean, fio_p99) = (np.median(np.array(got[k]), axis=0) for k in ("replayer", "fio"))
            spread = max(p for _, p in got["fio"]) / min(p for _, p in got["fio"])
            ok = abs(mean / fio_mean - 1) <= 0.1 and abs(p99 / fio_p99 - 1) <= 0.1
            print(f"{depth:<12}{mean:>8.0f}{fio_mean:>10.0f}{mean / fio_mean:>8.2f}{p99:>8.0f}{fio_p99:>9.0f}"
                  f"{p99 / fio_p99:>8.2f}{spread:>16.2f}{'within 10%' if ok else 'NOT within 10%':>18}")
    finally:
        close_loop(shell, log, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loop-dir", default="/var/tmp/storetune-bench")
    parser.add_argument("--skip", default="", help="comma-separated: fixed,noise,replay")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="the noise section's workloads")
    parser.add_argument("--rounds", type=int, default=3, help="the replay section's alternating rounds per depth")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if os.geteuid() != 0:
        sys.exit("bench/device_overhead.py needs root (loop devices, mkfs, mount)")
    skip = set(args.skip.split(","))
    if "fixed" not in skip:
        fixed_costs(args, args.loop_dir)
    if "noise" not in skip:
        noise(args, args.loop_dir)
    if "replay" not in skip:
        replayer_check(args.loop_dir, rounds=args.rounds)


if __name__ == "__main__":
    main()
