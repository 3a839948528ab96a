"""The schema's migrations: processes that open a new history at once, readers that never migrate,
and `storetune db upgrade`, on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import alembic.command
import alembic.config
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from conftest import BACKENDS, ROOT, run_cli
from storetune.tuner import History
from storetune.tuner.history.models import Base
from storetune.tuner.history.schema import MIGRATIONS, SchemaError, make_engine, schema_revision, upgrade_schema

HEAD = "0012"
OPENERS = 4
ROUNDS = 12  # the WAL switch failed about one round in 40 before it was retried: 12 rounds of 4 catch it often

# One process of the race. It imports StoreTune first; then, for each new history, it says it is
# ready and waits for the start file, so the processes open that history within a millisecond of
# each other (imports alone would spread them over a second).
OPENER = """
import os, sys, time, traceback
from pathlib import Path
from storetune.tuner import History
folder, urls = Path(sys.argv[1]), sys.argv[2:]
failed = False
for i, url in enumerate(urls):
    (folder / f"ready-{i}-{os.getpid()}").touch()
    while not (folder / f"go-{i}").exists():
        time.sleep(0.0005)
    try:
        History(url).close()
    except Exception as e:
        failed = True
        print(f"round {i}: {type(e).__name__}: {str(e).splitlines()[0]}")
sys.exit(1 if failed else 0)
"""


@pytest.fixture(params=BACKENDS)
def new_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """Makes new, empty databases: SQLite files, or PostgreSQL databases this test creates on the
    private server and drops after it (it touches nothing else there)."""
    if request.param == "sqlite":
        numbers = iter(range(10**6))
        yield lambda: f"sqlite:///{tmp_path / f'new-{next(numbers)}.sqlite'}"
        return
    server = make_url(request.getfixturevalue("postgres_url"))
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    created: list[str] = []

    def new() -> str:
        name = f"storetune_test_{uuid.uuid4().hex[:16]}"
        with admin.connect() as c:
            c.exec_driver_sql(f'CREATE DATABASE "{name}"')
        created.append(name)
        return server.set(database=name).render_as_string(hide_password=False)

    try:
        yield new
    finally:
        with admin.connect() as c:
            for name in created:
                c.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def test_processes_that_open_a_new_history_at_once_all_succeed(new_database, tmp_path: Path):
    """Two processes used to crash here (SQLite: `table campaigns already exists`; PostgreSQL: a
    UniqueViolation of pg_type): both ran the migrations. Now they take turns under a lock."""
    urls = [new_database() for _ in range(ROUNDS)]
    openers = [subprocess.Popen([sys.executable, "-c", OPENER, str(tmp_path), *urls], cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for _ in range(OPENERS)]
    try:
        for i in range(ROUNDS):
            deadline = time.monotonic() + 120
            while len(list(tmp_path.glob(f"ready-{i}-*"))) < OPENERS:
                assert time.monotonic() < deadline, "the openers did not get ready"
                assert all(p.poll() is None for p in openers), openers[0].communicate()[0]
                time.sleep(0.01)
            (tmp_path / f"go-{i}").touch()
        outputs = [p.communicate(timeout=120)[0] for p in openers]
    finally:
        for p in openers:
            p.kill()
    assert [p.returncode for p in openers] == [0] * OPENERS, "\n".join(outputs)
    for url in urls:
        history = History(url, migrate=False)  # a reader: it refuses any schema but the newest
        with history.engine.connect() as connection:
            assert schema_revision(connection) == HEAD
            assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        history.close()


def test_a_writer_that_finds_the_newest_schema_runs_no_migration(history_url: str, monkeypatch):
    engine = make_engine(history_url)
    assert upgrade_schema(engine) == (None, HEAD)

    def upgrade(*_args, **_kwargs):
        raise AssertionError("a migration ran on a schema at its newest revision")

    monkeypatch.setattr(alembic.command, "upgrade", upgrade)
    assert upgrade_schema(engine) == (HEAD, HEAD)
    History(history_url).close()
    engine.dispose()


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_a_reader_refuses_an_old_schema_until_db_upgrade(history_url: str):
    engine = make_engine(history_url)
    with engine.begin() as connection:  # a history an older StoreTune made
        config = alembic.config.Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = connection
        alembic.command.upgrade(config, "0003")

    line = one_error_line(run_cli("campaigns", db=history_url))
    assert f"schema revision 0003, older than this StoreTune's {HEAD}" in line and "`storetune db upgrade`" in line
    with pytest.raises(SchemaError, match="storetune db upgrade"):
        History(history_url, migrate=False)
    with engine.connect() as connection:
        assert schema_revision(connection) == "0003"  # the readers changed nothing

    upgraded = run_cli("db", "upgrade", db=history_url, check=True)
    assert f"schema revision 0003 -> {HEAD}" in upgraded.stdout
    assert run_cli("campaigns", db=history_url, check=True).returncode == 0
    assert f"schema revision {HEAD}, already the newest" in run_cli("db", "upgrade", db=history_url, check=True).stdout
    engine.dispose()


def test_a_reader_of_a_file_that_does_not_exist_creates_nothing(tmp_path: Path):
    path = tmp_path / "typo" / "history.sqlite"
    line = one_error_line(run_cli("trials", "1", db=f"sqlite:///{path}"))
    assert f"no history at sqlite:///{path}: the file does not exist" in line
    assert not path.parent.exists()


def test_a_reader_of_an_empty_database_says_there_is_no_history(history_url: str):
    engine = make_engine(history_url)
    with engine.connect():  # the database exists (SQLite: an empty file), with no schema in it
        pass
    with pytest.raises(SchemaError, match=r"^no history at .*: the database has no StoreTune schema .*storetune db upgrade"):
        History(history_url, migrate=False)
    engine.dispose()


def test_a_schema_newer_than_the_code_is_refused_by_readers_and_writers(history_url: str):
    History(history_url).close()
    engine = make_engine(history_url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    newer = f"schema revision 0099, newer than this StoreTune knows (its newest is {HEAD}): upgrade StoreTune"
    for migrate in (True, False):
        with pytest.raises(SchemaError, match=re.escape(newer)):
            History(history_url, migrate=migrate)
    assert newer in one_error_line(run_cli("db", "upgrade", db=history_url))
    engine.dispose()


def _downgrade(history_url: str, revision: str):
    """The history's schema taken back to ``revision``; the engine, to dispose of when done."""
    engine = make_engine(history_url)
    with engine.connect() as connection:
        if connection.dialect.name == "sqlite":  # a batch downgrade copies tables: no cascades meanwhile
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        connection.commit()
        config = alembic.config.Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = connection
        alembic.command.downgrade(config, revision)
        connection.commit()
    return engine


def test_upgrading_to_adaptive_repeats_counts_the_runs_trials_already_have(history_url: str, bdbc: Path):
    from storetune.tuner import Campaign, CampaignSpec

    history = History(history_url)
    spec = CampaignSpec(runner="dataset", runner_settings={"dataset": [str(bdbc)]}, budget=4, repeats=3)
    campaign_id = Campaign.create(history, spec).id
    Campaign.resume(history, campaign_id).run()
    history.close()
    engine = _downgrade(history_url, "0004")  # back to a history written before trials counted their runs
    upgraded = run_cli("db", "upgrade", db=history_url, check=True)
    assert f"schema revision 0004 -> {HEAD}" in upgraded.stdout
    history = History(history_url, migrate=False)
    trials = history.trials(campaign_id, measurements=True)
    assert [t.runs for t in trials] == [len(t.measurements) for t in trials] == [3] * 4
    assert history.campaign(campaign_id).max_repeats is None
    history.close()
    engine.dispose()


def test_upgrading_to_short_runs_counts_each_trial_s_runs_stopped_at_a_rung(history_url: str, tmp_path: Path):
    """A history whose ASHA campaign promoted stopped runs, from before trials counted their short runs: the upgrade
    counts them from the measurements, so the most-measured rule counts whole runs at once."""
    from test_fidelity import _series_table

    from storetune.tuner import Campaign, CampaignSpec

    history = History(history_url)
    spec = CampaignSpec(runner="dataset", runner_settings={"dataset": [str(_series_table(tmp_path / "t.csv"))]},
                        fidelity="asha", burn_in=0, guard=0, budget=90, seed=3)
    campaign_id = Campaign.create(history, spec).id
    Campaign.resume(history, campaign_id).run()
    history.close()
    engine = _downgrade(history_url, "0011")
    assert f"schema revision 0011 -> {HEAD}" in run_cli("db", "upgrade", db=history_url, check=True).stdout
    history = History(history_url, migrate=False)
    trials = history.trials(campaign_id, measurements=True)
    assert any(t.short_runs and t.status == "SUCCEEDED" for t in trials)
    assert [t.short_runs for t in trials] == [sum(m.status == "STOPPED" for m in t.measurements) for t in trials]
    history.close()
    engine.dispose()
