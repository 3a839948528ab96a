"""The history on SQLite and on a real PostgreSQL: schema, migrations and every state change."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text

from storetune.runners import Measurement, Status
from storetune.search_spaces import Config
from storetune.tuner import History
from storetune.tuner.history.schema import make_engine
from storetune.tuner.history.models import Base

CAMPAIGN = dict(
    space_name="s", space_fingerprint="f", space={}, runner="dataset", runner_settings={}, workload_name="w",
    workload_fingerprint="wf", workload={}, device="replay", algorithm="random", algorithm_params={},
    objective_metric="ops", objective_direction="max", budget=3, seed=1, repeats=2, batch_size=1,
)


def test_migrations_build_exactly_the_models(history_url: str):
    history = History(history_url)
    with history.engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert diff == [], "the models changed without a migration: add one (see alembic.ini)"
    History(history_url)  # opening again is a no-op upgrade


def test_a_trial_goes_through_every_state(history_url: str):
    history = History(history_url)
    campaign = history.create_campaign(**CAMPAIGN)
    a, b = history.add_trials(campaign.id, [Config(fs="ext4"), Config(fs="xfs")], seeds=[2**40, 5])
    assert (a.number, b.number, a.status) == (0, 1, "PENDING")
    history.start_trials([a.id])
    history.add_measurement(a.id, 0, Measurement(Status.SUCCEEDED, {"ops": 10.0}, env={"kernel": "6.1"}))
    history.add_measurement(a.id, 1, Measurement(Status.SUCCEEDED, {"ops": 12.0}, env={"kernel": "6.1"}))
    history.finish_trial(a.id, Status.SUCCEEDED, 11.0, None)
    history.start_trials([b.id])
    stale = history.mark_stale(campaign.id, "driver died")
    assert [t.id for t in stale] == [b.id]
    (retry,) = history.add_trials(campaign.id, [Config(fs="xfs")], seeds=[5], retry_of=[b.id])
    assert retry.number == 2
    trials = History(history_url).trials(campaign.id, measurements=True)  # a second reader sees it all
    assert [(t.number, t.status, t.value) for t in trials] == [(0, "SUCCEEDED", 11.0), (1, "STALE", None), (2, "PENDING", None)]
    assert trials[0].seed == 2**40 and trials[0].config == {"fs": "ext4"}
    assert [m.metrics["ops"] for m in trials[0].measurements] == [10.0, 12.0]
    assert trials[1].reason == "driver died" and trials[2].retry_of == b.id


def test_campaign_state(history_url: str):
    history = History(history_url)
    campaign = history.create_campaign(**CAMPAIGN)
    history.claim(campaign.id, "host", 123)
    history.finish_campaign(campaign.id, "finished", "the search space was exhausted after 3 trials")
    record = history.campaign(campaign.id)
    assert (record.state, record.driver_pid, record.finished_at is not None) == ("finished", 123, True)
    assert [c.id for c in history.campaigns()] == [campaign.id]


def test_sqlite_runs_in_wal_mode(sqlite_url: str):
    with History(sqlite_url).engine.connect() as c:
        assert c.execute(text("PRAGMA journal_mode")).scalar() == "wal"


def test_a_plain_postgresql_url_uses_psycopg_3():
    assert make_engine("postgresql://u@localhost/db").url.drivername == "postgresql+psycopg"


def test_an_unknown_campaign_is_a_lookup_error(sqlite_url: str):
    import pytest

    with pytest.raises(LookupError, match="no campaign 42 in sqlite"):
        History(sqlite_url).campaign(42)


def _lost(message: str = "server closed the connection unexpectedly"):
    """The error SQLAlchemy raises when PostgreSQL goes away mid-call (psycopg's, wrapped)."""
    import psycopg
    from sqlalchemy.exc import OperationalError

    return OperationalError("SELECT 1", {}, psycopg.OperationalError(message))


def test_a_call_that_loses_its_connection_is_made_again_unless_its_commit_may_have_landed(monkeypatch):
    """What the history's retries promise (tuner/schema.py): a call cut off before its COMMIT is made again; one
    cut off during its COMMIT is made again only if it can check what the lost transaction left (it takes
    ``retry``, and is told it is a retry); any other raises rather than writing twice."""
    from storetune.tuner.history.schema import commit_started, retried

    monkeypatch.setenv("STORETUNE_DB_RETRY_S", "5")
    calls: list[dict] = []

    def before_commit():
        calls.append({})
        if len(calls) == 1:
            raise _lost()
        return "done"

    assert retried(before_commit, lambda: 5.0)() == "done" and len(calls) == 2

    calls.clear()

    def during_commit():
        calls.append({})
        commit_started(None)
        raise _lost()

    with pytest.raises(Exception, match="server closed the connection"):
        retried(during_commit, lambda: 5.0)()
    assert len(calls) == 1  # not made again: it may have committed

    calls.clear()

    def checks(retry: bool = False):
        calls.append({"retry": retry})
        if len(calls) == 1:
            commit_started(None)
            raise _lost()
        return "checked"

    assert retried(checks, lambda: 5.0)() == "checked" and calls == [{"retry": False}, {"retry": True}]

    calls.clear()

    def sqlite_locked():
        from sqlalchemy.exc import OperationalError
        import sqlite3

        calls.append({})
        raise OperationalError("UPDATE", {}, sqlite3.OperationalError("database is locked"))

    with pytest.raises(Exception, match="database is locked"):
        retried(sqlite_locked, lambda: 5.0)()
    assert len(calls) == 1  # SQLite waited its busy timeout already


def test_retried_writes_check_what_a_lost_commit_left(history_url):
    """The writes that add rows, and the transitions, asked again as a retry after a COMMIT that landed: no
    second trial, no second measurement, and the transition answers that it changed."""
    history = History(history_url)
    campaign = history.create_campaign(**CAMPAIGN)
    configs, seeds = [Config({"a": 1}), Config({"a": 2})], [11, 12]
    first = history.add_trials(campaign.id, configs, seeds)
    again = history.add_trials.__wrapped__(history, campaign.id, configs, seeds, retry=True)
    assert [t.id for t in again] == [t.id for t in first] and history.count_trials(campaign.id) == 2
    m = Measurement(Status.SUCCEEDED, {"ops": 1.0})
    history.add_measurement(first[0].id, 0, m)
    history.add_measurement.__wrapped__(history, first[0].id, 0, m, retry=True)
    assert len(history.trial(campaign.id, 0).measurements) == 1 and history.trial(campaign.id, 0).runs == 1
    assert history.transition(campaign.id, ["running"], state="finished")
    assert not history.transition(campaign.id, ["running"], state="finished")  # a second caller did not win
    assert history.transition.__wrapped__(history, campaign.id, ["running"], retry=True, state="finished")
    assert history.delete_campaign(campaign.id, ["finished"])
    assert history.delete_campaign.__wrapped__(history, campaign.id, ["finished"], retry=True)
