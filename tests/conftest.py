"""Shared fixtures: the public datasets in ../shared, history URLs, a private PostgreSQL server."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("STORETUNE_SHARED", ROOT.parent / "shared")) / "datasets"
_SCRIPT = Path(sys.executable).parent / "storetune"  # the console script a user runs
STORETUNE = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "storetune.api.cli.main"]


def shared(relative: str) -> Path:
    """A file of ../shared/datasets; the test is skipped, saying so, where it is absent."""
    path = SHARED / relative
    if not path.exists():
        pytest.skip(f"{path} is not here: clone the shared data beside the repository")
    return path


@pytest.fixture
def bdbc() -> Path:
    return shared("moot_configs/BDBC.csv")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'history.sqlite'}"


def run_cli(*args: str, db: str | None = None, check: bool = False, timeout: float = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``storetune`` in a real subprocess, as a user would (``env``: variables to add)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    if db:
        env["STORETUNE_DATABASE_URL"] = db
    proc = subprocess.run([*STORETUNE, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"storetune {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


PG_PREFIX = "storetune-pg-"
AS_POSTGRES = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []  # initdb refuses to run as root


def _stop_server(bindir: Path, top: Path) -> None:
    """Stop a private server (at once: its data are the tests') and remove its folder."""
    subprocess.run([*AS_POSTGRES, str(bindir / "pg_ctl"), "-D", str(top / "data"), "-m", "immediate", "stop"],
                   capture_output=True, timeout=60)
    shutil.rmtree(top, ignore_errors=True)


def _reap_orphaned_servers(bindir: Path) -> None:
    """Stop the private servers of earlier test sessions that were killed before their teardown (each
    folder names the pytest process that made it); a live session's server is left alone."""
    for owner in Path(tempfile.gettempdir()).glob(f"{PG_PREFIX}*/owner"):
        if _names_a_dead_process(owner):
            _stop_server(bindir, owner.parent)


def _names_a_dead_process(pid_file: Path) -> bool:
    """Whether the file holds the pid of a process that is gone (False: alive, or not a pid)."""
    try:
        os.kill(int(pid_file.read_text()), 0)
    except ProcessLookupError:
        return True
    except (ValueError, OSError):
        pass
    return False


class PrivatePostgres:
    """A PostgreSQL server of the tests' own, in a temp folder naming its owner (so a later session can stop it
    if this one is killed), listening on a Unix socket only; ``restart()`` is ``pg_ctl stop -m fast`` then ``start``, as an
    operator restarts a server under live clients (``down_s``: kept stopped that long in between)."""

    def __init__(self) -> None:
        bindirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
        if not bindirs:
            pytest.skip("PostgreSQL is not installed; `make test` installs it (apt-get install postgresql)")
        self.bindir = Path(bindirs[-1])
        _reap_orphaned_servers(self.bindir)
        self.top = Path(tempfile.mkdtemp(prefix=PG_PREFIX))
        (self.top / "owner").write_text(str(os.getpid()))
        self.data, self.sockets = self.top / "data", self.top / "sock"
        self.sockets.mkdir()
        if AS_POSTGRES:
            os.chmod(self.top, 0o755)
            shutil.chown(self.sockets, "postgres")
            self.data.mkdir()
            shutil.chown(self.data, "postgres")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = self.sockets / "server.log"
        self.options = f"-k {self.sockets} -p {self.port} -c listen_addresses='' -c fsync=off"
        try:
            self.pg(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")
            self.pg_ctl("start")
            self.pg(str(self.bindir / "createdb"), "-h", str(self.sockets), "-p", str(self.port), "-U", "postgres",
                    "storetune")
        except BaseException:
            self.stop()
            raise
        self.url = f"postgresql+psycopg://postgres@/storetune?host={self.sockets}&port={self.port}"

    def pg(self, *cmd: str) -> None:
        proc = subprocess.run([*AS_POSTGRES, *cmd], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            server_log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}{server_log}")

    def pg_ctl(self, action: str, *args: str) -> None:
        self.pg(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", self.options, "-l", str(self.log), "-w",
                *args, action)

    def restart(self, down_s: float = 0) -> None:
        self.pg_ctl("stop", "-m", "fast")
        time.sleep(down_s)
        self.pg_ctl("start")

    def stop(self) -> None:
        _stop_server(self.bindir, self.top)


@pytest.fixture(scope="session")
def postgres_url():
    """A PostgreSQL URL: $STORETUNE_TEST_POSTGRES_URL, or a private server started for this session."""
    given = os.environ.get("STORETUNE_TEST_POSTGRES_URL")
    if given:
        yield given
        return
    server = PrivatePostgres()
    try:
        yield server.url
    finally:
        server.stop()


def reap_killed_sessions(root: Path) -> list[str]:
    """Undo what the device runners of killed test sessions left set up (loop devices, mounts, sysfs
    values). Each test keeps its runners' state in a folder of its own under pytest's temporary folder,
    so a later session's runners never reap it; a session killed with SIGKILL leaves its folder with a
    `.lock` naming its dead pid (a session that ended keeps no lock). Returns one line per action."""
    from storetune.runners.device.shell import Shell
    from storetune.runners.device.state import reap

    said: list[str] = []
    for lock in sorted(root.glob("pytest-*/.lock")):
        if not _names_a_dead_process(lock):
            continue  # its session is running
        for directory in sorted({path.parent for path in lock.parent.rglob("device-*.json")}):
            reaped = reap(Shell(), directory)
            said += reaped.done + reaped.failed
    return said


@pytest.fixture(scope="session", autouse=True)
def _reap_killed_test_sessions(tmp_path_factory: pytest.TempPathFactory) -> None:
    root = next((p for p in tmp_path_factory.getbasetemp().parents if p.name.startswith("pytest-of-")), None)
    if root is not None and os.geteuid() == 0:
        for line in reap_killed_sessions(root):
            print(f"cleaned up after a killed test session: {line}", file=sys.stderr)


# The marker is on the parameter, so `-m "not postgres"` deselects the PostgreSQL cases at collection
# (a marker the fixture applied would come after collection, too late for -m).
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def history_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each history test runs on SQLite and on a real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.sqlite'}"
    url = request.getfixturevalue("postgres_url")
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as c:  # each test starts from an empty schema
        c.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()
    return url


# Tests that share something host-wide run in one pytest-xdist worker, one after another (`make test` runs
# two workers with --dist loadgroup): loop devices and the host's block-queue, ftrace and writeback settings
# (the device mark), and Ray clusters, some of which measure on loop devices. The rest only touch what they
# create, so they run side by side.
def _shares_the_host(item: pytest.Item) -> bool:
    return item.get_closest_marker("device") is not None or item.module.__name__ in ("test_ray", "test_service_cluster")


def pytest_itemcollected(item: pytest.Item) -> None:
    """Marked as each test is collected, before xdist reads the groups."""
    if _shares_the_host(item):
        item.add_marker(pytest.mark.xdist_group("host"))
