"""/fingerprints and /recommendations: a workload's features, and what worked for the nearest known ones."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from fastapi import APIRouter, HTTPException, Query, Response
from pydantic import BaseModel, Field

from storetune.api.fields import plain
from storetune.api.service.deps import Auth, ServiceDep
from storetune.api.service.policy import Refused, allowed_path, apply_policy

router = APIRouter(tags=["workloads"])

Format = Literal["msr", "msr-csv", "flashnet"]


class FingerprintCreate(BaseModel):
    trace: Optional[str] = Field(None, description="A trace inside the service's data directories (MSR, MSR CSV or "
                                                   "FlashNet); or a device workload:")
    format: Optional[Format] = Field(None, description="The trace's format (default: detected).")
    workload: Optional[str] = Field(None, description="A device runner workload (fileserver, varmail, ...) to trace "
                                                      "for a few seconds on a loop or allow-listed device.")
    runner_settings: dict[str, Any] = Field(default_factory=dict, description=(
        "The device runner's settings of the campaigns the fingerprint is for (device, engine, runtime_s, "
        "fileset_mib, ...): they make its key."))
    tracer: Literal["blktrace", "tracefs"] = Field("blktrace", description=(
        "blktrace, or tracefs (ftrace's blk tracer: the same events, where kernel lockdown refuses blktrace)."))
    seconds: float = Field(3.0, gt=0, le=60, description="The traced run's length.")
    fallback: bool = Field(False, description="fio's own per-I/O log if the tracer is missing or refused.")
    window: int = Field(1000, ge=2, description="Change detection: a window of this many I/Os.")
    threshold: float = Field(4.0, gt=0, description="Change detection: a shift of this many noise units.")


def _trace(svc: Any, path: str, fmt: str | None, field: tuple[str, ...]) -> tuple[Any, dict[str, Any], Any]:
    from storetune.tuner.analysis.workloads import trace_workload
    from storetune.runners.fingerprint import trace_fingerprint
    from storetune.runners.traces import read_trace

    checked = Path(allowed_path(svc.settings, path, field))
    try:
        loaded = read_trace(checked, fmt)
        return trace_workload(checked), trace_fingerprint(loaded), loaded
    except ValueError as e:  # a malformed trace, or one too short to fingerprint
        raise Refused(field, str(e)) from None


def _device(svc: Any, body: FingerprintCreate) -> tuple[Any, dict[str, Any], Any]:
    """A traced run of a device workload, under the server's device policy (the device runs it
    synchronously, a few seconds, in the request's worker thread)."""
    from storetune.api.service.routes.campaigns import parse_settings_or_refuse
    from storetune.tuner.analysis.workloads import device_fingerprint

    values = apply_policy(svc.settings, "device", {**body.runner_settings, "workload": body.workload})
    settings = parse_settings_or_refuse("device", values)
    try:
        return device_fingerprint(settings, body.seconds, body.tracer, body.fallback)
    except (ValueError, OSError) as e:  # refused or missing tracer, a failed run: its one line
        raise Refused(("body", "tracer"), str(e)) from None


@router.post("/fingerprints", status_code=201, dependencies=Auth, responses={401: {}, 403: {}, 422: {}})
def create_fingerprint(body: FingerprintCreate, svc: ServiceDep, response: Response) -> dict[str, Any]:
    """Fingerprint a trace (Zhang and Bhargava's features) and record it in the history, where recommendations
    and --warm-start similar find it; with the windows where the fingerprint shifts."""
    from storetune.runners.fingerprint import changes

    if (body.trace is None) == (body.workload is None):
        raise Refused(("body",), "give a trace, or a device workload to trace (workload and runner_settings)")
    if body.trace is not None:
        workload, found, loaded = _trace(svc, body.trace, body.format, ("body", "trace"))
    else:
        workload, found, loaded = _device(svc, body)
    fid = svc.history.add_fingerprint(workload_name=workload.name, workload_fingerprint=workload.fingerprint(),
                                      workload=workload.to_dict(), **found)
    shifts = changes(loaded, body.window, body.threshold) if len(loaded) >= 2 * body.window else None
    response.headers["Location"] = f"/fingerprints/{fid}"
    return {"id": fid, "workload": workload.name, "workload_fingerprint": workload.fingerprint(), **found,
            "changes": None if shifts is None else {"window": body.window, "threshold": body.threshold,
                                                    "at": [c.to_dict() for c in shifts]}}


@router.get("/fingerprints")
def list_fingerprints(svc: ServiceDep) -> list[dict[str, Any]]:
    """The newest fingerprint of every workload in the history."""
    return [{"workload_fingerprint": key, **{k: v for k, v in fp.items()}}
            for key, fp in svc.history.fingerprints().items()]


@router.get("/recommendations", responses={404: {}, 422: {}})
def recommendations(svc: ServiceDep, trace: Annotated[str, Query(description="A trace in the data directories.")],
                    space: Optional[str] = None, k: Annotated[int, Query(ge=1, le=100)] = 3,
                    within: Annotated[float, Query(gt=0, le=1)] = 0.95, metric: Optional[str] = None,
                    format: Optional[Format] = None) -> dict[str, Any]:
    """The k known workloads nearest to the trace's, their near-optimal configurations, the distance, and
    how often a workload's nearest neighbour's best stayed near-optimal on it where that was measured."""
    from storetune.search_spaces import load_space
    from storetune.tuner.analysis.workloads import NoHistory, recommend

    workload, found, _ = _trace(svc, trace, format, ("query", "trace"))
    try:
        target = load_space(space) if space else None
    except KeyError as e:
        raise Refused(("query", "space"), e.args[0] if e.args else str(e)) from None
    try:
        result = recommend(svc.history, found["features"], target, k=k, within=within, metric=metric,
                           exclude=[workload.fingerprint()])
    except NoHistory as e:
        raise HTTPException(404, plain(str(e))) from None
    return {"workload": workload.name, "ios": found["ios"], **result.to_dict()}
