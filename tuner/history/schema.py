"""Opening a history's database: its URL, the engine (SQLite in WAL mode, or PostgreSQL), and its
Alembic schema, migrated by writers under a lock and only checked by readers."""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import alembic.command
import alembic.config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, event, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, InterfaceError, OperationalError

log = logging.getLogger(__name__)
C = TypeVar("C", bound=type)

MIGRATIONS = Path(__file__).parent / "migrations"
# The key of the PostgreSQL advisory lock that migrations take: the same in every StoreTune process.
MIGRATION_LOCK = int.from_bytes(b"StoreTun", "big")
UPGRADE_COMMAND = "storetune db upgrade"


class SchemaError(Exception):
    """The history is missing, or its schema is not the one this code reads; the message says what to do."""


def parse_url(url: str) -> Any:
    try:
        return make_url(url)
    except ArgumentError:
        raise ValueError(f"{url!r} is not a history URL: write sqlite:////path/to/history.sqlite or "
                         "postgresql://user@host/database") from None


def check_url(url: str) -> Any:
    """``url`` parsed, if it can name a history (SQLite file or PostgreSQL); touches nothing."""
    parsed = parse_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")  # the driver StoreTune installs
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise ValueError(f"a history is SQLite or PostgreSQL, not {backend} ({parsed.render_as_string()})")
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ValueError("sqlite:// is a history in memory, lost when the command ends: name a file, "
                         "sqlite:////path/to/history.sqlite")
    if backend == "sqlite" and not parsed.database.startswith(("/", "~")):
        # a relative path is the current directory's; a missing folder is a slash too few, more often
        # than a wish to create ./tmp in the checkout: refused instead of created
        folder = Path(parsed.database).parent
        if not folder.is_dir():
            raise ValueError(
                f"{parsed.render_as_string()} names {parsed.database} relative to the current directory "
                f"({Path.cwd()}), which has no folder {folder}: {_four_slashes(parsed.database)}, or create the "
                "folder first")
    return parsed


def _four_slashes(database: str) -> str:
    """The hint for a relative SQLite path that was meant to be absolute."""
    return f"for the absolute path /{database} write four slashes, sqlite:////{database}"


def make_engine(url: str) -> Engine:
    """An engine for ``url``: SQLite with WAL and a busy timeout, or PostgreSQL through psycopg 3."""
    parsed = check_url(url)
    backend = parsed.get_backend_name()
    if backend != "sqlite":
        return create_engine(parsed, pool_pre_ping=True)
    if parsed.database and parsed.database != ":memory:":
        parsed = parsed.set(database=str(Path(parsed.database).expanduser()))  # SQLite would open "~/" literally
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(parsed, connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        _wal(cursor)
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return engine


def _wal(cursor: Any, patience_s: float = 30.0) -> None:
    """Switch a new SQLite file to WAL. The switch needs the file to itself and SQLite answers "database
    is locked" at once, without its busy timeout, while another process holds it (one that is creating
    the schema of the same new history): so it is retried here, as the busy timeout would."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _alembic_config() -> alembic.config.Config:
    config = alembic.config.Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


@functools.cache
def _revisions() -> tuple[str, frozenset[str]]:
    """This code's newest schema revision, and every revision it knows."""
    script = ScriptDirectory.from_config(_alembic_config())
    head = script.get_current_head()
    assert head is not None, "tuner/migrations has no revision"
    return head, frozenset(s.revision for s in script.walk_revisions())


_SLOT = "storetunepasswordslot"  # letters only: a URL keeps it as it is


def shown_url(url: Any, mark: str = "***") -> str:
    """A history URL (a string or SQLAlchemy's URL) to print, its password as ``mark``: the one in the URL
    and a ``password`` query parameter (psycopg takes either), which ``hide_password`` leaves in clear."""
    url = make_url(url) if isinstance(url, str) else url
    if url.password:
        url = url.set(password=_SLOT)
    if "password" in url.query:
        url = url.update_query_dict({"password": _SLOT})
    return url.render_as_string(hide_password=False).replace(_SLOT, mark)


def has_password(url: Any) -> bool:
    url = make_url(url) if isinstance(url, str) else url
    return bool(url.password) or "password" in url.query


def schema_revision(connection: Connection) -> str | None:
    """The revision the database's schema is at (None: no StoreTune schema); one this code does not
    know is a ``SchemaError``."""
    current = MigrationContext.configure(connection).get_current_revision()
    head, known = _revisions()
    if current is not None and current not in known:
        url = shown_url(connection.engine.url)
        raise SchemaError(f"the history at {url} has schema revision {current}, newer than this StoreTune knows "
                          f"(its newest is {head}): upgrade StoreTune")
    return current


def upgrade_schema(engine: Engine) -> tuple[str | None, str]:
    """Bring the schema to the newest revision; returns the revisions (before, after).

    Several processes may open a new history at once (workers, a CLI beside the service): the
    revision is read and the migrations run in one transaction that holds a lock, an exclusive
    transaction on SQLite, an advisory lock on PostgreSQL, so the first migrates and the others
    then find the newest revision and do nothing."""
    head, _ = _revisions()
    with engine.connect() as connection:
        if connection.dialect.name == "sqlite":
            # pysqlite opens transactions itself, late (never before DDL) and only deferred; in its
            # autocommit mode it leaves them to us (SQLAlchemy restores the mode when the connection returns)
            connection.execution_options(isolation_level="AUTOCOMMIT")
        with connection.begin():
            if connection.dialect.name == "sqlite":
                connection.exec_driver_sql("BEGIN EXCLUSIVE")
            elif connection.dialect.name == "postgresql":
                connection.execute(select(func.pg_advisory_xact_lock(MIGRATION_LOCK)))
            before = schema_revision(connection)
            if before != head:
                config = _alembic_config()
                config.attributes["connection"] = connection  # env.py runs on it, in this transaction
                alembic.command.upgrade(config, "head")
    return before, head


def check_schema(engine: Engine) -> str:
    """The schema's revision if it is this code's newest; else a ``SchemaError`` saying what to do."""
    head, _ = _revisions()
    with engine.connect() as connection:
        current = schema_revision(connection)
    url = shown_url(engine.url)
    if current is None:
        raise SchemaError(f"no history at {url}: the database has no StoreTune schema (a campaign creates it, "
                          f"or `{UPGRADE_COMMAND}`)")
    if current != head:
        raise SchemaError(f"the history at {url} has schema revision {current}, older than this StoreTune's "
                          f"{head}: run `{UPGRADE_COMMAND}` on it first")
    return current


def refuse_a_missing_file(url: str) -> None:
    """A reader does not create the SQLite file it was asked to read."""
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        if not Path(parsed.database).expanduser().exists():
            relative = "" if parsed.database.startswith(("/", "~")) else (
                f" {parsed.database} is relative to the current directory, {Path.cwd()}: "
                f"{_four_slashes(parsed.database)}")
            raise SchemaError(f"no history at {url}: the file does not exist (a campaign creates it; "
                              f"is --db or STORETUNE_DATABASE_URL the one you meant?{relative})")


# --- riding out a restart of the database server ------------------------------------------------------
DEFAULT_RETRY_S = 60.0  # how long a history call keeps trying through an outage (STORETUNE_DB_RETRY_S)


def retry_bound() -> float:
    """Seconds a history call retries a lost connection: $STORETUNE_DB_RETRY_S, else 60 (0: never)."""
    raw = os.environ.get("STORETUNE_DB_RETRY_S", "")
    try:
        bound = float(raw) if raw else DEFAULT_RETRY_S
    except ValueError:
        raise ValueError(f"STORETUNE_DB_RETRY_S={raw!r} is not a number of seconds") from None
    if not bound >= 0:
        raise ValueError(f"STORETUNE_DB_RETRY_S must be 0 or more seconds, not {raw}")
    return bound


def lost_connection(error: BaseException) -> bool:
    """A server that went away, or is starting up or shutting down: worth trying the call again. SQLite's
    errors are not (a locked file already waited its busy timeout; a missing table will stay missing)."""
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return True
    if isinstance(error, (OperationalError, InterfaceError)):
        return "sqlite" not in type(error.orig).__module__
    return False


_depth = threading.local()  # a call from inside a retried call is retried by the outer one only
_committing = threading.local()  # set when the current attempt's transaction began to commit


def commit_started(_session: Any) -> None:
    """A session's ``before_commit`` event (History's sessions): from here on, a lost connection leaves it
    unknown whether the transaction committed."""
    _committing.flag = True


def retried(method: Callable[..., Any], bound: Callable[[], float]) -> Callable[..., Any]:
    """``method``, called again with exponential backoff while the database is unreachable, up to ``bound()``
    seconds; then the last error. Each of the history's calls is one transaction (or a read), so a call that
    lost its connection before it began to commit changed nothing and is simply made again. One cut off during
    its COMMIT may have committed: it is made again only if it can tell (it takes ``retry``, and checks what
    the lost transaction left); any other is not retried then, rather than writing twice."""
    from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential_jitter

    knows = "retry" in _parameters(method)

    def again(error: BaseException) -> bool:
        return lost_connection(error) and (knows or not getattr(_committing, "flag", False))

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        if getattr(_depth, "n", 0):
            return method(*args, **kwargs)
        _depth.n = 1
        try:
            for attempt in Retrying(retry=retry_if_exception(again), stop=stop_after_delay(bound()),
                                    wait=wait_exponential_jitter(multiplier=0.1, max=5.0, jitter=0.5), reraise=True,
                                    before_sleep=_say_retry(method.__name__)):
                with attempt:
                    _committing.flag = False
                    return method(*args, retry=attempt.retry_state.attempt_number > 1, **kwargs) \
                        if knows else method(*args, **kwargs)
        finally:
            _depth.n = 0
            _committing.flag = False
        raise AssertionError("unreachable")  # Retrying re-raises the last error

    return call


@functools.cache
def _parameters(method: Callable[..., Any]) -> frozenset[str]:
    import inspect

    return frozenset(inspect.signature(method).parameters)


def _say_retry(name: str) -> Callable[[Any], None]:
    def say(state: Any) -> None:
        error = state.outcome.exception() if state.outcome else None
        first = str(getattr(error, "orig", error)).strip().splitlines()[:1]
        log.warning("the history's database did not answer %s (%s); trying again (attempt %d)", name,
                    first[0] if first else type(error).__name__, state.attempt_number + 1)

    return say


def retrying(cls: C) -> C:
    """Every public method of ``cls`` (the history) retried through a lost database connection (``retried``).
    One decorator on the class: a method added later cannot forget it."""
    for name, member in list(vars(cls).items()):
        if callable(member) and not name.startswith("_") and name not in ("session", "close"):
            setattr(cls, name, retried(member, retry_bound))
    return cls
