"""The ``storetune`` command line, run in real subprocesses as a user would."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest

from conftest import ROOT, SHARED, STORETUNE, run_cli, shared
from storetune.tuner import History

SUMMARY_KEYS = {"campaign", "algorithm", "seed", "trials_by_status", "best_config", "best_value", "objective"}


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_tune_json_trials_and_best(sqlite_url, bdbc):
    proc = run_cli("tune", "--runner", "dataset", "--dataset", str(bdbc), "--algorithm", "random",
                   "--budget", "50", "--seed", "1", "--json", db=sqlite_url, check=True)
    summary = last_json(proc.stdout)
    assert SUMMARY_KEYS <= summary.keys()
    assert (summary["algorithm"], summary["seed"], summary["trials_by_status"]) == ("random", 1, {"SUCCEEDED": 50})
    assert summary["objective"] == {"metric": "PERF", "direction": "min"}
    assert "50/50" in proc.stderr  # the progress bar

    campaign = str(summary["campaign"])
    rows = list(csv.DictReader(io.StringIO(run_cli("trials", campaign, "--format", "csv", db=sqlite_url, check=True).stdout)))
    assert len(rows) == 50 and {r["status"] for r in rows} == {"SUCCEEDED"}
    assert min(float(r["value"]) for r in rows) == summary["best_value"]
    table = run_cli("trials", campaign, db=sqlite_url, check=True).stdout
    assert "SUCCEEDED" in table and "pS=" in table

    best = last_json(run_cli("best", campaign, "--json", db=sqlite_url, check=True).stdout)
    assert best["value"] == summary["best_value"] and best["config"] == summary["best_config"]
    rank = best["table_rank"]  # BDBC has one repeat per configuration: the mean is the value
    assert rank["mean"] == best["value"] and rank["configurations"] == 2560
    assert 1 <= rank["rank"] <= 2560 - 49 and rank["table_best"] <= rank["mean"]
    assert "best PERF" in run_cli("best", campaign, db=sqlite_url, check=True).stdout


def test_best_of_a_pinned_campaign_ranks_it_among_the_configurations_it_searched(sqlite_url, bdbc):
    """The rank in the whole table said little about a campaign that searched a pinned tenth of it."""
    summary = last_json(run_cli("tune", "--dataset", str(bdbc), "--fix", "pS=4K", "--fix", "hAVE_HASH=1", "--budget",
                                "30", "--json", db=sqlite_url, check=True).stdout)
    best = last_json(run_cli("best", str(summary["campaign"]), "--json", db=sqlite_url, check=True).stdout)
    with open(bdbc) as f:
        rows = [r for r in csv.DictReader(f) if r["pS4K"] == "1" and r["hAVE_HASH"] == "1"]
    pinned = best["pinned_rank"]
    assert pinned["fixed"] == {"pS": "4K", "hAVE_HASH": 1} and pinned["configurations"] == len(rows) == 256
    assert pinned["table_best"] == min(float(r["PERF-"]) for r in rows)
    assert pinned["rank"] == 1 + sum(float(r["PERF-"]) < best["value"] for r in rows) <= best["table_rank"]["rank"]
    text = run_cli("best", str(summary["campaign"]), db=sqlite_url, check=True).stdout
    assert f"among the table's 256 configurations with the campaign's pins (pS=4K, hAVE_HASH=1): rank {pinned['rank']}" in text


def test_tune_atc18_subset_with_context(sqlite_url):
    folder = shared("cao_atc18_subset")
    proc = run_cli("tune", "--dataset", str(folder), "--context", "workload_id=4", "--context", "disk_type=3",
                   "--budget", "20", "--repeats", "2", "--json", db=sqlite_url, check=True)
    summary = last_json(proc.stdout)
    assert summary["objective"] == {"metric": "throughput", "direction": "max"}
    assert summary["best_config"]["io_scheduler"] in ("cfq", "deadline", "noop")
    # campaigns on other disks of the same table looked alike in every human summary
    assert {"workload_id": 4, "disk_type": 3}.items() <= summary["pinned"].items()
    listed = run_cli("campaigns", db=sqlite_url, check=True).stdout
    assert "cao_atc18_subset (workload_id=4" in listed and "disk_type=3" in listed


def test_spaces_lists_every_space_and_its_parameters():
    stdout = run_cli("spaces", check=True).stdout
    for word in ("storage_v1", "storage_v2", "admission", "journal_mode", "io_scheduler", "threshold_percentile"):
        assert word in stdout
    assert "pS" in run_cli("spaces", "--dataset", str(shared("moot_configs/BDBC.csv")), check=True).stdout


def test_check_accepts_a_valid_configuration():
    proc = run_cli("check", "--space", "storage_v1", "fs=xfs", "block_size=1024", "--defaults", "--json", check=True)
    assert last_json(proc.stdout)["config"]["xfs_agcount"] == 4


@pytest.mark.parametrize(
    "args, message",
    [
        (["check", "--space", "storage_v1", "fs=ext4", "journal=1"], "unknown parameter 'journal'"),
        (["check", "--space", "storage_v1", "fs=zfs"], "fs='zfs' is outside the space; allowed: ext2, ext3"),
        # what is wrong with the values given comes before what is missing (it said "missing parameter 'fs'")
        (["check", "--space", "storage_v1", "block_size=abc"], "block_size='abc' is outside the space; allowed: 1024"),
        (["check", "--space", "storage_v1", "fs=ext2", "block_size=1024", "inode_size=2048"],
         "forbidden combination: mke2fs(8) refuses an inode larger than the block"),
        (["tune", "--dataset", "{bdbc}", "--algorithm", "annealing"], "unknown algorithm 'annealing'"),
        (["tune", "--dataset", "{bad}"], "line 3: 4 fields where the header has 3"),
        (["tune", "--dataset", "{bdbc}", "--budget", "5000"], "more than the 2560 configurations"),
        # pinned, the space is the pins' share of the table, and the message says so (it read "of BDBC")
        (["tune", "--dataset", "{bdbc}", "--budget", "1000", "--fix", "pS=4K", "--fix", "hAVE_HASH=1"],
         "a budget of 1000 is more than the 256 configurations of BDBC with pS=4K, hAVE_HASH=1; use a budget of 256"),
        # the grid's 3 configurations ran out and the campaign said the space was exhausted
        (["tune", "--dataset", "{bdbc}", "--algorithm", "grid", "--budget", "10"],
         "more than the 3 configurations of the grid here (per_stratum 3 for the whole space: none of the strata"),
        (["tune", "--dataset", "/no/such.csv"], "no such dataset file or folder"),
        (["tune", "--runner", "fio"], "unknown runner 'fio'"),
        (["tune", "--resume", "77"], "no campaign 77"),
        # a budget given with --resume was silently ignored; now a larger one extends the campaign
        (["tune", "--resume", "77", "--budget", "100", "--algorithm", "ga", "--dry-run"],
         "--resume 77 finishes campaign 77 as it was created and takes only --parallel, --executor, "
         "--max-retries, --db, --json and --budget (a larger one extends it), not --dry-run, --algorithm"),
        (["trials", "12"], "the file does not exist"),  # a reader creates no history
        (["tune", "--dataset", "{bdbc}", "--algorithm", "ga", "--param", "mutation_rate=2"],
         "ga:mutation_rate='2': Input should be less than or equal to 1"),
        (["tune", "--dataset", "{bdbc}", "--algorithm", "bo", "--param", "acq=XX"], "bo:acq='XX': Input should be"),
        (["tune", "--dataset", "{bdbc}", "--parallel", "0"], "--parallel must be at least 1, not 0"),
        (["tune", "--dataset", "{bdbc}", "--workload", "varmail"], "--workload does not apply to the dataset runner"),
        # it listed options tune did not have (a newcomer trial); tune's options are now made from the settings
        (["tune", "--runner", "admission", "--trace", "t.csv", "--workload", "varmail"],
         "--workload does not apply to the admission runner; it takes --trace, --space, --train, --validation, "
         "--replica-cost-us, --epochs, --trace-format"),
        (["tune", "--runner", "device", "--runtime", "-1", "--dry-run"], "device runner: runtime_s: Input should be "
                                                                          "greater than 0"),
        (["tune", "--runner", "device", "--workload", "tpcc", "--dry-run"], "device runner: workload: Input should be"),
        # a dry run on a named device printed a traceback per evaluation and exited 0 (a newcomer trial)
        (["tune", "--runner", "device", "--device", "/dev/loop0", "--dry-run"],
         "/dev/loop0 is not allow-listed (allowed: nothing); name it with --allow-device /dev/loop0"),
        (["tune", "--runner", "command", "--space", "storage_v1"], "command runner: command: Field required"),
        # a command that cannot start used to fail the whole budget and exit 0
        (["tune", "--runner", "command", "--space", "storage_v1", "--metric", "x", "--command", "/nonexistent/bench"],
         "--command: /nonexistent/bench: no such file; the command runs as an argv, without a shell"),
        (["tune", "--runner", "command", "--space", "storage_v1", "--metric", "x", "--command", "no-such-bench-x"],
         "--command: no-such-bench-x: not found on PATH"),
        (["tune", "--runner", "command", "--space", "storage_v1", "--metric", "x", "--command", "true; echo"],
         "';' is a shell operator, but the command runs as an argv, without a shell: for pipes, ';' or "
         "redirections use --command \"sh -c '...'\""),
        (["tune", "--runner", "command", "--space", "storage_v1", "--metric", "x", "--command", "{bad}"],
         "bad.csv is not executable"),
        (["tune", "--dataset", "{ssa}"], "2 objectives (Throughput+, Latency-): choose one with --metric"),
        # from a newcomer trial: a traceback per trial, and one at the start
        (["tune", "--runner", "command", "--space", "storage_v1", "--metric", "x", "--command", "true",
          "--timeout", "inf"], "timeout_s: Input should be a finite number"),
        (["campaigns", "--db", "mysql://a@b/c"], "a history is SQLite or PostgreSQL, not mysql"),
        (["campaigns", "--db", "/tmp/h.sqlite"], "'/tmp/h.sqlite' is not a history URL: write sqlite:////path"),
        (["tune", "--dataset", "{bdbc}", "--db", "sqlite://"], "sqlite:// is a history in memory"),
        # from a helper's trial: the default history was written; a traceback and a comparison left running
        (["tune", "--dataset", "{bdbc}", "--db", ""], "--db is empty (an unset shell variable?)"),
        (["tune", "--dataset", "{bdbc}", "--fix", "pS=4K", "--fix", "pS=8K"],
         "--fix names pS twice (pS=4K and pS=8K): give it once"),
        (["check", "--space", "storage_v1", "fs=xfs", "fs=ext4"], "configuration names fs twice (fs=xfs and fs=ext4)"),
        (["tune", "--dataset", "{bdbc}", "--seed", str(2**63)], "the seed must be from 0 to 2^63 - 1, not"),
        (["tune", "--dataset", "{bdbc}", "--seed", "-1"], "the seed must be from 0 to 2^63 - 1, not -1"),
        (["compare", "--dataset", "{bdbc}", "--first-seed", "-1"], "--first-seed must be from 0 to 2^62 - 1, not -1"),
        (["compare", "--dataset", "{bdbc}", "--first-seed", str(2**64)], "--first-seed must be from 0 to 2^62 - 1"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(sqlite_url, bdbc, tmp_path: Path, args, message):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,PERF-\n1,2,3\n1,2,3,4\n")
    ssa = SHARED / "moot_configs/SS-A.csv"
    args = [a.format(bdbc=bdbc, bad=bad, ssa=ssa) for a in args]
    proc = run_cli(*args, db=None if "--db" in args else sqlite_url)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], proc.stderr
    assert History(sqlite_url).campaigns() == [] and History(sqlite_url).comparisons() == []


def test_a_refused_campaign_creates_no_history_file(tmp_path: Path):
    for args in (["--dataset", str(tmp_path / "none.csv")], ["--runner", "admission", "--trace", str(tmp_path / "t")]):
        db = tmp_path / "history.sqlite"
        proc = run_cli("tune", *args, "--db", f"sqlite:///{db}")
        assert proc.returncode == 2 and "no such" in proc.stderr, proc.stderr
        assert not db.exists()  # it used to be created, empty, before the input was checked


def test_resume_takes_the_options_that_say_how_to_run(tmp_path: Path, bdbc):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    first = last_json(run_cli("tune", "--dataset", str(bdbc), "--budget", "3", "--db", url, "--json", check=True).stdout)
    again = run_cli("tune", "--resume", str(first["campaign"]), "--parallel", "2", "--max-retries", "1",
                    "--executor", "local", "--db", url, "--json", check=True)
    assert last_json(again.stdout)["campaign"] == first["campaign"]
    # the bar of a resumed campaign, here one already finished, shows its best so far: it showed "best -"
    assert f"3/3 best {first['best_value']:.6g}" in " ".join(again.stderr.split()), again.stderr


def test_version_and_flags_in_the_help():
    assert run_cli("--version", check=True).stdout.strip().startswith("storetune ")
    help_text = run_cli("tune", "--help", check=True).stdout
    assert "--json" in help_text and "<bool>" not in help_text and "<int>" in help_text


def test_sweep_dry_run_prints_the_plan_and_touches_nothing(tmp_path: Path, sqlite_url):
    out = tmp_path / "sweep"
    proc = run_cli("sweep", "--out", str(out), "--workloads", "varmail,oltp", "--per-stratum", "1", "--repeats", "1",
                   "--runtime", "2", "--dry-run", db=sqlite_url, check=True)
    first = proc.stdout.splitlines()[0]
    assert first.startswith(f"# sweep into {out}: ") and "x 2 workloads (varmail, oltp) x 1 repeats = " in first
    assert "benchmark runs of 2 s: 1 min of benchmark at least" in " ".join(proc.stdout.split())  # it read "0.0 h"
    assert "mkfs." in proc.stdout and "dry run: the commands of the first 1 of" in proc.stdout
    assert not out.exists() and not (tmp_path / "history.sqlite").exists()


def test_a_history_that_is_not_a_database_is_one_line(tmp_path: Path):
    garbage = tmp_path / "notes.sqlite"
    garbage.write_text("not a database\n")
    for args in (["campaigns"], ["tune", "--dataset", str(SHARED / "moot_configs/BDBC.csv"), "--budget", "2"]):
        proc = run_cli(*args, "--db", f"sqlite:///{garbage}")
        assert proc.returncode == 2 and proc.stderr.strip() == "error: the history: file is not a database"
    assert garbage.read_text() == "not a database\n"


def test_a_relative_sqlite_path_with_no_folder_is_refused_not_created(tmp_path: Path):
    """sqlite:///tmp/x is ./tmp/x: a slash too few used to create tmp/ inside the current directory."""
    name = f"storetune-missing-{os.getpid()}"  # a folder of the checkout (the commands' directory) that is not there
    assert not (ROOT / name).exists()
    url = f"sqlite:///{name}/h.sqlite"
    proc = run_cli("tune", "--dataset", str(SHARED / "moot_configs/BDBC.csv"), "--budget", "2", "--db", url)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"error: {url} names {name}/h.sqlite relative to the current directory ({ROOT}), which has no folder "
        f"{name}: for the absolute path /{name}/h.sqlite write four slashes, sqlite:////{name}/h.sqlite, or "
        "create the folder first")
    assert not (ROOT / name).exists()
    read = run_cli("campaigns", "--db", url)
    assert read.returncode == 2 and f"write four slashes, sqlite:////{name}/h.sqlite" in read.stderr


def test_a_sqlite_history_under_home_is_opened_where_it_says(tmp_path: Path):
    proc = run_cli("tune", "--dataset", str(SHARED / "moot_configs/BDBC.csv"), "--budget", "2", "--json",
                   "--db", "sqlite:///~/h/history.sqlite", env={"HOME": str(tmp_path)}, check=True)
    assert json.loads(proc.stdout.strip().splitlines()[-1])["database"] == f"sqlite:///{tmp_path}/h/history.sqlite"
    assert (tmp_path / "h" / "history.sqlite").is_file() and not (tmp_path / "~").exists()
    run_cli("campaigns", "--db", "sqlite:///~/h/history.sqlite", env={"HOME": str(tmp_path)}, check=True)


def test_the_command_listing_shows_each_summary_unbroken():
    """`storetune --help` listed a summary with its docstring's line breaks ("...say where the" and
    "workload's fingerprint shifts" on two lines, however wide the terminal)."""
    listing = run_cli("--help", env={"COLUMNS": "250"}, check=True).stdout
    assert ("record every I/O's latency; say where the workload's fingerprint shifts (the change detection of Zhang "
            "and Bhargava's self-learning disk scheduler).") in listing
    admission = run_cli("admission", "--help", env={"COLUMNS": "250"}, check=True).stdout
    assert "inference, for pays, cutoff and period labels of the test (or validation) part." in admission


def test_printed_commands_name_the_history_unless_it_is_the_default_or_holds_a_password(monkeypatch):
    """A history from $STORETUNE_DATABASE_URL is named with --db (the variable may have been set for one
    command), except a URL with a password: hidden it could not log in, shown it would be on screen."""
    from storetune.api.cli.common import db_flag
    from storetune.api.settings import default_database_url

    monkeypatch.delenv("STORETUNE_DATABASE_URL", raising=False)
    assert db_flag(None) == "" and db_flag(default_database_url()) == f" --db {default_database_url()}"
    monkeypatch.setenv("STORETUNE_DATABASE_URL", "sqlite:////srv/st/h.sqlite")
    assert db_flag(None) == " --db sqlite:////srv/st/h.sqlite"
    monkeypatch.setenv("STORETUNE_DATABASE_URL", "postgresql://tuner:s3cret@db.example/storetune")
    assert db_flag(None) == ""
    # a password given with --db: a placeholder where the user puts it back (`***` was taken as the password)
    assert db_flag("postgresql://tuner:s3cret@db.example/storetune") == " --db 'postgresql://tuner:<password>@db.example/storetune'"
    # a password as a query parameter is one too; a URL the shell would split or glob is quoted
    assert db_flag("postgresql://t@db/st?password=s3cret") == " --db 'postgresql://t@db/st?password=<password>'"
    assert db_flag("postgresql://t@db/st?sslmode=require") == " --db 'postgresql://t@db/st?sslmode=require'"
    assert db_flag("sqlite:////srv/my dir/h.sqlite") == " --db 'sqlite:////srv/my dir/h.sqlite'"
    monkeypatch.setenv("STORETUNE_DATABASE_URL", "postgresql://tuner@db.example/storetune?password=s3cret")
    assert db_flag(None) == ""


@pytest.mark.postgres
def test_the_services_banner_hides_the_historys_password(postgres_url):
    """`storetune serve` printed its history URL in clear on its first line, which docker-compose keeps in
    the container's logs. (The test server trusts local connections, so any password logs in.)"""
    import socket
    import subprocess

    from sqlalchemy.engine import make_url

    from storetune.tuner.history.schema import shown_url

    url = make_url(postgres_url).set(password="s3cret-pw").render_as_string(hide_password=False)
    assert shown_url("postgresql://t@db/st?password=s3cret-pw") == "postgresql://t@db/st?password=***"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("STORETUNE_TOKEN", None)
    service = subprocess.Popen([*STORETUNE, "serve", "--host", "127.0.0.1", "--port", str(port), "--db", url,
                                "--log-level", "warning"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        banner = ""
        while "token" not in banner:  # the banner's last word (rich wraps it)
            line = service.stderr.readline()
            assert line, f"serve exited ({service.wait()}): {banner}"
            banner += line
    finally:
        service.terminate()
        service.wait(timeout=30)
    assert "s3cret-pw" not in banner and ":***@" in "".join(banner.split())


def test_best_and_importance_of_a_campaign_whose_table_changed_or_moved(sqlite_url, bdbc, tmp_path):
    """A table edited in place ranked the campaign's best against other measurements ("mean 1, rank 1"),
    and a table moved away made `best` fail outright: the campaign's own results are still shown, and
    what the table would have told is refused with the reason."""
    table = tmp_path / "bdbc.csv"
    table.write_bytes(Path(bdbc).read_bytes())
    campaign = str(last_json(run_cli("tune", "--dataset", str(table), "--budget", "30", "--seed", "1", "--json",
                                     db=sqlite_url, check=True).stdout)["campaign"])
    before = last_json(run_cli("best", campaign, "--json", db=sqlite_url, check=True).stdout)
    assert before["table_rank"]["configurations"] == 2560 and "table_error" not in before
    lines = table.read_text().splitlines()
    table.write_text("\n".join([lines[0]] + [r.rsplit(",", 1)[0] + ",1.0" for r in lines[1:]]) + "\n")
    for gone in ("has changed since it was replayed", "can no longer be read"):
        best = last_json(run_cli("best", campaign, "--json", db=sqlite_url, check=True).stdout)
        assert best["value"] == before["value"] and best["config"] == before["config"]
        assert best["table_rank"] is None and gone in best["table_error"]
        assert gone in " ".join(run_cli("best", campaign, db=sqlite_url, check=True).stdout.split())
        result = json.loads(run_cli("importance", campaign, "--json", db=sqlite_url, check=True).stdout)
        assert result["trials"] == 30 and gone in result["table"]["error"]
        assert gone in " ".join(run_cli("importance", campaign, db=sqlite_url, check=True).stdout.split())
        if table.exists():
            table.rename(tmp_path / "moved.csv")
