"""The contract every runner keeps (storetune.runners.contract), run against each of them, plus each runner's own
failures."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import shared
from storetune.runners import Runner, Status, make_runner
from storetune.runners.contract import RunnerContract
from storetune.search_spaces import Config

# A stand-in for a user's benchmark script: a deterministic function of the configuration.
BENCH = textwrap.dedent(
    """
    import json, os, sys, time, zlib
    config = json.loads(os.environ["STORETUNE_CONFIG"])
    time.sleep(float(os.environ.get("BENCH_SLEEP", "0")))
    if config.get("fs") == "btrfs" and os.environ.get("BENCH_REFUSE_BTRFS"):
        print("btrfs is not installed here", file=sys.stderr); sys.exit(77)
    if os.environ.get("BENCH_CRASH"):
        print("segmentation fault (core dumped)", file=sys.stderr); sys.exit(139)
    noise = zlib.crc32(os.environ["STORETUNE_SEED"].encode()) % 100 / 1000
    base = zlib.crc32(json.dumps(config, sort_keys=True).encode()) % 1000
    print("some benchmark chatter")
    print(json.dumps({"throughput_ops": base + config["block_size"] / 100 + noise, "latency_us": 1e6 / (base + 1)}))
    """
)


def bench_command(tmp_path: Path) -> str:
    script = tmp_path / "bench.py"
    script.write_text(BENCH)
    return f"{sys.executable} {script}"


class TestDatasetMoot(RunnerContract):
    def make(self, tmp_path: Path) -> Runner:
        return make_runner("dataset", dataset=str(shared("moot_configs/PostgreSQL.csv")))


class TestDatasetATC18(RunnerContract):
    def make(self, tmp_path: Path) -> Runner:
        return make_runner("dataset", dataset=str(shared("cao_atc18_subset")), context={"workload_id": 4, "disk_type": 0})


class TestCommand(RunnerContract):
    def make(self, tmp_path: Path) -> Runner:
        return make_runner("command", command=bench_command(tmp_path), space="storage_v1")


# --- the dataset runner ------------------------------------------------------------------------------
def test_dataset_draws_repeats_with_the_seed():
    runner = make_runner("dataset", dataset=str(shared("moot_configs/PostgreSQL.csv")))
    config = runner.space.members[0]
    draws = {runner.run(config, runner.workload, seed=s).env["repeat"] for s in range(60)}
    assert len(draws) > 10  # 22 repeats: the seed picks among them


def test_dataset_configuration_absent_from_the_table_is_invalid(tmp_path: Path):
    table = tmp_path / "t.csv"
    table.write_text("a,b,PERF-\n1,1,3\n1,2,4\n2,1,5\n")  # (2, 2) was not measured
    runner = make_runner("dataset", dataset=str(table))
    m = runner.run(Config(a=2, b=2), runner.workload, seed=0)
    assert m.status is Status.INVALID and "not present in t" in m.reason


def test_dataset_replays_recorded_failures(tmp_path: Path):
    table = tmp_path / "t.csv"
    table.write_text("fs,repeat,status,reason,ops\next4,0,SUCCEEDED,,10\nxfs,0,FAILED,fio crashed,\n")
    runner = make_runner("dataset", dataset=str(table))
    m = runner.run(Config(fs="xfs"), runner.workload, seed=0)
    assert (m.status, m.reason) == (Status.FAILED, "fio crashed")


# --- the command runner ------------------------------------------------------------------------------
def _command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> Runner:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return make_runner("command", command=bench_command(tmp_path), space="storage_v1", timeout_s=2)


def test_command_exit_77_is_invalid_with_its_stderr(tmp_path, monkeypatch):
    runner = _command(tmp_path, monkeypatch, BENCH_REFUSE_BTRFS="1")
    config = runner.space.validate({"fs": "btrfs"}, fill_defaults=True)
    m = runner.run(config, runner.workload, seed=0)
    assert (m.status, m.reason) == (Status.INVALID, "btrfs is not installed here")


def test_command_crash_is_failed_with_its_exit_status(tmp_path, monkeypatch):
    runner = _command(tmp_path, monkeypatch, BENCH_CRASH="1")
    m = runner.run(runner.space.default(), runner.workload, seed=0)
    assert m.status is Status.FAILED
    assert m.reason == "exit status 139: segmentation fault (core dumped)"


def test_command_that_hangs_is_a_timeout(tmp_path, monkeypatch):
    runner = _command(tmp_path, monkeypatch, BENCH_SLEEP="30")
    m = runner.run(runner.space.default(), runner.workload, seed=0)
    assert m.status is Status.TIMEOUT and m.duration_s == 2


def test_command_without_json_is_failed(tmp_path):
    runner = make_runner("command", command="echo hello", space="storage_v1")
    m = runner.run(runner.space.default(), runner.workload, seed=0)
    assert m.status is Status.FAILED and "not a JSON object" in m.reason


def test_command_that_does_not_exist_is_refused_before_a_trial_and_failed_if_it_vanishes(tmp_path):
    with pytest.raises(ValueError, match="`command`: /no/such/benchmark: no such file"):
        make_runner("command", command="/no/such/benchmark --fast", space="storage_v1")
    script = tmp_path / "bench.sh"
    script.write_text("#!/bin/sh\necho '{\"ops\": 1}'\n")
    script.chmod(0o755)
    runner = make_runner("command", command=f"{script} --fast", space="storage_v1")
    script.unlink()  # gone after the campaign started: that trial fails, saying why
    m = runner.run(runner.space.default(), runner.workload, seed=0)
    assert m.status is Status.FAILED and f"cannot start {script}" in m.reason


def test_quoted_semicolons_are_words_and_bare_ones_are_refused(tmp_path):
    """The refusal's own advice, sh -c '...;', was refused by the first check (any word ending in ;)."""
    runner = make_runner("command", command="""sh -c 'echo "{\\"ops\\": 1}"; true'""", space="storage_v1")
    m = runner.run(runner.space.default(), runner.workload, seed=0)
    assert m.status is Status.SUCCEEDED and m.metrics == {"ops": 1.0}
    with pytest.raises(ValueError, match="'\\|' is a shell operator"):
        make_runner("command", command="sh -c true | tee x", space="storage_v1")


@pytest.mark.parametrize("printed, reason", [('{"x": true}', "metric 'x' is True, not a JSON number"),
                                              ('{"x": "12.5"}', "metric 'x' is '12.5', not a JSON number")])
def test_a_metric_is_a_json_number(tmp_path, printed, reason):
    script = tmp_path / "bench.sh"
    script.write_text(f"#!/bin/sh\necho '{printed}'\n")
    script.chmod(0o755)
    runner = make_runner("command", command=str(script), space="storage_v1")
    m = runner.run(runner.space.default(), runner.workload, seed=0)
    assert m.status is Status.FAILED and m.reason == reason


def test_a_failed_system_command_reads_error_first():
    """A FAILED trial's reason showed the command, and its error was cut off in the trials table."""
    from storetune.runners.device.shell import CommandFailed, Result

    failed = CommandFailed(Result(("fio", "--output-format=json", "/var/tmp/storetune/run-1/fileserver.fio"), 1, "",
                                  "fio: pid=12, err=28/file:io_u.c:1845, func=io_u error, error=No space left on device",
                                  0.5))
    assert str(failed) == ("fio failed (exit 1): fio: pid=12, err=28/file:io_u.c:1845, func=io_u error, error=No space "
                           "left on device; command: fio --output-format=json /var/tmp/storetune/run-1/fileserver.fio")
