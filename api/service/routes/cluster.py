"""/cluster: the Ray cluster the service measures on, its nodes and what each campaign holds of it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from storetune.api.service.deps import ServiceDep

router = APIRouter(tags=["service"])


def holds(executor: dict[str, Any]) -> dict[str, float]:
    """What a running campaign may hold of the cluster at once: its workers in flight, each with the
    resources one measurement needs (a CPU when it needs nothing else)."""
    per_task = executor.get("per_task") or {"CPU": 1.0}
    workers = int(executor.get("workers") or 1)
    return {name: amount * workers for name, amount in per_task.items()}


@router.get("/cluster")
def get_cluster(svc: ServiceDep) -> dict[str, Any]:
    """The Ray cluster: whether it answers (and why not), its nodes with their resources, total and available,
    and the running campaigns and comparisons measured on it with what each holds. Without a cluster, the
    service measures on its own machine: ``{"kind": "local"}``."""
    campaigns = [
        {"campaign": c.id, "state": c.state, "workers": (c.executor or {}).get("workers"),
         "per_task": (c.executor or {}).get("per_task", {}), "holds": holds(c.executor or {}),
         "notes": (c.executor or {}).get("notes", [])}
        for c in svc.history.campaigns(states=("running",)) if (c.executor or {}).get("kind") == "ray"
    ]
    comparisons = [{"comparison": k.id, "state": k.state} for k in svc.history.comparisons(states=("running",))
                   if k.settings.get("executor") == "ray"]
    if svc.cluster is None:
        return {"kind": "local", "campaigns": campaigns, "comparisons": comparisons}
    return {"kind": "ray", **svc.cluster.state.to_dict(), "campaigns": campaigns, "comparisons": comparisons}
