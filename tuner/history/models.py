"""The history's tables (SQLAlchemy 2). Alembic migrations in tuner/migrations create them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint, false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, datetime: DateTime(timezone=True)}


class CampaignRecord(Base):
    """One campaign: space + workload + runner + algorithm + objective + budget + seed."""

    __tablename__ = "campaigns"
    __table_args__ = (Index("ix_campaigns_origin_state", "origin", "state"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]
    # queued | running | finished | interrupted | cancelled | failed (queued and cancelled: the service's)
    state: Mapped[str] = mapped_column(String(16))
    note: Mapped[str | None] = mapped_column(Text)  # why it stopped early, e.g. the space was exhausted
    origin: Mapped[str] = mapped_column(String(16), default="cli", server_default="cli")  # cli | api
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    space_name: Mapped[str] = mapped_column(String(200))
    space_fingerprint: Mapped[str] = mapped_column(String(32), index=True)
    space: Mapped[dict[str, Any]]  # the whole definition, so the history outlives edits of the YAML
    runner: Mapped[str] = mapped_column(String(32))
    runner_settings: Mapped[dict[str, Any]]
    workload_name: Mapped[str] = mapped_column(String(200))
    workload_fingerprint: Mapped[str] = mapped_column(String(32), index=True)
    workload: Mapped[dict[str, Any]]
    device: Mapped[str] = mapped_column(String(200))

    algorithm: Mapped[str] = mapped_column(String(32))
    algorithm_params: Mapped[dict[str, Any]]  # as given
    # every hyperparameter as the algorithm resolved it at creation (None: a campaign older than schema 0008)
    resolved_params: Mapped[dict[str, Any] | None]
    objective_metric: Mapped[str] = mapped_column(String(100))
    objective_direction: Mapped[str] = mapped_column(String(3))
    budget: Mapped[int]
    seed: Mapped[int] = mapped_column(BigInteger)
    repeats: Mapped[int]
    max_repeats: Mapped[int | None]  # adaptive repeats: a challenger is re-measured up to this many runs
    # multi-fidelity search: {"kind": "asha", "rungs": [s, ...], "eta": 3, "budget_s": s or null}; null: whole runs
    fidelity: Mapped[dict[str, Any] | None]
    # a weighted, lexicographic or Pareto objective over several metrics (None: objective_metric alone)
    objective: Mapped[dict[str, Any] | None]
    batch_size: Mapped[int]
    warm_start: Mapped[str] = mapped_column(String(16), default="none", server_default="none")
    fixed: Mapped[dict[str, Any]] = mapped_column(default=dict, server_default="{}")  # parameters pinned by --fix
    comparison_id: Mapped[int | None] = mapped_column(ForeignKey("comparisons.id", ondelete="CASCADE"), index=True)

    driver_host: Mapped[str | None] = mapped_column(String(200))
    driver_pid: Mapped[int | None]
    # where its trials are measured: {"kind": "local"|"ray"} as asked, then what its driver found (the cluster's
    # address, the workers in flight and a cap's note, the resources each measurement holds)
    executor: Mapped[dict[str, Any] | None]

    trials: Mapped[list[TrialRecord]] = relationship(back_populates="campaign", order_by="TrialRecord.number")


class ComparisonRecord(Base):
    """An offline comparison: several algorithms, many seeded campaigns each, on one table."""

    __tablename__ = "comparisons"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]
    state: Mapped[str] = mapped_column(String(16))  # queued | running | finished | interrupted | failed
    note: Mapped[str | None] = mapped_column(Text)
    origin: Mapped[str] = mapped_column(String(16), default="cli", server_default="cli")  # cli | api
    workload_name: Mapped[str] = mapped_column(String(200))
    runner_settings: Mapped[dict[str, Any]]
    settings: Mapped[dict[str, Any]]  # variants, seeds, budget, within, repeats, objective
    results: Mapped[dict[str, Any] | None]  # the summary that `storetune compare --json` prints
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class TrialRecord(Base):
    """One configuration asked in one campaign, and what became of it."""

    __tablename__ = "trials"
    __table_args__ = (
        UniqueConstraint("campaign_id", "number"),
        Index("ix_trials_campaign_status_value", "campaign_id", "status", "value"),
        Index("ix_trials_campaign_status_runs", "campaign_id", "status", "runs"),  # History.evaluations, index-only
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("campaigns.id", ondelete="CASCADE"))
    number: Mapped[int]  # the order of asking within the campaign, from 0
    config: Mapped[dict[str, Any]]
    config_hash: Mapped[str] = mapped_column(String(32), index=True)
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    value: Mapped[float | None] = mapped_column(Float)  # the objective, aggregated over repeats
    runs: Mapped[int] = mapped_column(default=0, server_default="0")  # measurements taken (repeats + re-measurements)
    short_runs: Mapped[int] = mapped_column(default=0, server_default="0")  # of them, runs stopped at a rung
    seed: Mapped[int] = mapped_column(BigInteger)
    retry_of: Mapped[int | None] = mapped_column(ForeignKey("trials.id"))  # the STALE trial this re-runs
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]

    campaign: Mapped[CampaignRecord] = relationship(back_populates="trials")
    measurements: Mapped[list[MeasurementRecord]] = relationship(order_by="MeasurementRecord.repeat")


class MeasurementRecord(Base):
    """The metrics of one run (one repeat) of a trial, with the environment it ran in."""

    __tablename__ = "measurements"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    repeat: Mapped[int]
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    metrics: Mapped[dict[str, Any]]
    env: Mapped[dict[str, Any]]
    duration_s: Mapped[float] = mapped_column(Float)
    node: Mapped[str | None] = mapped_column(String(200))  # the machine that measured it (a Ray node: its host and IP)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # the run interval by interval (runners.series.Series.to_dict: interval_s, ops_per_s, mb_per_s, steady)
    series: Mapped[dict[str, Any] | None]


class FingerprintRecord(Base):
    """A workload's features (Zhang and Bhargava's Table 2), measured from a trace, a traced run on a device or
    fio's own logs; joined to campaigns by ``workload_fingerprint``, the key of ``runners.Workload``."""

    __tablename__ = "fingerprints"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    workload_name: Mapped[str] = mapped_column(String(200))
    workload_fingerprint: Mapped[str] = mapped_column(String(32), index=True)
    workload: Mapped[dict[str, Any]]
    source: Mapped[str] = mapped_column(String(32))  # trace | blktrace | fio-log
    ios: Mapped[int]  # the I/Os the features were computed from
    features: Mapped[dict[str, Any]]
    meta: Mapped[dict[str, Any]] = mapped_column(default=dict, server_default="{}")  # where and how it was measured
