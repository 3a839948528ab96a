"""/comparisons: the offline comparison of `storetune compare`, launched and read over REST."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Response
from fastapi.responses import HTMLResponse

from storetune.api.service.deps import Auth, ComparisonId, PagingDep, ServiceDep
from storetune.api.service.schemas import ComparisonCreate, ComparisonPublic, Page, VariantCreate
from storetune.api.service.routes.campaigns import executor_kind
from storetune.api.fields import json_terms
from storetune.api.service.policy import Refused, allowed_path, apply_policy
from storetune.tuner.algorithms.base import HyperparameterError
from storetune.tuner.search.spec import InvalidSpec
from storetune.tuner.history.views import ComparisonView


router = APIRouter(prefix="/comparisons", tags=["comparisons"])


def public(svc: Any, c: ComparisonView) -> ComparisonPublic:
    return ComparisonPublic(
        id=c.id, state=c.state, origin=c.origin, note=c.note, created_at=c.created_at, finished_at=c.finished_at,
        workload=c.workload_name, runner_settings=c.runner_settings, settings=c.settings,
        campaigns=len(svc.history.comparison_campaigns(c.id)), results=c.results,
        cancel_requested=c.cancel_requested,
        links={"self": f"/comparisons/{c.id}", "report": f"/comparisons/{c.id}/report",
               "cancel": f"/comparisons/{c.id}/cancel", "resume": f"/comparisons/{c.id}/resume"},
    )


def _variants(items: list[str | VariantCreate]) -> tuple[Any, ...]:
    """Strings as `storetune compare --algorithms` reads them (one variant each); objects as they
    are, so a value with a comma or a colon stays one value."""
    from storetune.tuner.search.compare import Variant

    out = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            parsed = Variant.parse_list(item)
            if len(parsed) != 1:
                raise Refused(("body", "algorithms", i), f"{item!r}: one variant per item (no commas)")
            out.extend(parsed)
        else:
            out.append(Variant(item.algorithm, tuple((k, str(v)) for k, v in item.params.items())))
    labels = [v.label for v in out]
    if len(set(labels)) != len(labels):
        raise Refused(("body", "algorithms"), f"a variant is listed twice: {', '.join(labels)}")
    return tuple(out)


@router.post("", status_code=201, response_model=ComparisonPublic, dependencies=Auth,
             responses={401: {}, 403: {}, 422: {}})
def create_comparison(body: ComparisonCreate, svc: ServiceDep, response: Response) -> ComparisonPublic:
    """Queue a comparison: every algorithm runs one seeded campaign per seed on the table, in a
    worker process of the service; the results carry each algorithm's success curve."""
    from storetune.tuner.search.compare import Comparison, CompareSpec

    values = apply_policy(svc.settings, "dataset", {"dataset": body.dataset, "context": body.context,
                                                    "metric": body.metric})
    try:
        variants = _variants(body.algorithms)
    except ValueError as e:
        raise Refused(("body", "algorithms"), str(e)) from None
    spec = CompareSpec(runner_settings=values, variants=variants, seeds=body.seeds, budget=body.budget,
                       within=body.within, repeats=body.repeats, metric=body.metric, direction=body.direction,
                       first_seed=body.first_seed, stop_at_near_optimal=body.stop_at_near_optimal,
                       judge=tuple(allowed_path(svc.settings, p, ("body", "judge", i))
                                   for i, p in enumerate(body.judge)) or None)
    executor = executor_kind(svc, body.executor)
    try:
        comparison = Comparison.create(svc.history, spec, origin="api", state="queued", executor_kind=executor)
    except HyperparameterError as e:
        raise Refused(("body", "algorithms"), str(e)) from None
    except InvalidSpec as e:  # the part of the body at fault is known: an unknown metric or algorithm, the budget
        raise Refused(("body", e.field), json_terms(str(e), ComparisonCreate.model_fields, False)[0]) from None
    except (ValueError, LookupError, OSError) as e:
        message, named = json_terms(e.args[0] if isinstance(e, LookupError) and e.args else str(e),
                                    ComparisonCreate.model_fields, False)
        raise Refused(("body", *named), message) from None
    svc.scheduler.wake()
    response.headers["Location"] = f"/comparisons/{comparison.id}"
    return public(svc, svc.history.comparison(comparison.id)).model_copy(
        update={"warnings": list(comparison.notes())})


@router.get("", response_model=Page[ComparisonPublic])
def list_comparisons(svc: ServiceDep, page: PagingDep) -> Page[ComparisonPublic]:
    items = [public(svc, c) for c in svc.history.comparisons(offset=page.offset, limit=page.limit)]
    return Page(items=items, total=svc.history.count_comparisons(), offset=page.offset, limit=page.limit)


@router.get("/{comparison_id}", response_model=ComparisonPublic, responses={404: {}})
def get_comparison(comparison_id: ComparisonId, svc: ServiceDep) -> ComparisonPublic:
    """State and, once finished, the results: per algorithm the median evaluations to near-optimal,
    the success curve (success_at[k-1]: share of seeds that found one within k evaluations)."""
    return public(svc, _comparison(svc, comparison_id))


def _comparison(svc: Any, comparison_id: int) -> ComparisonView:
    try:
        return svc.history.comparison(comparison_id)
    except LookupError:
        raise HTTPException(404, f"no comparison {comparison_id}") from None


@router.post("/{comparison_id}/cancel", response_model=ComparisonPublic, dependencies=Auth,
             responses={401: {}, 404: {}, 409: {}})
def cancel_comparison(comparison_id: ComparisonId, svc: ServiceDep) -> ComparisonPublic:
    """Stop a comparison: a queued one at once; a running one when its next seed campaign finishes (the others
    running then are dropped). Its recorded seeds are kept, and a resume runs the others."""
    c = _comparison(svc, comparison_id)
    if c.state not in ("queued", "running"):
        raise HTTPException(409, f"comparison {comparison_id} is {c.state}: only a queued or running comparison "
                                 "can be cancelled")
    if not svc.history.transition_comparison(comparison_id, ["queued"], state="cancelled",
                                             note="cancelled before it started"):
        if not svc.history.transition_comparison(comparison_id, ["running"], cancel_requested=True):
            raise HTTPException(409, f"comparison {comparison_id} ended meanwhile; nothing to cancel")
    svc.scheduler.wake()
    return public(svc, svc.history.comparison(comparison_id))


@router.post("/{comparison_id}/resume", response_model=ComparisonPublic, dependencies=Auth,
             responses={401: {}, 403: {}, 404: {}, 409: {}})
def resume_comparison(comparison_id: ComparisonId, svc: ServiceDep) -> ComparisonPublic:
    """Go on with a comparison that was cancelled, interrupted or failed: the seed campaigns it recorded are
    kept, the others run, and the results cover them all."""
    c = _comparison(svc, comparison_id)
    if c.state not in ("cancelled", "interrupted", "failed"):
        raise HTTPException(409, f"comparison {comparison_id} is {c.state}: only a cancelled, interrupted or failed "
                                 "comparison can be resumed")
    if not svc.scheduler.released("comparison", comparison_id):  # its worker is ending: one driver at a time
        raise HTTPException(409, f"comparison {comparison_id} is {c.state}, and its worker is still ending; try "
                                 "again in a few seconds")
    apply_policy(svc.settings, "dataset", dict(c.runner_settings))  # its tables must be inside the data directories
    for i, path in enumerate(c.settings.get("judge") or []):  # and so must its judge (a CLI comparison's too)
        allowed_path(svc.settings, path, ("judge", i))
    if c.settings.get("executor") == "ray":
        executor_kind(svc, "ray")
    if not svc.history.transition_comparison(comparison_id, ["cancelled", "interrupted", "failed"], state="queued",
                                             origin="api", cancel_requested=False, note="resumed"):
        raise HTTPException(409, f"comparison {comparison_id} changed state meanwhile; look at it again")
    svc.scheduler.wake()
    return public(svc, svc.history.comparison(comparison_id))


@router.get("/{comparison_id}/report", response_class=HTMLResponse, responses={404: {}})
def comparison_report(comparison_id: ComparisonId, svc: ServiceDep) -> HTMLResponse:
    """The web report of the comparison: success curves beside random search's exact one; live while it runs."""
    from storetune.api.report.page import page
    from storetune.tuner.analysis.report import comparison_data

    _comparison(svc, comparison_id)
    return HTMLResponse(page(comparison_data(svc.history, comparison_id), plotly_src="/static/plotly.min.js",
                             live=f"/comparisons/{comparison_id}/report/data"))


@router.get("/{comparison_id}/report/data", responses={404: {}})
def comparison_report_data(comparison_id: ComparisonId, svc: ServiceDep) -> dict:
    """What the live comparison report redraws."""
    from storetune.api.report.page import payload
    from storetune.tuner.analysis.report import comparison_data

    _comparison(svc, comparison_id)
    return payload(comparison_data(svc.history, comparison_id))
