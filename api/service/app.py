"""The StoreTune service: FastAPI over the history, with campaign workers beside it.

``create_app(settings)`` builds the app; its lifespan opens the history (migrating it), adopts the
campaigns a previous service left running, and starts the scheduler; at shutdown it interrupts
the workers, whose campaigns resume at the next start. OpenAPI is at /docs.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi_offline import FastAPIOffline
from fastapi.responses import JSONResponse, Response

from storetune.api.service.cluster import ClusterMonitor
from storetune.api.service.deps import Service, ServiceDep, guarded, token_refusal
from storetune.api.service.routes import campaigns, catalog, cluster as cluster_routes, comparisons, workloads
from storetune.api.service.scheduler import Scheduler
from storetune.api.service.schemas import Health
from storetune.api.service.policy import Refused
from storetune.api.settings import Settings
from storetune.tuner import History

log = logging.getLogger(__name__)


_PLOTLY: list[bytes] = []


def _plotly_js(load: Any) -> bytes:
    if not _PLOTLY:
        _PLOTLY.append(load().encode())
    return _PLOTLY[0]


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        history = History(settings.database_url)
        cluster = None
        if settings.ray_address:  # Ray runs in a watcher process, never here (api/cluster.py)
            cluster = ClusterMonitor(settings.ray_address, join=settings.ray_join)
            cluster.start()
        scheduler = Scheduler(history, settings.database_url, settings.max_campaigns, settings.comparison_workers,
                              cluster=cluster,
                              worker_env={"STORETUNE_RAY_MAX_RETRIES": str(settings.ray_max_retries)})
        app.state.service = Service(settings, history, scheduler, cluster)
        scheduler.start()
        try:
            yield
        finally:
            scheduler.stop()
            if cluster is not None:
                cluster.stop()
            history.close()

    app = FastAPIOffline(  # /docs and /redoc from bundled assets: storage labs are often offline
        title="StoreTune",
        summary="A black-box auto-tuner for storage stacks: launch, watch, cancel and resume tuning campaigns.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.include_router(campaigns.router)
    app.include_router(comparisons.router)
    app.include_router(workloads.router)
    app.include_router(catalog.router)
    app.include_router(cluster_routes.router)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> Response:
        refusal = token_refusal(request, request.app.state.service) if guarded(request) else None
        if refusal is not None:  # a caller without the token learns nothing of what the body should be
            return await http_exception_handler(request, refusal)
        return await request_validation_exception_handler(request, e)

    @app.exception_handler(Refused)
    async def refused(_request: Request, e: Refused) -> JSONResponse:
        return JSONResponse({"detail": [{"loc": list(e.field), "msg": str(e), "type": "refused"}]}, e.status)

    @app.get("/static/plotly.min.js", include_in_schema=False)
    def plotly_js() -> Response:
        """plotly.js from the plotly package: the reports need no CDN."""
        from plotly.offline import get_plotlyjs

        return Response(_plotly_js(get_plotlyjs), media_type="application/javascript",
                        headers={"Cache-Control": "public, max-age=86400"})

    @app.get("/health", response_model=Health, tags=["service"])
    def health(svc: ServiceDep) -> Health:
        """The service is up and its history answers; where its campaigns are measured, and, with a Ray
        cluster, whether it answers (why not, if not) and its nodes (GET /cluster: their resources)."""
        queued = svc.history.count_campaigns(origin="api", states=("queued",))
        executor: dict[str, Any] = {"kind": "local", "workers": svc.scheduler.running(),
                                    "limit": svc.scheduler.max_running}
        if svc.cluster is not None:
            state = svc.cluster.state
            executor.update(kind="ray", address=state.address, cluster=state.state, ready=state.ready,
                            reason=state.reason, nodes=sum(n["alive"] for n in state.nodes),
                            total=state.total, available=state.available)
        return Health(status="ok", database=svc.history.url, executor=executor,
                      campaigns={"running": svc.scheduler.running(), "queued": queued},
                      auth=bool(svc.settings.token))

    return app
