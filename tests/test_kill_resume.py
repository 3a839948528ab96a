"""A campaign killed with SIGKILL and resumed: none lost, none counted twice. Real subprocesses."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, STORETUNE, run_cli
from test_runner_contract import bench_command

pytestmark = pytest.mark.slow


def start(args: list[str], db: str, launcher: list[str] = STORETUNE, **env: str) -> subprocess.Popen:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "STORETUNE_DATABASE_URL": db, **env}
    return subprocess.Popen([*launcher, *args], env=environment, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def statuses(path: Path) -> list[str]:
    if not path.exists():
        return []
    with sqlite3.connect(path) as c:
        try:
            return [row[0] for row in c.execute("SELECT status FROM trials ORDER BY number")]
        except sqlite3.OperationalError:  # the schema is still being created
            return []


def kill_when(proc: subprocess.Popen, path: Path, ready, timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = statuses(path)
        if ready(seen):
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return statuses(path)
        if proc.poll() is not None:
            pytest.fail(f"the campaign ended before it could be killed: {proc.stderr.read()}")
        time.sleep(0.01)
    proc.kill()
    pytest.fail("the campaign never reached the state to kill it in")


def check_resumed(db: str, path: Path, budget: int, running_at_kill: int) -> dict:
    summary = json.loads(run_cli("tune", "--resume", "1", "--json", db=db, check=True).stdout.strip().splitlines()[-1])
    assert summary["evaluated"] == budget and summary["state"] == "finished"
    with sqlite3.connect(path) as c:
        trials = c.execute("SELECT id, number, status, config_hash, retry_of FROM trials ORDER BY number").fetchall()
    stale = [t for t in trials if t[2] == "STALE"]
    counted = [t for t in trials if t[2] != "STALE"]
    assert len(stale) == running_at_kill  # exactly the trials that were RUNNING
    assert len(counted) == budget
    assert len({t[3] for t in counted}) == budget  # no configuration counted twice
    for s in stale:  # every interrupted configuration was measured again
        (retry,) = [t for t in trials if t[4] == s[0]]
        assert retry[3] == s[3] and retry[2] == "SUCCEEDED"
    assert [t[1] for t in trials] == list(range(len(trials)))
    # the CLI names the trial a retry re-runs by its number, as over REST, not by its database id
    shown = json.loads(run_cli("trials", "1", "--format", "json", db=db, check=True).stdout)
    number = {t[0]: t[1] for t in trials}
    assert [t["retry_of"] for t in shown] == [None if t[4] is None else number[t[4]] for t in trials]
    return summary


def test_sigkill_during_a_measurement_then_resume(tmp_path: Path):
    path = tmp_path / "history.sqlite"
    db = f"sqlite:///{path}"
    args = ["tune", "--runner", "command", "--command", bench_command(tmp_path), "--space", "storage_v1",
            "--metric", "throughput_ops", "--budget", "8", "--repeats", "2", "--seed", "4"]
    proc = start(args, db, BENCH_SLEEP="0.15")
    at_kill = kill_when(proc, path, lambda s: s.count("SUCCEEDED") >= 3 and "RUNNING" in s)
    assert at_kill.count("RUNNING") == 1
    check_resumed(db, path, budget=8, running_at_kill=1)
    with sqlite3.connect(path) as c:  # a counted trial has all its repeats
        counts = c.execute(
            "SELECT t.id, count(m.id) FROM trials t JOIN measurements m ON m.trial_id = t.id "
            "WHERE t.status = 'SUCCEEDED' GROUP BY t.id"
        ).fetchall()
    assert len(counts) == 8 and {n for _, n in counts} == {2}


def test_sigkill_a_dataset_replay_then_resume_measures_every_configuration_once(tmp_path: Path, bdbc):
    path = tmp_path / "history.sqlite"
    db = f"sqlite:///{path}"
    proc = start(["tune", "--dataset", str(bdbc), "--algorithm", "random", "--budget", "2560", "--seed", "1"], db)
    at_kill = kill_when(proc, path, lambda s: s.count("SUCCEEDED") >= 300)
    assert len(at_kill) < 2560
    check_resumed(db, path, budget=2560, running_at_kill=at_kill.count("RUNNING"))


@pytest.mark.parametrize("launcher", [STORETUNE, [sys.executable, "-m", "storetune.api.cli.main"]], ids=["script", "module"])
def test_resume_refuses_while_the_driver_is_alive(tmp_path: Path, launcher: list[str]):
    """Whether the driver runs as `storetune` or as `python -m storetune.api.cli.main` (judged dead once: two drivers then
    ran the campaign past its budget)."""
    path = tmp_path / "history.sqlite"
    db = f"sqlite:///{path}"
    args = ["tune", "--runner", "command", "--command", bench_command(tmp_path), "--space", "storage_v1",
            "--metric", "throughput_ops", "--budget", "20"]
    proc = start(args, db, launcher, BENCH_SLEEP="0.2")
    try:
        deadline = time.monotonic() + 60
        while "SUCCEEDED" not in statuses(path) and time.monotonic() < deadline:
            time.sleep(0.02)
        second = run_cli("tune", "--resume", "1", db=db)
        assert second.returncode == 2 and f"still being run by process {proc.pid}" in second.stderr
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_ctrl_c_during_tune_says_how_to_resume(tmp_path: Path, stop: str):
    """Ctrl-C (SIGINT to the terminal's process group) used to exit 130 with a frozen progress bar. SIGTERM
    (`kill`, `timeout`, systemd) and SIGHUP, sent to `tune` alone, ended it on the spot: no word, the benchmark
    left running (on a device: on a mounted loop device) and the campaign left "running". They stop it as
    Ctrl-C does, with the shell's status for the signal."""
    number = getattr(signal, stop)
    path = tmp_path / "history.sqlite"
    db = f"sqlite:///{path}"
    args = ["tune", "--runner", "command", "--command", bench_command(tmp_path), "--space", "storage_v1",
            "--metric", "throughput_ops", "--budget", "60", "--db", db, "--json"]
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_SLEEP": "0.3"}
    # as a terminal's foreground job: a test run started in the background (`make test &`) has SIGINT
    # ignored, the child inherits that, and Python then leaves Ctrl-C ignored, as every Unix program should
    proc = subprocess.Popen([*STORETUNE, *args], env=environment, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    started = time.monotonic()
    while "SUCCEEDED" not in (seen := statuses(path)) and time.monotonic() < started + 60:
        time.sleep(0.05)
    if number == signal.SIGINT:
        os.killpg(proc.pid, number)
    else:
        os.kill(proc.pid, number)
    signalled = f"{stop} after {time.monotonic() - started:.1f} s, with {seen.count('SUCCEEDED')} trials succeeded"
    stdout, stderr = proc.communicate(timeout=60)
    # (once, on a loaded CI machine, all 30 trials of a smaller budget finished first: hence 60, and the count)
    assert proc.returncode == 128 + number, f"{signalled}: {stderr}"
    stopped = json.loads(stdout.strip().splitlines()[-1])  # --json: the last line says where it stopped, as always
    assert stopped["state"] == "interrupted" and stopped["resume"] == f"storetune tune --resume 1 --db {db}"
    assert stopped["executor"]["kind"] == "local"  # the keys of a finished campaign's line, and resume
    assert 1 <= stopped["evaluated"] == statuses(path).count("SUCCEEDED") < 60
    last = stderr.strip().splitlines()[-1]
    script = bench_command(tmp_path).split()[-1]
    left = subprocess.run(["pgrep", "-f", script], capture_output=True, text=True).stdout.split()
    assert left == []  # the benchmark runs in its own session: Ctrl-C did not reach it, the runner must kill it
    assert last.startswith("interrupted: campaign 1 stopped") and last.endswith(f"storetune tune --resume 1 --db {db}")
    summary = json.loads(run_cli("tune", "--resume", "1", "--json", db=db, check=True).stdout.strip().splitlines()[-1])
    assert summary["evaluated"] == 60 and summary["state"] == "finished"


def test_ctrl_c_during_compare_says_what_is_kept(tmp_path: Path, bdbc):
    """Ctrl-C during `storetune compare` used to exit 130 without a word; it is recorded as interrupted."""
    path = tmp_path / "history.sqlite"
    db = f"sqlite:///{path}"
    args = ["compare", "--dataset", str(bdbc), "--algorithms", "random", "--seeds", "1000", "--budget", "200",
            "--workers", "1", "--db", db, "--json"]
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([*STORETUNE, *args], env=environment, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    started = time.monotonic()
    while "SUCCEEDED" not in statuses(path) and time.monotonic() < started + 60:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    stopped = json.loads(stdout.strip().splitlines()[-1])  # --json: its last line, though it stopped
    assert stopped["comparison"] == 1 and stopped["state"] == "interrupted"
    assert stderr.strip().splitlines()[-1] == ("interrupted: comparison 1 stopped; the seeds it finished are in the "
                                               "history: run the same command with --resume to go on from them")
    with sqlite3.connect(path) as c:
        assert c.execute("SELECT state FROM comparisons").fetchall() == [("interrupted",)]


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_a_tune_cancelled_over_rest_says_how_to_finish_it(tmp_path: Path, as_json: bool):
    """A `storetune tune` whose campaign is cancelled through the history (as POST /campaigns/{id}/cancel
    does) ends with the command that finishes it, as Ctrl-C does, and exits 3, not 0: its budget is not
    spent (nor 1, a traceback's). The history comes from $STORETUNE_DATABASE_URL, set for this command only, so the printed
    command must name it (it used to leave --db out and point at the default history)."""
    from storetune.tuner import History

    path = tmp_path / "history.sqlite"
    db = f"sqlite:///{path}"
    args = ["tune", "--runner", "command", "--command", bench_command(tmp_path), "--space", "storage_v1",
            "--metric", "throughput_ops", "--budget", "60", *(["--json"] if as_json else [])]
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_SLEEP": "0.2", "STORETUNE_DATABASE_URL": db}
    proc = subprocess.Popen([*STORETUNE, *args], env=environment,
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    while "SUCCEEDED" not in statuses(path) and time.monotonic() < started + 60:
        time.sleep(0.05)
    assert History(db).transition(1, ["running"], cancel_requested=True)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 3, stderr
    if as_json:  # the line a script reads says how to finish it too (it said only "cancelled after ...")
        summary = json.loads(stdout.strip().splitlines()[-1])
        assert summary["state"] == "cancelled" and summary["resume"] == f"storetune tune --resume 1 --db {db}"
        return
    assert f"cancelled before its budget; its trials are kept. Finish it with: storetune tune --resume 1 --db {db}" in stdout
