"""/campaigns: launch, list, watch, cancel and resume tuning campaigns; their trials and analyses."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Response
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from storetune.api.service.deps import Auth, CampaignId, PagingDep, ServiceDep, TrialNumber
from storetune.api.service.schemas import (
    Best, CampaignCreate, CampaignPublic, Convergence, NearOptimal, Objective, Page, ParetoSet, Progress,
    TrialDetail, TrialPublic,
)
from storetune.api.public import public_trials
from storetune.api.fields import json_terms, plain
from storetune.api.service.policy import Refused, apply_policy, check_stored
from storetune.runners import RUNNERS, Status, inspected_runner, settings_model
from storetune.tuner import Campaign, CampaignSpec
from storetune.tuner.analysis.summary import (
    best_trial, campaign_best, campaign_convergence, held_out, near_optimal_trials,
)
from storetune.tuner.algorithms.base import HyperparameterError, parse_params
from storetune.tuner.search.campaign import driver_alive
from storetune.tuner.search.spec import UNBOUNDED_EVALUATIONS, InvalidSpec
from storetune.tuner.objectives.objective import MultiObjective, objective_kind, table_metric
from storetune.tuner.algorithms.registry import algorithm_class, algorithm_target, default_algorithm
from storetune.tuner.history.views import CampaignView, TrialView


router = APIRouter(prefix="/campaigns", tags=["campaigns"])

State = Literal["queued", "running", "finished", "cancelled", "interrupted", "failed"]
CANCELLABLE = ("queued", "running")
RESUMABLE = ("cancelled", "interrupted", "failed")
DELETABLE = ("finished", "cancelled", "interrupted", "failed")


def links(campaign_id: int, pareto: bool = False) -> dict[str, str]:
    base = f"/campaigns/{campaign_id}"
    return {"self": base, "trials": f"{base}/trials", "convergence": f"{base}/convergence",
            "near_optimal": f"{base}/near-optimal", "importance": f"{base}/importance", "report": f"{base}/report",
            "cancel": f"{base}/cancel", "delete": base,
            "resume": f"{base}/resume", **({"pareto": f"{base}/pareto"} if pareto else {})}


def public(svc: Any, c: CampaignView) -> CampaignPublic:
    counts, evaluated = svc.history.progress(c.id, c.repeats)
    ordered = {s.value: counts[s.value] for s in Status if counts.get(s.value)}
    if c.objective:  # several metrics: the objective's own best (a rank objective's reads measurements)
        best = campaign_best(c, svc.history.trials(c.id, measurements=True))
    else:
        best = svc.history.best_trial(c.id, c.objective_direction, c.adaptive)
    return CampaignPublic(
        id=c.id, state=c.state, cancel_requested=c.cancel_requested, origin=c.origin, note=c.note,
        created_at=c.created_at, finished_at=c.finished_at, runner=c.runner, runner_settings=c.runner_settings,
        space=c.space_name, workload=c.workload_name, device=c.device, algorithm=c.algorithm,
        algorithm_params=c.algorithm_params, resolved_params=c.resolved_params, objective=Objective(metric=c.objective_metric,
                                                                 direction=c.objective_direction),  # type: ignore[arg-type]
        objective_spec=c.objective,
        budget=c.budget, seed=c.seed, repeats=c.repeats, max_repeats=c.max_repeats, fidelity=c.fidelity,
        parallel=c.batch_size,
        warm_start=c.warm_start, fixed=c.fixed, comparison=c.comparison_id, executor=c.executor,
        progress=Progress(evaluated=evaluated, budget=c.budget,
                          trials_by_status=ordered),
        best=None if best is None else Best(trial=best.number, value=best.value, config=best.config),  # type: ignore[arg-type]
        test_value=held_out(best, c.objective_metric),
        links=links(c.id, pareto=bool(c.objective) and c.objective.get("kind") == "pareto"),
    )


def trials_public(svc: Any, trials: list[TrialView]) -> list[TrialPublic]:
    return [TrialPublic(**fields) for fields in public_trials(svc.history, trials)]


def _campaign(svc: Any, campaign_id: int) -> CampaignView:
    try:
        return svc.history.campaign(campaign_id)
    except LookupError:
        raise HTTPException(404, f"no campaign {campaign_id}") from None


@router.post("", status_code=201, response_model=CampaignPublic, dependencies=Auth,
             responses={401: {}, 403: {}, 404: {}, 422: {}})
def create_campaign(body: CampaignCreate, svc: ServiceDep, response: Response) -> CampaignPublic:
    """Start a campaign in the background: it is queued, and a worker process of the service runs
    it through the same loop as `storetune tune`. Returns at once with its id and links."""
    if body.runner not in RUNNERS:
        raise Refused(("body", "runner"), f"unknown runner {body.runner!r}; known: {', '.join(RUNNERS)}")
    values = apply_policy(svc.settings, body.runner, body.runner_settings)
    if body.runner == "dataset" and not values.get("metric"):
        try:
            values = {**values, "metric": table_metric(None, body.objective)}
        except ValueError as e:
            raise Refused(("body", "objective"), str(e)) from None
    settings = parse_settings_or_refuse(body.runner, values)
    algorithm = body.algorithm or default_algorithm(objective_kind(body.objective))
    try:
        algorithm_target(algorithm)
    except ValueError as e:
        raise Refused(("body", "algorithm"), str(e)) from None
    if body.parallel > svc.settings.max_parallel:
        raise Refused(("body", "parallel"), f"this server measures at most {svc.settings.max_parallel} configurations "
                                            "of a campaign at once (STORETUNE_MAX_PARALLEL)")
    try:
        parse_params(algorithm, algorithm_class(algorithm).Params, body.algorithm_params)
    except HyperparameterError as e:
        raise Refused(("body", "algorithm_params", e.name), str(e)) from None
    try:  # looked at, not set up: the device runner's worker sets its device up
        runner = inspected_runner(body.runner, settings)
    except (ValueError, LookupError, OSError) as e:  # an unknown space is a KeyError; a missing file, OSError
        message = e.args[0] if isinstance(e, LookupError) and e.args else str(e)
        where = ("space",) if "search space" in message and "space" in settings_model(body.runner).model_fields else ()
        message, named = json_terms(message, CampaignCreate.model_fields)
        raise Refused(("body", *(named or ("runner_settings", *where))), message) from None
    executor = executor_kind(svc, body.executor)
    warnings = list(runner.notes())
    if executor == "ray":
        warnings += fit_cluster(svc, runner.resources(), body.parallel)
    spec = CampaignSpec(runner=body.runner, runner_settings=settings, algorithm=algorithm,
                        algorithm_params=body.algorithm_params, metric=body.metric, direction=body.direction,
                        objective=body.objective,
                        budget=body.budget if body.budget_s is None or "budget" in body.model_fields_set else
                        UNBOUNDED_EVALUATIONS,
                        seed=body.seed, repeats=body.repeats, max_repeats=body.max_repeats,
                        batch_size=body.parallel, warm_start=body.warm_start, fixed={k: str(v) for k, v in body.fix.items()},
                        fidelity=body.fidelity, eta=body.eta, min_run_s=body.min_run_s, burn_in=body.burn_in,
                        guard=body.guard, budget_s=body.budget_s,
                        race=body.race)
    try:
        campaign = Campaign.create(svc.history, spec, runner=runner, origin="api", state="queued",
                                   executor_kind=executor, remote=executor == "ray")
    except InvalidSpec as e:
        raise Refused(("body", e.field), json_terms(str(e), CampaignCreate.model_fields)[0]) from None
    svc.scheduler.wake()
    response.headers["Location"] = f"/campaigns/{campaign.id}"
    return public(svc, campaign.record).model_copy(update={"warnings": warnings})


def executor_kind(svc: Any, asked: str | None) -> str:
    """Where a new campaign or comparison is measured: as asked, else on the service's cluster if it has one.
    A cluster that does not answer refuses it now (503, with why), rather than queueing it for ever."""
    kind = asked or ("ray" if svc.cluster is not None else "local")
    if kind == "ray":
        if svc.cluster is None:
            raise Refused(("body", "executor"), "this server has no Ray cluster (its operator starts the service with "
                                                "RAY_ADDRESS set to the head's host:port)")
        state = svc.cluster.state
        if not state.ready:
            why = state.reason or "the service is still joining it"
            raise Refused(("body", "executor"), f"the Ray cluster at {state.address} does not answer now: {why}", 503)
    return kind


def fit_cluster(svc: Any, needed: dict[str, float], parallel: int) -> list[str]:
    """Refuse a campaign whose measurements need a resource no node advertises (a disk, a class of disk), naming
    it; say when the cluster runs fewer measurements at once than ``parallel`` asks (the driver caps it)."""
    state = svc.cluster.state
    missing = state.missing(needed)
    if missing is not None:
        name = next(n for n, amount in needed.items() if state.total.get(n, 0.0) < amount)
        field = "hardware" if name.startswith("disk:") else "device" if name.startswith("device:") else "runner"
        raise Refused(("body", "runner_settings", field) if field != "runner" else ("body", "runner"), missing)
    slots = state.slots(needed)
    if parallel > slots:
        held = ", ".join(f"{state.total.get(n, 0):g} {n}" for n in (needed or {"CPU": 1}))
        return [f"parallel {parallel} is capped to {slots}: the Ray cluster advertises {held} (one measurement each)"]
    return []


def parse_settings_or_refuse(runner: str, values: dict[str, Any]) -> Any:
    """The runner's settings model, or a 422 at the failing field (pydantic's location kept)."""
    try:
        return settings_model(runner).model_validate(values)
    except ValidationError as e:
        problem = e.errors()[0]
        message = "not a setting of this runner" if problem["type"] == "extra_forbidden" else problem["msg"]
        raise Refused(("body", "runner_settings", *problem["loc"]), f"{runner} runner: {message}") from None


@router.get("", response_model=Page[CampaignPublic])
def list_campaigns(svc: ServiceDep, page: PagingDep,
                   state: Annotated[State | None, Query(description="Only campaigns in this state.")] = None
                   ) -> Page[CampaignPublic]:
    """Every campaign in the history (the CLI's too), oldest first."""
    states = (state,) if state else ()
    items = [public(svc, c) for c in svc.history.campaigns(offset=page.offset, limit=page.limit, states=states)]
    return Page(items=items, total=svc.history.count_campaigns(states=states), offset=page.offset, limit=page.limit)


@router.get("/{campaign_id}", response_model=CampaignPublic, responses={404: {}})
def get_campaign(campaign_id: CampaignId, svc: ServiceDep) -> CampaignPublic:
    """State, progress (evaluated/budget), the best so far and the held-out test_value."""
    return public(svc, _campaign(svc, campaign_id))


@router.post("/{campaign_id}/cancel", response_model=CampaignPublic, dependencies=Auth,
             responses={401: {}, 404: {}, 409: {}})
def cancel_campaign(campaign_id: CampaignId, svc: ServiceDep) -> CampaignPublic:
    """Drain: the trials running finish and are recorded, no new one starts; the state becomes
    cancelled (at once for a queued campaign)."""
    c = _campaign(svc, campaign_id)
    if c.state not in CANCELLABLE:
        raise HTTPException(409, f"campaign {campaign_id} is {c.state}: only a queued or running campaign can be "
                                 "cancelled")
    if not svc.history.transition(campaign_id, ["queued"], state="cancelled", note="cancelled before it started"):
        if not svc.history.transition(campaign_id, ["running"], cancel_requested=True):
            raise HTTPException(409, f"campaign {campaign_id} ended meanwhile; nothing to cancel")
    svc.scheduler.wake()
    return public(svc, svc.history.campaign(campaign_id))


@router.post("/{campaign_id}/resume", response_model=CampaignPublic, dependencies=Auth,
             responses={401: {}, 404: {}, 409: {}})
def resume_campaign(campaign_id: CampaignId, svc: ServiceDep) -> CampaignPublic:
    """Continue a campaign that was cancelled, interrupted or failed, exactly as `tune --resume`
    does: trials that were running are re-run, the finished ones are replayed into the algorithm."""
    c = _campaign(svc, campaign_id)
    if c.comparison_id is not None:
        raise HTTPException(409, f"campaign {campaign_id} is a seed of comparison {c.comparison_id}; it is complete")
    dead_driver = c.state == "running" and not driver_alive(c.driver_host, c.driver_pid)
    states = RESUMABLE + (("running",) if dead_driver else ())
    if c.state not in states:
        raise HTTPException(409, f"campaign {campaign_id} is {c.state}: only a cancelled, interrupted or failed "
                                 "campaign (or one whose driver died) can be resumed")
    if not svc.scheduler.released("campaign", campaign_id):  # its worker is ending: one driver at a time
        raise HTTPException(409, f"campaign {campaign_id} is {c.state}, and its worker is still ending; try again "
                                 "in a few seconds")
    check_stored(svc.settings, c.runner, c.runner_settings, c.batch_size)  # a CLI campaign meets the server's policy
    if not svc.history.transition(campaign_id, list(states), state="queued", origin="api", cancel_requested=False,
                                  note="resumed"):
        raise HTTPException(409, f"campaign {campaign_id} changed state meanwhile; look at it again")
    svc.scheduler.wake()
    return public(svc, svc.history.campaign(campaign_id))


@router.delete("/{campaign_id}", status_code=204, dependencies=Auth, responses={401: {}, 404: {}, 409: {}})
def delete_campaign(campaign_id: CampaignId, svc: ServiceDep) -> Response:
    """Delete a campaign that is not queued or running, with its trials and their measurements. A seed of a
    comparison goes with its comparison only."""
    c = _campaign(svc, campaign_id)
    if c.comparison_id is not None:
        raise HTTPException(409, f"campaign {campaign_id} is a seed of comparison {c.comparison_id}; it is part of "
                                 "that comparison's results")
    if c.state not in DELETABLE:
        raise HTTPException(409, f"campaign {campaign_id} is {c.state}: cancel it first (only a finished, "
                                 "cancelled, interrupted or failed campaign can be deleted)")
    if not svc.scheduler.released("campaign", campaign_id):  # its worker is ending: it may still write
        raise HTTPException(409, f"campaign {campaign_id} is {c.state}, and its worker is still ending; try again "
                                 "in a few seconds")
    if not svc.history.delete_campaign(campaign_id, DELETABLE):
        state = svc.history.campaign(campaign_id).state
        raise HTTPException(409, f"campaign {campaign_id} is {state}: cancel it first (only a finished, cancelled, "
                                 "interrupted or failed campaign can be deleted)")
    return Response(status_code=204)


@router.get("/{campaign_id}/trials", response_model=Page[TrialPublic], responses={404: {}})
def list_trials(campaign_id: CampaignId, svc: ServiceDep, page: PagingDep) -> Page[TrialPublic]:
    """The campaign's trials in the order they were asked."""
    _campaign(svc, campaign_id)
    rows = svc.history.trials(campaign_id, offset=page.offset, limit=page.limit)
    return Page(items=trials_public(svc, rows), total=svc.history.count_trials(campaign_id),
                offset=page.offset, limit=page.limit)


@router.get("/{campaign_id}/trials/{number}", response_model=TrialDetail, responses={404: {}})
def get_trial(campaign_id: CampaignId, number: TrialNumber, svc: ServiceDep) -> TrialDetail:
    """One trial with every repeat's measurement and the environment it ran in."""
    _campaign(svc, campaign_id)
    try:
        t = svc.history.trial(campaign_id, number)
    except LookupError as e:
        raise HTTPException(404, plain(str(e))) from None
    return TrialDetail(**public_trials(svc.history, [t])[0], measurements=[m.__dict__ for m in t.measurements or ()])


@router.get("/{campaign_id}/near-optimal", response_model=NearOptimal, responses={404: {}, 422: {}})
def near_optimal(campaign_id: CampaignId, svc: ServiceDep,
                 within: Annotated[float, Query(gt=0, le=1, description="Share of the best value.")] = 0.99
                 ) -> NearOptimal:
    """The trials within ``within`` of the best value measured so far, best first."""
    c = _campaign(svc, campaign_id)
    trials, adaptive = svc.history.trials(campaign_id), c.adaptive
    try:
        near = near_optimal_trials(trials, c.objective_direction, within, adaptive)
    except ValueError as e:
        raise Refused(("query", "within"), str(e)) from None
    best = best_trial(trials, c.objective_direction, adaptive) if near else None
    return NearOptimal(within=within, best_value=None if best is None else best.value,
                       objective=Objective(metric=c.objective_metric, direction=c.objective_direction),  # type: ignore[arg-type]
                       items=trials_public(svc, near), total=len(near))


@router.get("/{campaign_id}/pareto", response_model=ParetoSet, responses={404: {}, 409: {}})
def get_pareto(campaign_id: CampaignId, svc: ServiceDep) -> ParetoSet:
    """A Pareto campaign's non-dominated trials so far, computed from every metric the history keeps, and
    their hypervolume against the worst value of each metric measured (the reference point returned)."""
    from storetune.tuner.analysis.pareto import pareto_set

    c = _campaign(svc, campaign_id)
    if not c.objective or c.objective.get("kind") != "pareto":
        raise HTTPException(409, f"campaign {campaign_id} has no pareto objective")
    front = pareto_set(svc.history.trials(campaign_id, measurements=True), MultiObjective.from_spec(c.objective))
    objective = Objective(metric=c.objective_metric, direction=c.objective_direction)  # type: ignore[arg-type]
    return ParetoSet(campaign=c.id, objective=objective, objective_spec=c.objective, **front)


@router.get("/{campaign_id}/importance", responses={404: {}, 409: {}})
def get_importance(campaign_id: CampaignId, svc: ServiceDep,
                   seed: Annotated[int, Query(ge=0, description="Seed of the random-forest surrogate.")] = 0) -> Response:
    """Which parameters matter, as `storetune importance --json`: each parameter's OLS coefficients (the
    ATC'18 regression), type-II ANOVA share and random-forest variance share on the succeeded trials, most
    important first; on a replayed table, the same analysis on the whole table and the rank agreement.
    409 while there are too few succeeded trials (the message says how many it needs)."""
    from storetune.tuner.analysis.importance import of_campaign

    _campaign(svc, campaign_id)
    key = ("importance", campaign_id, seed, svc.history.trials_version(campaign_id))
    body = svc.cache.get(key)
    if body is None:
        try:
            body = json.dumps(of_campaign(svc.history, campaign_id, seed=seed), allow_nan=False).encode()
        except ValueError as e:  # too few succeeded trials for the regression, or none yet
            raise HTTPException(409, plain(str(e))) from None
        svc.cache.put(key, body)
    return Response(body, media_type="application/json")


@router.get("/{campaign_id}/convergence", response_model=Convergence, responses={404: {}})
def get_convergence(campaign_id: CampaignId, svc: ServiceDep) -> Response:
    """Best-so-far and each evaluation's value, against evaluations and seconds since the start.
    Computed once per change of the campaign's trials, however many clients poll it."""
    c = _campaign(svc, campaign_id)
    key = ("convergence", campaign_id, svc.history.trials_version(campaign_id))
    body = svc.cache.get(key)
    if body is None:
        columns = campaign_convergence(svc.history, c)
        body = json.dumps({"campaign": c.id, "objective": {"metric": c.objective_metric,
                                                           "direction": c.objective_direction},
                           "budget": c.budget, **columns.to_dict()}, allow_nan=False).encode()
        svc.cache.put(key, body)
    return Response(body, media_type="application/json")


@router.get("/{campaign_id}/report", response_class=HTMLResponse, responses={404: {}})
def campaign_report(campaign_id: CampaignId, svc: ServiceDep,
                    within: Annotated[float, Query(gt=0, le=1, description="Near-optimal share of the best.")] = 0.99
                    ) -> HTMLResponse:
    """The web report of the campaign; while it runs, the page redraws itself every few seconds."""
    from storetune.api.report.page import page
    from storetune.tuner.analysis.report import campaign_data

    _campaign(svc, campaign_id)
    key = ("report-page", campaign_id, within, svc.history.campaign(campaign_id).state,
           svc.history.trials_version(campaign_id))
    body = svc.cache.get(key)
    if body is None:  # built once per change of the campaign, however many people look at it
        body = page(campaign_data(svc.history, campaign_id, within=within), plotly_src="/static/plotly.min.js",
                    live=f"/campaigns/{campaign_id}/report/data?within={within}").encode()
        svc.cache.put(key, body)
    return HTMLResponse(body)


@router.get("/{campaign_id}/report/data", responses={404: {}})
def campaign_report_data(campaign_id: CampaignId, svc: ServiceDep,
                         within: Annotated[float, Query(gt=0, le=1)] = 0.99) -> Response:
    """What the live report redraws: its figures (plotly JSON) and tables, recomputed when a trial changes."""
    from storetune.api.report.page import payload
    from storetune.tuner.analysis.report import campaign_data

    _campaign(svc, campaign_id)
    key = ("report", campaign_id, within, svc.history.campaign(campaign_id).state,
           svc.history.trials_version(campaign_id))
    body = svc.cache.get(key)
    if body is None:
        body = json.dumps(payload(campaign_data(svc.history, campaign_id, within=within))).encode()
        svc.cache.put(key, body)
    return Response(body, media_type="application/json")
