"""What can be asked for: /spaces, /runners, /algorithms, /datasets."""

from __future__ import annotations

import functools
import inspect
import sys
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException

from storetune.api.service.deps import PagingDep, ServiceDep
from storetune.api.service.schemas import AlgorithmPublic, DatasetPublic, Page, RunnerPublic, SpaceSummary
from storetune.runners.tables import has_header
from storetune.runners import SETTINGS
from storetune.search_spaces import list_spaces, load_space
from storetune.tuner import ALGORITHMS, SEARCH_ALGORITHMS
from storetune.tuner.algorithms.base import params_schema
from storetune.tuner.algorithms.registry import algorithm_class

router = APIRouter(tags=["catalog"])


def _summary(name: str) -> SpaceSummary:
    space = load_space(name)
    return SpaceSummary(name=name, description=space.description, parameters=len(space.parameters),
                        configurations=space.cardinality() if space.finite else None)


@router.get("/spaces", response_model=Page[SpaceSummary])
def spaces(page: PagingDep) -> Page[SpaceSummary]:
    """The named search spaces (a table's space is inferred from the table)."""
    return _page([_summary(n) for n in list_spaces()], page)


@router.get("/spaces/{name}", responses={404: {}})
def space(name: str) -> dict:
    """A space's parameters with their domains, defaults and conditions, and its forbidden combinations."""
    if name not in list_spaces():
        raise HTTPException(404, f"no search space {name!r}; known: {', '.join(list_spaces())}")
    space = load_space(name)
    return {**space.to_dict(), "configurations": space.cardinality() if space.finite else None,
            "fingerprint": space.fingerprint()}


def _page(items: list, page: Any) -> Page:
    return Page(items=items[page.offset:page.offset + page.limit], total=len(items), offset=page.offset,
                limit=page.limit)


@router.get("/runners", response_model=Page[RunnerPublic])
def runners(page: PagingDep) -> Page[RunnerPublic]:
    """Each runner and the JSON schema of its settings (what POST /campaigns takes as runner_settings)."""
    return _page([RunnerPublic(name=n, description=inspect.getdoc(m) or "", settings_schema=m.model_json_schema())
                  for n, m in SETTINGS.items()], page)


@functools.cache
def _algorithms() -> list[AlgorithmPublic]:
    out = []
    for name in ALGORITHMS:  # imports each algorithm's module once (DQN's loads torch)
        cls = algorithm_class(name)
        own = cls.__dict__.get("__doc__") or sys.modules[cls.__module__].__doc__ or ""  # not Tuner's own
        doc = inspect.cleandoc(own).split("\n\n")[0].replace("\n", " ")
        out.append(AlgorithmPublic(name=name, description=doc, search=name in SEARCH_ALGORITHMS,
                                   hyperparameters=params_schema(cls.Params)))
    return out


@router.get("/algorithms", response_model=Page[AlgorithmPublic])
def algorithms(page: PagingDep) -> Page[AlgorithmPublic]:
    """Each algorithm's hyperparameters with their defaults and domains (JSON schema)."""
    return _page(_algorithms(), page)


def _tables(roots: list[Path]) -> list[DatasetPublic]:
    seen: set[Path] = set()
    out = []
    for root in roots:
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*.csv")):
            folder = path.parent
            if (folder / "manifest.json").exists():  # a dataset StoreTune measured: the folder is the unit
                if folder in seen:
                    continue
                seen.add(folder)
                size = sum(p.stat().st_size for p in folder.glob("*.csv"))
                out.append(DatasetPublic(path=str(folder), name=folder.name, kind="dataset", size_bytes=size))
            elif path not in seen and has_header(path):  # a table, not a latency CDF or a trace
                seen.add(path)
                out.append(DatasetPublic(path=str(path), name=path.stem, kind="table", size_bytes=path.stat().st_size))
    return out


@router.get("/datasets", response_model=Page[DatasetPublic])
def datasets(svc: ServiceDep, page: PagingDep) -> Page[DatasetPublic]:
    """The tables under the data directories this server allows (STORETUNE_DATA_DIRS): what a campaign or a
    comparison can replay (a CSV file without a header, such as a latency CDF or a trace, is left out)."""
    return _page(_tables(svc.settings.data_roots()), page)
