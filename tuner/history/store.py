"""The one SQL history of every campaign, trial and measurement.

A SQLite file by default (WAL, so readers such as ``storetune trials`` never block the campaign,
whose driver is the only writer); PostgreSQL when the URL says so. Every state change is its own
transaction, so a process killed at any instant leaves the history consistent.

Writers migrate the schema when they open the history, under a lock (several processes may open a
new history at once); readers never migrate: on a schema that is missing, older or newer than this
code they refuse with one line (``SchemaError``) that says what to do.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import case, delete, event, func, insert, select, update
from sqlalchemy.orm import Session, selectinload, sessionmaker

from storetune.runners import Measurement, Status
from storetune.search_spaces import Config, config_hash
from storetune.tuner.history.models import (
    CampaignRecord, FingerprintRecord, MeasurementRecord, TrialRecord, utcnow,
)
from storetune.tuner.history.schema import (
    check_schema, commit_started, make_engine, refuse_a_missing_file, retried, retry_bound, retrying, shown_url,
    upgrade_schema,
)
from storetune.tuner.history.comparisons import ComparisonRecords
from storetune.tuner.history.views import CampaignView, MeasurementView, TrialView, view


@retrying
class History(ComparisonRecords):
    """Reads and writes the history at ``url`` (an SQLAlchemy URL).

    ``migrate=True`` (writers) brings the schema to the newest revision first, under a lock;
    ``migrate=False`` (readers) changes nothing and raises ``SchemaError`` unless the schema is
    exactly the newest (a SQLite file that does not exist is not created).

    Every call rides out a restart of a PostgreSQL server: connections are checked before use (the
    engine's ``pool_pre_ping``) and a call that loses its connection is made again with backoff for up
    to ``STORETUNE_DB_RETRY_S`` seconds (``schema.retrying``); the calls that add rows check first
    whether a lost transaction had committed them, so a retry never records a trial twice."""

    def __init__(self, url: str, *, migrate: bool = True):
        if not migrate:
            refuse_a_missing_file(url)
        self.engine = make_engine(url)
        self.url = shown_url(self.engine.url)
        try:
            if migrate:
                retried(upgrade_schema, retry_bound)(self.engine)
            else:
                retried(check_schema, retry_bound)(self.engine)
        except BaseException:
            self.engine.dispose()
            raise
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        event.listen(self._sessions, "before_commit", commit_started)  # a lost COMMIT is retried with care

    def session(self) -> Session:
        return self._sessions()

    def close(self) -> None:
        self.engine.dispose()

    # --- campaigns --------------------------------------------------------------------------------
    def create_campaign(self, state: str = "running", **fields: Any) -> CampaignView:
        with self.session() as s, s.begin():
            record = CampaignRecord(state=state, **fields)
            s.add(record)
            s.flush()
            return view(CampaignView, record)

    def campaign(self, campaign_id: int) -> CampaignView:
        with self.session() as s:
            record = s.get(CampaignRecord, campaign_id)
            if record is None:
                raise LookupError(f"no campaign {campaign_id} in {self.url}")
            return view(CampaignView, record)

    def campaigns(self, *, offset: int = 0, limit: int | None = None, origin: str | None = None,
                  states: Sequence[str] = ()) -> list[CampaignView]:
        query = self._campaign_filter(select(CampaignRecord), origin, states).order_by(CampaignRecord.id)
        with self.session() as s:
            return [view(CampaignView, r) for r in s.scalars(query.offset(offset).limit(limit))]

    def count_campaigns(self, *, origin: str | None = None, states: Sequence[str] = ()) -> int:
        query = self._campaign_filter(select(func.count(CampaignRecord.id)), origin, states)
        with self.session() as s:
            return int(s.scalar(query) or 0)

    @staticmethod
    def _campaign_filter(query: Any, origin: str | None, states: Sequence[str]) -> Any:
        if origin is not None:
            query = query.where(CampaignRecord.origin == origin)
        if states:
            query = query.where(CampaignRecord.state.in_(list(states)))
        return query

    def claim(self, campaign_id: int, host: str, pid: int) -> None:
        """Record which process drives the campaign now."""
        self._update_campaign(campaign_id, driver_host=host, driver_pid=pid, state="running", finished_at=None)

    def finish_campaign(self, campaign_id: int, state: str, note: str | None = None) -> None:
        self._update_campaign(campaign_id, state=state, note=note, finished_at=utcnow() if state == "finished" else None)

    def transition(self, campaign_id: int, from_states: Sequence[str], retry: bool = False, **values: Any) -> bool:
        """Change the campaign only if its state is one of ``from_states``, atomically (two service
        processes, or a request and a worker, never both win); returns whether it changed. A retry after a
        lost COMMIT finds the row as it asked for it, and answers that it changed."""
        return self._transition(CampaignRecord, campaign_id, from_states, values, retry)

    def _transition(self, table: Any, row_id: int, from_states: Sequence[str], values: dict[str, Any],
                    retry: bool = False) -> bool:
        with self.session() as s, s.begin():
            result = s.execute(update(table).where(table.id == row_id, table.state.in_(list(from_states)))
                               .values(**values))
            if result.rowcount or not retry:
                return bool(result.rowcount)
            row = s.get(table, row_id)
            return row is not None and all(getattr(row, k) == v for k, v in values.items())

    def set_executor(self, campaign_id: int, executor: dict[str, Any]) -> None:
        """Record where the campaign's trials are measured (its driver's executor, as it found the cluster)."""
        self._update_campaign(campaign_id, executor=dict(executor))

    def delete_campaign(self, campaign_id: int, states: Sequence[str], retry: bool = False) -> bool:
        """Delete the campaign with its trials and their measurements, only if its state is one of ``states``
        (never one that a driver may still write to); returns whether it was deleted (a retry after a lost
        COMMIT finds it gone)."""
        with self.session() as s, s.begin():
            found = s.scalar(select(CampaignRecord.id).where(CampaignRecord.id == campaign_id,
                                                            CampaignRecord.state.in_(list(states)))
                             .with_for_update())
            if found is None:
                return retry and s.get(CampaignRecord, campaign_id) is None
            trials = select(TrialRecord.id).where(TrialRecord.campaign_id == campaign_id).scalar_subquery()
            s.execute(delete(MeasurementRecord).where(MeasurementRecord.trial_id.in_(trials)))
            # a trial points at the STALE trial it re-runs: the pointers go first, so no row refers to a deleted one
            s.execute(update(TrialRecord).where(TrialRecord.campaign_id == campaign_id).values(retry_of=None))
            s.execute(delete(TrialRecord).where(TrialRecord.campaign_id == campaign_id))
            s.execute(delete(CampaignRecord).where(CampaignRecord.id == campaign_id))
            return True

    def cancel_requested(self, campaign_id: int) -> bool:
        with self.session() as s:
            return bool(s.scalar(select(CampaignRecord.cancel_requested).where(CampaignRecord.id == campaign_id)))

    def set_objective(self, campaign_id: int, objective: dict[str, Any]) -> None:
        """Record a campaign's objective over several metrics again, once its reference is known."""
        self._update_campaign(campaign_id, objective=dict(objective))

    def extend_campaign(self, campaign_id: int, budget: int, algorithm_params: dict[str, Any]) -> None:
        """A larger budget (and the parameters that make the algorithm fill it): a finished grid
        campaign can grow when its sweep is extended. Trials already measured stay and count."""
        record = self.campaign(campaign_id)
        if budget < record.budget:
            raise ValueError(f"campaign {campaign_id}: a budget can grow, not shrink ({record.budget} -> {budget})")
        resolved = None if record.resolved_params is None else {**record.resolved_params, **algorithm_params}
        self._update_campaign(campaign_id, budget=budget, algorithm_params=dict(algorithm_params),
                              resolved_params=resolved)  # a resume runs the resolved ones

    def _update_campaign(self, campaign_id: int, **values: Any) -> None:
        with self.session() as s, s.begin():
            s.execute(update(CampaignRecord).where(CampaignRecord.id == campaign_id).values(**values))

    def prior_observations(self, campaign: CampaignView, also_spaces: Sequence[str | None] = ()
                           ) -> list[tuple[dict[str, Any], float | None, Status]]:
        """What earlier campaigns measured on the same space (or one of ``also_spaces``, fingerprints an
        older StoreTune gave the same space), workload and device: one entry per configuration (the mean
        of its succeeded trials, else its last outcome), for warm starts."""
        spaces = [campaign.space_fingerprint, *filter(None, also_spaces)]
        query = (
            select(TrialRecord.config_hash, TrialRecord.config, TrialRecord.status, TrialRecord.value)
            .join(CampaignRecord)
            .where(
                CampaignRecord.id < campaign.id,
                CampaignRecord.space_fingerprint.in_(spaces),
                CampaignRecord.workload_fingerprint == campaign.workload_fingerprint,
                CampaignRecord.device == campaign.device,
                CampaignRecord.objective_metric == campaign.objective_metric,
                TrialRecord.status.in_([s.value for s in Status if s.terminal]),
            )
            .order_by(TrialRecord.id)
        )
        by_config: dict[str, list[Any]] = {}
        with self.session() as s:
            for key, config, status, value in s.execute(query):
                by_config.setdefault(key, []).append((config, status, value))
        out = []
        for rows in by_config.values():
            values = [v for _, st, v in rows if st == Status.SUCCEEDED.value and v is not None]
            if values:
                out.append((rows[0][0], sum(values) / len(values), Status.SUCCEEDED))
            else:
                out.append((rows[-1][0], None, Status(rows[-1][1])))
        return out

    # --- workload fingerprints ----------------------------------------------------------------------
    def add_fingerprint(self, *, workload_name: str, workload_fingerprint: str, workload: dict[str, Any], source: str,
                        ios: int, features: dict[str, Any], meta: dict[str, Any] | None = None) -> int:
        """Record a workload's features; the newest of a workload's fingerprints is the one used."""
        with self.session() as s, s.begin():
            record = FingerprintRecord(workload_name=workload_name, workload_fingerprint=workload_fingerprint,
                                       workload=workload, source=source, ios=int(ios), features=features,
                                       meta=dict(meta or {}))
            s.add(record)
            s.flush()
            return record.id

    def fingerprints(self) -> dict[str, dict[str, Any]]:
        """Workload fingerprint -> its newest fingerprint (name, workload, source, ios, features, meta)."""
        query = select(FingerprintRecord).order_by(FingerprintRecord.id)
        with self.session() as s:
            return {r.workload_fingerprint: dict(id=r.id, workload_name=r.workload_name, workload=r.workload,
                                                 source=r.source, ios=r.ios, features=r.features, meta=r.meta,
                                                 created_at=r.created_at)
                    for r in s.scalars(query)}

    def workload_trials(self, workload_fingerprints: Sequence[str]
                        ) -> list[tuple[CampaignView, str, dict[str, Any], float]]:
        """(campaign, config hash, configuration, value) of every succeeded trial of the campaigns that ran
        one of these workloads: what they measured, for recommendations."""
        if not workload_fingerprints:
            return []
        with self.session() as s:
            campaigns = {r.id: view(CampaignView, r) for r in s.scalars(
                select(CampaignRecord).where(CampaignRecord.workload_fingerprint.in_(list(workload_fingerprints))))}
            if not campaigns:
                return []
            query = (select(TrialRecord.campaign_id, TrialRecord.config_hash, TrialRecord.config, TrialRecord.value)
                     .where(TrialRecord.campaign_id.in_(list(campaigns)), TrialRecord.status == Status.SUCCEEDED.value,
                            TrialRecord.value.is_not(None))
                     .order_by(TrialRecord.id))
            return [(campaigns[c], h, config, float(v)) for c, h, config, v in s.execute(query)]

    def write_campaign(self, fields: dict[str, Any], trials: Sequence[TrialView], retry: bool = False) -> int:
        """A finished campaign with all its trials and measurements, in one transaction (the
        offline comparison runs its campaigns in memory and records each as it completes). A comparison's
        seed is written once: a retry finds the one a lost transaction committed."""
        with self.session() as s, s.begin():
            if retry and fields.get("comparison_id") is not None:
                candidates = s.execute(select(CampaignRecord.id, CampaignRecord.algorithm_params).where(
                    CampaignRecord.comparison_id == fields["comparison_id"],
                    CampaignRecord.algorithm == fields["algorithm"], CampaignRecord.seed == fields["seed"]))
                found = [i for i, params in candidates if params == fields["algorithm_params"]]
                if found:
                    return found[0]
            record = CampaignRecord(**fields)
            s.add(record)
            s.flush()
            rows = [
                dict(campaign_id=record.id, number=t.number, config=t.config, config_hash=t.config_hash,
                     status=t.status, reason=t.reason, value=t.value, seed=t.seed, runs=t.runs,
                     short_runs=t.short_runs)
                for t in trials
            ]
            if rows:
                ids = s.scalars(insert(TrialRecord).returning(TrialRecord.id, sort_by_parameter_order=True), rows).all()
                measurements = [
                    dict(trial_id=i, repeat=m.repeat, status=m.status, reason=m.reason, metrics=dict(m.metrics),
                         env=dict(m.env), duration_s=m.duration_s, node=m.node, series=m.series)
                    for i, t in zip(ids, trials) for m in (t.measurements or ())
                ]
                if measurements:
                    s.execute(insert(MeasurementRecord), measurements)
            return record.id

    # --- trials -----------------------------------------------------------------------------------
    def trials(self, campaign_id: int, *, measurements: bool = False, offset: int = 0,
               limit: int | None = None) -> list[TrialView]:
        """The campaign's trials in the order they were asked (a page of them with offset/limit)."""
        if measurements:
            query = (select(TrialRecord).where(TrialRecord.campaign_id == campaign_id).order_by(TrialRecord.number)
                     .options(selectinload(TrialRecord.measurements)))
            with self.session() as s:
                return [_trial_view(t, True) for t in s.scalars(query.offset(offset).limit(limit))]
        # without measurements, plain rows: the ORM's identity map costs more than the rows (10,000 in a report)
        query = (select(*TrialRecord.__table__.columns).where(TrialRecord.campaign_id == campaign_id)
                 .order_by(TrialRecord.number))
        with self.session() as s:
            return [view(TrialView, row, measurements=None) for row in s.execute(query.offset(offset).limit(limit))]

    def count_trials(self, campaign_id: int) -> int:
        with self.session() as s:
            return int(s.scalar(select(func.count(TrialRecord.id)).where(TrialRecord.campaign_id == campaign_id)) or 0)

    def status_counts(self, campaign_id: int) -> dict[str, int]:
        """Status -> number of trials, counted by the database."""
        query = (select(TrialRecord.status, func.count(TrialRecord.id))
                 .where(TrialRecord.campaign_id == campaign_id).group_by(TrialRecord.status))
        with self.session() as s:
            return {status: int(n) for status, n in s.execute(query)}

    def progress(self, campaign_id: int, repeats: int) -> tuple[dict[str, int], int]:
        """``status_counts`` and ``evaluations`` in one query, which reads the (campaign, status, runs) index alone."""
        extra = case((TrialRecord.runs > repeats, TrialRecord.runs - repeats), else_=0)
        query = (select(TrialRecord.status, func.count(TrialRecord.id), func.sum(extra))
                 .where(TrialRecord.campaign_id == campaign_id).group_by(TrialRecord.status))
        terminal = {s.value for s in Status if s.terminal}
        with self.session() as s:
            rows = s.execute(query).all()
        counts = {status: int(n) for status, n, _ in rows}
        return counts, sum(int(n) + int(more or 0) for status, n, more in rows if status in terminal)

    def evaluations(self, campaign_id: int, repeats: int) -> int:
        """``analysis.evaluations`` counted by the database: finished trials and adaptive re-measurements."""
        return self.progress(campaign_id, repeats)[1]

    def best_trial(self, campaign_id: int, direction: str, most_measured: bool = False) -> TrialView | None:
        """The succeeded trial with the best value (ties: the earliest), among those measured the most
        times with ``most_measured`` (``analysis.best_trial``'s rule, in SQL), with its measurements: the
        first row of the (campaign, status, value) index, not a sort of the campaign's trials."""
        value = TrialRecord.value if direction == "min" else TrialRecord.value.desc()
        scored = (TrialRecord.campaign_id == campaign_id, TrialRecord.status == Status.SUCCEEDED.value,
                  TrialRecord.value.is_not(None))
        whole = TrialRecord.runs - TrialRecord.short_runs
        most = (whole == select(func.max(whole)).where(*scored).scalar_subquery(),) \
            if most_measured else ()
        query = (select(TrialRecord).where(*scored, *most)
                 .order_by(value, TrialRecord.number).limit(1).options(selectinload(TrialRecord.measurements)))
        with self.session() as s:
            record = s.scalar(query)
            return None if record is None else _trial_view(record, True)

    def trials_version(self, campaign_id: int) -> tuple[Any, ...]:
        """What changes whenever a trial of the campaign is added or changes state (every change
        sets a time or adds a row): a cheap key for caching what is computed from all its trials."""
        query = select(func.count(TrialRecord.id), func.max(TrialRecord.started_at), func.max(TrialRecord.finished_at),
                       func.count(TrialRecord.finished_at)).where(TrialRecord.campaign_id == campaign_id)
        with self.session() as s:
            return tuple(s.execute(query).one())

    def outcomes(self, campaign_id: int) -> list[tuple[int, str, float | None, Any, Any]]:
        """(number, status, value, started_at, finished_at) of every trial, in order: what convergence
        needs, without reading configurations."""
        query = (select(TrialRecord.number, TrialRecord.status, TrialRecord.value, TrialRecord.started_at,
                        TrialRecord.finished_at)
                 .where(TrialRecord.campaign_id == campaign_id).order_by(TrialRecord.number))
        with self.session() as s:
            return [tuple(row) for row in s.execute(query)]  # type: ignore[misc]

    def nodes(self, trial_ids: Iterable[int]) -> dict[int, list[str]]:
        """Trial id -> the machines that measured it, in the order of its measurements."""
        ids = list(set(trial_ids))
        if not ids:
            return {}
        out: dict[int, list[str]] = {}
        query = (select(MeasurementRecord.trial_id, MeasurementRecord.node)
                 .where(MeasurementRecord.trial_id.in_(ids), MeasurementRecord.node.is_not(None))
                 .order_by(MeasurementRecord.trial_id, MeasurementRecord.repeat))
        with self.session() as s:
            for trial, node in s.execute(query):
                if node not in out.setdefault(trial, []):
                    out[trial].append(node)
        return out

    def numbers(self, trial_ids: Iterable[int]) -> dict[int, int]:
        """Trial id -> its number in its campaign (trials point at the trial they re-run by id)."""
        ids = list(set(trial_ids))
        if not ids:
            return {}
        with self.session() as s:
            return {i: n for i, n in s.execute(select(TrialRecord.id, TrialRecord.number).where(TrialRecord.id.in_(ids)))}

    def trial(self, campaign_id: int, number: int) -> TrialView:
        """Trial ``number`` of the campaign, with every repeat's measurement."""
        query = (select(TrialRecord).where(TrialRecord.campaign_id == campaign_id, TrialRecord.number == number)
                 .options(selectinload(TrialRecord.measurements)))
        with self.session() as s:
            record = s.scalar(query)
            if record is None:
                raise LookupError(f"campaign {campaign_id} has no trial {number}")
            return _trial_view(record, True)

    def add_trials(
        self, campaign_id: int, configs: Sequence[Config], seeds: Sequence[int], retry_of: Iterable[int | None] = (),
        retry: bool = False,
    ) -> list[TrialView]:
        """New PENDING trials, numbered after the campaign's last one. A retry whose lost transaction had
        committed them finds them as the campaign's last trials and returns those."""
        retries = list(retry_of) or [None] * len(configs)
        hashes = [config_hash(c) for c in configs]
        with self.session() as s, s.begin():
            if retry and configs:
                last_ones = list(s.scalars(select(TrialRecord).where(TrialRecord.campaign_id == campaign_id)
                                           .order_by(TrialRecord.number.desc()).limit(len(configs))))[::-1]
                if [(t.config_hash, t.seed, t.retry_of, t.status) for t in last_ones] == \
                        [(h, seed, r, Status.PENDING.value) for h, seed, r in zip(hashes, seeds, retries)]:
                    return [_trial_view(t, False) for t in last_ones]
            last = s.scalar(select(func.max(TrialRecord.number)).where(TrialRecord.campaign_id == campaign_id))
            start = -1 if last is None else last
            records = [
                TrialRecord(
                    campaign_id=campaign_id,
                    number=start + 1 + i,
                    config=config.to_dict(),
                    config_hash=key,
                    status=Status.PENDING.value,
                    seed=seed,
                    retry_of=rerun,
                )
                for i, (config, key, seed, rerun) in enumerate(zip(configs, hashes, seeds, retries))
            ]
            s.add_all(records)
            s.flush()
            return [_trial_view(r, False) for r in records]

    def start_trials(self, trial_ids: Sequence[int]) -> None:
        with self.session() as s, s.begin():
            s.execute(
                update(TrialRecord)
                .where(TrialRecord.id.in_(trial_ids))
                .values(status=Status.RUNNING.value, started_at=utcnow())
            )

    def add_measurement(self, trial_id: int, repeat: int, m: Measurement, retry: bool = False) -> None:
        """Record one run of a trial (once: a retry whose lost transaction had committed it finds it)."""
        with self.session() as s, s.begin():
            if retry and s.scalar(select(MeasurementRecord.id).where(MeasurementRecord.trial_id == trial_id,
                                                                      MeasurementRecord.repeat == repeat)):
                return
            s.execute(update(TrialRecord).where(TrialRecord.id == trial_id).values(
                runs=TrialRecord.runs + 1, short_runs=TrialRecord.short_runs + int(m.status is Status.STOPPED)))
            s.add(
                MeasurementRecord(
                    trial_id=trial_id,
                    repeat=repeat,
                    status=m.status.value,
                    reason=m.reason,
                    metrics=dict(m.metrics),
                    env=dict(m.env),
                    duration_s=m.duration_s,
                    node=m.node,
                    series=None if m.series is None else m.series.to_dict(),
                )
            )

    def finish_trial(self, trial_id: int, status: Status, value: float | None, reason: str | None) -> None:
        with self.session() as s, s.begin():
            s.execute(
                update(TrialRecord)
                .where(TrialRecord.id == trial_id)
                .values(status=status.value, value=value, reason=reason, finished_at=utcnow())
            )

    def mark_stale(self, campaign_id: int, reason: str) -> list[TrialView]:
        """Trials left RUNNING by a driver that died become STALE; returns them."""
        running = [t for t in self.trials(campaign_id) if t.status == Status.RUNNING.value]
        if running:
            with self.session() as s, s.begin():
                s.execute(
                    update(TrialRecord)
                    .where(TrialRecord.id.in_([t.id for t in running]))
                    .values(status=Status.STALE.value, reason=reason, finished_at=utcnow())
                )
        return running


def _trial_view(record: TrialRecord, measurements: bool) -> TrialView:
    ms = tuple(view(MeasurementView, m) for m in record.measurements) if measurements else None
    return view(TrialView, record, measurements=ms)
