"""Commands that work on real devices: replay a trace, sweep a grid into a dataset."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from storetune.api.cli.common import (
    AllowDeviceOpt, DbOption, DeviceOpt, DirtyLimitOpt, EngineOpt, FilesetOpt, JsonOption, LoopDirOpt, LoopSizeOpt,
    UserError, WarmupOpt, console, err, interrupted_status, literal, open_history, runner_settings, show_dry_run,
)
from storetune.api.cli.progress import CampaignProgress
from storetune.tuner import Campaign


def replay(
    trace: Annotated[Path, typer.Option(help="An MSR or FlashNet trace.")],
    out: Annotated[Path, typer.Option(help="Where to write the replay, in the 7-column FlashNet format.")],
    fmt: Annotated[Optional[str], typer.Option("--format", help="msr, msr-csv or flashnet (default: detected).")] = None,
    device: DeviceOpt = None,
    allow_device: AllowDeviceOpt = [],  # noqa: B006
    speed: Annotated[float, typer.Option(help="Replay at this multiple of the trace's pace; 0: as fast as possible.")]
    = 1.0,
    queue_depth: Annotated[int, typer.Option(help="I/Os in flight at most (io_uring); latencies are checked "
                                                  "against fio's at 1, 8 and 32 (bench/device_overhead.py).")] = 1,
    loop_dir: LoopDirOpt = None,
    loop_size_mib: LoopSizeOpt = None,
    window: Annotated[int, typer.Option(help="Change detection: report where the workload's fingerprint shifts, in "
                                             "windows of this many I/Os (storetune fingerprint).")] = 1000,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be done; touch nothing.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Replay a block trace on a device with O_DIRECT and record every I/O's latency; say where the
    workload's fingerprint shifts (the change detection of Zhang and Bhargava's self-learning disk scheduler)."""
    from storetune.runners.device.replay import replay_on_device
    from storetune.runners.fingerprint import check_detection
    from storetune.runners.traces import read_trace, write_flashnet

    check_detection(window)  # before the replay, not after it
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: the folder {out.parent} does not exist")
    if out.is_dir():
        raise UserError(f"--out {out} is a folder: name the file to write")
    loaded = read_trace(trace, fmt)
    where = runner_settings("device", dict(device=device, allow_device=allow_device, loop_dir=loop_dir,
                                           loop_size_mib=loop_size_mib))  # the device runner's defaults and checks
    device = where.device
    result = replay_on_device(loaded, device=where.device, allow_device=where.allow_device, loop_dir=where.loop_dir,
                              loop_size_mib=where.loop_size_mib, speed=speed, queue_depth=queue_depth, dry_run=dry_run,
                              echo=literal)
    if result is None:
        return
    write_flashnet(out, result.trace)
    summary = {**result.summary(), "trace": str(trace), "out": str(out), "device": device,
               "speed": speed, "queue_depth": queue_depth, "changes": _changes(result.trace, window)}
    if as_json:
        print(json.dumps(summary))
        return
    if result.wrapped:
        console.print(f"{result.wrapped} of {len(loaded)} offsets lay beyond the device and were wrapped back onto it "
                      "(modulo the device's size less the I/O's length, aligned to its block)")
    console.print(f"replayed {summary['ios']} I/Os in {summary['duration_s']} s: mean latency "
                  f"{summary['latency_mean_us']:.0f} us, p99 {summary['latency_p99_us']:.0f} us -> {out}")
    shifts = summary["changes"]
    if shifts is not None:
        at = ", ".join(f"window {c['window']} (I/O {c['first_io']})" for c in shifts["at"]) or "nowhere"
        console.print(f"the workload's fingerprint shifts at {at} ({shifts['windows']} windows of {window} I/Os)",
                      highlight=False)


def _changes(trace: Any, window: int) -> dict[str, Any] | None:
    """Where the replayed workload's fingerprint shifts (``runners.fingerprint.changes``, on the replay's
    own arrival times and measured latencies); None for a replay shorter than two windows."""
    from storetune.runners.fingerprint import changes

    if len(trace) < 2 * window:
        return None
    return {"window": window, "windows": len(trace) // window, "at": [c.to_dict() for c in changes(trace, window)]}


def _sweep_dry_run(spec: Any, grid: dict[str, Any]) -> None:
    console.print(f"[bold]# sweep into {spec.out}[/]: {grid['configurations']} configurations x "
                  f"{len(grid['workloads'])} workloads ({', '.join(grid['workloads'])}) x {grid['repeats']} repeats = "
                  f"{grid['benchmark_runs']} benchmark runs of {spec.device.runtime_s:g} s: "
                  f"{duration(grid['benchmark_time_s'])} of benchmark at least, plus mkfs and set-up per run")
    if grid["jobs_changed"]:
        console.print(f"# the job file of {', '.join(grid['jobs_changed'])} changed since {spec.out} measured it: "
                      + ("measured again (--remeasure), the other workloads kept"
                         if set(grid["jobs_changed"]) <= set(spec.remeasure) else
                         f"refused unless --remeasure {','.join(grid['jobs_changed'])}"))
    if grid["resumes"]:
        console.print(f"# {spec.out}/manifest.json holds {', '.join(grid['resumes'])}: "
                      + ("its settings differ; only a larger --per-stratum extends it, anything else is refused"
                         if grid["settings_differ"] else "the sweep resumes, measuring only what is missing"))
    show_dry_run(grid["first"], evaluations=1)


def duration(seconds: float) -> str:
    """A run's length in the unit a person plans by: 40 s, 12 min, 3.5 h."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def sweep(
    out: Annotated[Path, typer.Option(help="The dataset folder, e.g. datasets/loop-storage-v2.")],
    space: Annotated[str, typer.Option(help="The space to sample.")] = "storage_v2",
    workloads: Annotated[str, typer.Option(help="Comma-separated personalities.")] = "fileserver,varmail,webserver,oltp",
    device: DeviceOpt = None,
    allow_device: AllowDeviceOpt = [],  # noqa: B006
    engine: EngineOpt = None,
    runtime: Annotated[float, typer.Option(help="Seconds each benchmark runs (a sweep's own default: it measures "
                                                "many configurations).")] = 8.0,
    repeats: Annotated[int, typer.Option(help="Measurements per configuration and workload.")] = 2,
    per_stratum: Annotated[int, typer.Option(help="Configurations per file system x I/O scheduler pair.")] = 3,
    remeasure: Annotated[str, typer.Option(help="Comma-separated workloads to measure again from the start where "
                                                "their job file changed since the sweep measured them (JOB_VERSIONS "
                                                "in runners/device/personalities.py); the others are kept.")] = "",
    seed: Annotated[int, typer.Option(help="Seed of the grid and of fio.")] = 0,
    loop_dir: LoopDirOpt = None,
    loop_size_mib: LoopSizeOpt = None,
    fileset_mib: FilesetOpt = None,
    warmup_runs: WarmupOpt = None,
    dirty_limit_mib: DirtyLimitOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the grid, the runs it takes and the commands "
                                                             "of its first evaluation; run and record nothing.")]
    = False,
    db: DbOption = None,
) -> None:
    """Measure a grid of configurations for several workloads and write it as a dataset (resumable)."""
    from storetune.runners.device.personalities import PERSONALITIES
    from storetune.tuner.search.sweep import SweepSpec, plan, run_sweep, workloads_of

    settings = runner_settings("device", dict(space=space, device=device, allow_device=allow_device, engine=engine,
                                              runtime_s=runtime, loop_dir=loop_dir, loop_size_mib=loop_size_mib,
                                              fileset_mib=fileset_mib, warmup_runs=warmup_runs,
                                              dirty_limit_mib=dirty_limit_mib))
    spec = SweepSpec(out=out, device=settings, workloads=workloads_of(workloads, list(PERSONALITIES)),
                     repeats=repeats, per_stratum=per_stratum, seed=seed, command=["storetune", *sys.argv[1:]],
                     remeasure=workloads_of(remeasure, list(PERSONALITIES)) if remeasure else ())
    if dry_run:
        _sweep_dry_run(spec, plan(spec))
        return
    history = open_history(db, migrate=True)
    state: dict[str, Any] = {}

    def started(workload: str, campaign: Campaign) -> None:
        if state.get("progress"):
            state["progress"].__exit__(None, None, None)
        start = campaign.summary()
        title = f"sweep {workload} (campaign {campaign.id})"
        state["progress"] = CampaignProgress(err, title, campaign.record.budget, start.evaluated,
                                             start.best_value).__enter__()

    try:
        manifest = run_sweep(history, spec, on_trial=lambda r: state["progress"].update(r), on_campaign=started)
    except KeyboardInterrupt:
        if state.get("progress"):
            state["progress"].__exit__(None, None, None)
            state["progress"] = None
        err.print(f"interrupted: what was measured is kept in the history {history.url} (its campaigns are listed "
                  f"in {spec.out / 'manifest.json'}), and {spec.out / 'measurements.csv'} is written when the sweep "
                  "ends: run the same command again (the same --db) to resume, measuring only what is missing",
                  highlight=False, soft_wrap=True)
        sys.exit(interrupted_status())
    finally:
        if state.get("progress"):
            state["progress"].__exit__(None, None, None)
    console.print(f"dataset: {manifest.parent / 'measurements.csv'}  manifest: {manifest}")
    for workload, n in json.loads(manifest.read_text()).get("noise", {}).items():
        if not n["configurations"]:
            why = "--repeats 1 measures each configuration once" if spec.repeats == 1 else \
                "no configuration succeeded twice"
            console.print(f"{workload}: {why}, so there is no repeat noise to report")
        else:
            rho = "n/a" if n["repeat_spearman"] is None else n["repeat_spearman"]
            console.print(f"{workload}: ops/s of {n['configurations']} configurations measured twice or more: "
                          f"median CV {n['median_cv']:.1%} (90th percentile {n['p90_cv']:.1%}), "
                          f"first repeat against second Spearman {rho}")
