"""``storetune fingerprint`` and ``storetune recommend``: describe a workload, and start from what
worked for the most similar workloads in the history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from storetune.api.cli.common import (
    AllowDeviceOpt, DbOption, DeviceOpt, EngineOpt, FilesetOpt, JsonOption, LoopDirOpt, LoopSizeOpt,
    RuntimeOpt, UserError, WorkloadOpt, console, err, open_history, runner_settings,
)
from storetune.runners import Workload
from storetune.runners.settings import DeviceSettings, flag
from storetune.tuner.analysis.workloads import device_fingerprint, trace_workload
from storetune.runners.fingerprint import DISTANCE_FEATURES, changes, check_detection, trace_fingerprint
from storetune.runners.traces import read_trace

TraceOpt = Annotated[Optional[Path], typer.Option(help="A block trace: MSR, MSR CSV or FlashNet (detected).")]
FormatOpt = Annotated[Optional[str], typer.Option("--format", help="msr, msr-csv or flashnet (default: detected).")]


def _of_trace(trace: Path, fmt: str | None) -> tuple[Workload, dict[str, Any], Any]:
    loaded = read_trace(trace, fmt)
    return trace_workload(trace), trace_fingerprint(loaded), loaded


SecondsOpt = Annotated[float, typer.Option(help="Device: seconds of the traced run.")]
TracerOpt = Annotated[str, typer.Option(help="Device: blktrace, or tracefs (the kernel's blk tracer through ftrace: "
                                             "the same events, where kernel lockdown refuses blktrace).")]
FallbackOpt = Annotated[bool, typer.Option("--fallback", help="Device: if the tracer is missing or refused, use "
                                                              "fio's own per-I/O log (file offsets, not blocks).")]


def _of_device(options: dict[str, Any], seconds: float, tracer: str,
               fallback: bool) -> tuple[Workload, dict[str, Any], Any]:
    settings = runner_settings("device", options)
    err.print(f"tracing {settings.workload} ({settings.engine}) for {seconds:g} s on {settings.device} with {tracer}",
              highlight=False)
    workload, found, trace = device_fingerprint(settings, seconds, tracer, fallback)
    if found["meta"].get("warning"):
        err.print(f"[yellow]warning:[/] {found['meta']['warning']}; a shorter --seconds loses less", highlight=False)
    return workload, found, trace


def fingerprint(
    trace: TraceOpt = None,
    fmt: FormatOpt = None,
    workload: WorkloadOpt = None,
    device: DeviceOpt = None,
    allow_device: AllowDeviceOpt = [],  # noqa: B006
    engine: EngineOpt = None,
    runtime: RuntimeOpt = None,
    loop_dir: LoopDirOpt = None,
    loop_size_mib: LoopSizeOpt = None,
    fileset_mib: FilesetOpt = None,
    seconds: SecondsOpt = 3.0,
    tracer: TracerOpt = "blktrace",
    fallback: FallbackOpt = False,
    window: Annotated[int, typer.Option(help="Change detection: a window of this many I/Os (not seconds: some "
                                             "traces are stamped in whole seconds).")] = 1000,
    threshold: Annotated[float, typer.Option(help="Change detection: a window this many units of the trace's "
                                                  "window-to-window noise from its phase starts a new one.")] = 4.0,
    record: Annotated[bool, typer.Option(help="Record the fingerprint in the history, where recommend and "
                                              "--warm-start similar find it.")] = True,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """A workload's features (Zhang and Bhargava's Table 2: reads and writes, request sizes, sequentiality,
    arrival rate and burstiness, concurrency, think time), from a trace or a short traced run of a
    device workload, and where in the trace they shift.

    --workload NAME --device loop traces a run of the device runner's workload with blktrace, which sees
    the file system's journal and metadata I/O too; --runtime, --fileset-mib and --engine name the
    campaign the fingerprint is for (the traced run itself lasts --seconds)."""
    check_detection(window, threshold)  # before a traced run, not after it
    workload, found, loaded = _source(trace, fmt, dict(workload=workload, device=device, allow_device=allow_device,
                                                       engine=engine, runtime_s=runtime, loop_dir=loop_dir,
                                                       loop_size_mib=loop_size_mib, fileset_mib=fileset_mib),
                                      seconds, tracer, fallback)
    shifts = changes(loaded, window, threshold) if len(loaded) >= 2 * window else None
    result: dict[str, Any] = {"workload": workload.name, "workload_fingerprint": workload.fingerprint(), **found,
                              "changes": None if shifts is None else {"window": window, "threshold": threshold,
                                                                      "windows": len(loaded) // window,
                                                                      "at": [c.to_dict() for c in shifts]}}
    if record:
        history = open_history(db, migrate=True)
        try:
            result["id"] = history.add_fingerprint(workload_name=workload.name,
                                                   workload_fingerprint=workload.fingerprint(),
                                                   workload=workload.to_dict(), **found)
        finally:
            history.close()
    if as_json:
        print(json.dumps(result, default=str))
        return
    console.print(f"workload {workload.name} ({found['source']}, {found['ios']} I/Os)"
                  + (f", recorded as fingerprint {result['id']}" if record else ""), highlight=False)
    for name, value in found["features"].items():
        mark = " *" if name in DISTANCE_FEATURES else ""
        console.print(f"  {name:<22} {'-' if value is None else f'{value:.6g}'}{mark}", highlight=False)
    console.print("  (* compared by recommend, standardised)")
    if shifts is None:
        console.print(f"change detection: fewer than two windows of {window} I/Os")
    elif not shifts:
        console.print(f"no shift across {len(loaded) // window} windows of {window} I/Os")
    else:
        at = ", ".join(f"window {c.window} (I/O {c.first_io}, {c.distance:.1f})" for c in shifts)
        console.print(f"the fingerprint shifts at {at}", highlight=False)


def _source(trace: Path | None, fmt: str | None, device_options: dict[str, Any], seconds: float, tracer: str,
            fallback: bool) -> tuple[Workload, dict[str, Any], Any]:
    given = {k: v for k, v in device_options.items() if v not in (None, [])}
    if trace is not None and given:
        first = next(iter(given))
        raise UserError(f"give --trace or a device workload (--workload, --device, ...), not both: "
                        f"{flag(DeviceSettings, first)} with --trace")
    if trace is not None:
        return _of_trace(trace, fmt)
    if "workload" not in given:
        raise UserError("name the workload: --trace PATH, or --workload NAME (with --device loop or a disk)")
    return _of_device(given, seconds, tracer, fallback)


def recommend(
    trace: TraceOpt = None,
    fmt: FormatOpt = None,
    workload: WorkloadOpt = None,
    device: DeviceOpt = None,
    allow_device: AllowDeviceOpt = [],  # noqa: B006
    engine: EngineOpt = None,
    loop_dir: LoopDirOpt = None,
    loop_size_mib: LoopSizeOpt = None,
    fileset_mib: FilesetOpt = None,
    seconds: SecondsOpt = 3.0,
    tracer: TracerOpt = "blktrace",
    fallback: FallbackOpt = False,
    space: Annotated[Optional[str], typer.Option(help="Only configurations of this space's parameters.")] = None,
    k: Annotated[int, typer.Option("--k", help="How many of the nearest workloads.")] = 3,
    within: Annotated[float, typer.Option(help="Near-optimal: within this share of a workload's best.")] = 0.95,
    metric: Annotated[Optional[str], typer.Option(help="The metric the campaigns optimised (default: the most "
                                                       "common).")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """The nearest known workloads, their near-optimal configurations, and how far they are."""
    from storetune.search_spaces import load_space
    from storetune.tuner.analysis.workloads import recommend as nearest

    target = load_space(space) if space else None
    history = open_history(db, migrate=False)  # an unusable history is said before a device is traced
    workload, found, _ = _source(trace, fmt, dict(workload=workload, device=device, allow_device=allow_device,
                                                 engine=engine, loop_dir=loop_dir, loop_size_mib=loop_size_mib,
                                                 fileset_mib=fileset_mib), seconds, tracer, fallback)
    result = nearest(history, found["features"], target, k=k, within=within, metric=metric,
                     exclude=[workload.fingerprint()])
    if as_json:
        print(json.dumps({"workload": workload.name, "ios": found["ios"], **result.to_dict()}, default=str))
        return
    count = len(result.neighbours)
    nearest = "the nearest known workload" if count == 1 else f"the {count} nearest known workloads"
    console.print(f"workload {workload.name}: {nearest} ({result.metric}, "
                  f"near-optimal within {result.within:.0%} of each one's best)", highlight=False)
    for n in result.neighbours:
        console.print(f"  {n.workload_name}: distance {n.distance:.2f} ({n.source}); best {n.metric} = "
                      f"{n.best['value']:.6g}, {n.near_optimal_count} of {n.configurations} measured configurations "
                      f"near-optimal", highlight=False)
        console.print("    best: " + ", ".join(f"{k}={v}" for k, v in n.best["config"].items()), highlight=False)
    t = result.transfer
    if t["checked"]:
        console.print(f"confidence: the nearest known workload's best was near-optimal on {t['near_optimal']} of the "
                      f"{t['checked']} known workloads where that was measured", highlight=False)
    else:
        console.print("confidence: no known workload has its nearest neighbour's best measured; the distance is all "
                      "there is", highlight=False)
    console.print(f"distance: root mean square of {', '.join(result.features)}, each standardised by its spread over "
                  "these workloads", highlight=False)

