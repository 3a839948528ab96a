"""What the routes share: the service's state, the token check, pagination, links."""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Path, Query, Request

from storetune.api.service.cluster import ClusterMonitor
from storetune.api.service.scheduler import Scheduler
from storetune.api.settings import Settings
from storetune.tuner import History


@dataclass
class Service:
    settings: Settings
    history: History
    scheduler: Scheduler
    cluster: ClusterMonitor | None = None  # the Ray cluster campaigns are measured on, if the service has one
    cache: ResponseCache = field(default_factory=lambda: ResponseCache(64))


class ResponseCache:
    """Answers computed from all of a campaign's trials, kept until one of its trials changes (the
    key carries ``History.trials_version``): every client polling a live report shares one
    computation per finished trial. Bounded, least recently used first out."""

    def __init__(self, size: int):
        self.size, self._items, self._lock = size, OrderedDict[Any, bytes](), threading.Lock()

    def get(self, key: Any) -> bytes | None:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        return None

    def put(self, key: Any, body: bytes) -> None:
        with self._lock:
            self._items[key] = body
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


def service(request: Request) -> Service:
    return request.app.state.service


ServiceDep = Annotated[Service, Depends(service)]


def token_refusal(request: Request, svc: Service) -> HTTPException | None:
    """The 401 a mutating call gets without the server's STORETUNE_TOKEN as its bearer token (None if it may go on)."""
    token = svc.settings.token
    if not token:
        return None
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), token.encode()):
        return HTTPException(401, "this call changes the history: send 'Authorization: Bearer <token>' "
                                  "with the server's STORETUNE_TOKEN", headers={"WWW-Authenticate": "Bearer"})
    return None


def require_token(request: Request, svc: ServiceDep) -> None:
    """Mutating calls need 'Authorization: Bearer <token>' when the server has STORETUNE_TOKEN."""
    refusal = token_refusal(request, svc)
    if refusal is not None:
        raise refusal


Auth = [Depends(require_token)]


READS = frozenset({"GET", "HEAD", "OPTIONS"})  # every other method changes the history and needs the token


def guarded(request: Request) -> bool:
    """Does ``request`` need the token? Every call that is not a read does (each such route carries
    ``Auth``: tests/test_api.py checks). FastAPI parses a JSON body before it runs any dependency, so a
    malformed body would otherwise answer 422, and say what the route expects, before 401."""
    return request.method not in READS


@dataclass(frozen=True)
class Paging:
    offset: int
    limit: int


def paging(offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
           limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Paging:
    return Paging(offset, limit)


PagingDep = Annotated[Paging, Depends(paging)]


# Ids are the history's INTEGER keys (32-bit on PostgreSQL): a larger one is a 422, not a database error.
MAX_ID = 2**31 - 1
CampaignId = Annotated[int, Path(ge=1, le=MAX_ID, description="A campaign's id.")]
ComparisonId = Annotated[int, Path(ge=1, le=MAX_ID, description="A comparison's id.")]
TrialNumber = Annotated[int, Path(ge=0, le=MAX_ID, description="A trial's number in its campaign, from 0.")]
