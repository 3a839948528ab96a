"""`storetune tune --runner device` run as a user runs it, in a real subprocess on a real loop device: a
tune killed mid-benchmark and reaped by the next start, a host that stops a tune with exit 75 and the
resume it prints, and bad device options as one line."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from test_device import NOTHING, fio_of, group, leftovers, loop_dir, pytestmark, queue_settings  # noqa: F401 - fixture, marks


@pytest.mark.slow
def test_a_tune_killed_mid_benchmark_leaves_nothing_after_the_next_start(loop_dir, tmp_path):
    """A real `storetune tune` on a loop device, SIGKILLed while fio measures: the next start kills its
    fio, restores the queue settings it changed, unmounts, removes the work folder, detaches the loop
    device and removes its image; its setup log is gone."""
    from conftest import STORETUNE, run_cli

    state = Path(os.environ["STORETUNE_STATE_DIR"])
    tune = ["tune", "--runner", "device", "--loop-dir", str(loop_dir), "--loop-size-mib", "320", "--fileset-mib",
            "16", "--workload", "varmail", "--fix", "fs=ext4", "--fix", "io_scheduler=bfq", "--fix",
            "read_ahead_kb=16", "--fix", "nr_requests=64", "--budget", "1", "--seed", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STORETUNE_DATABASE_URL": f"sqlite:///{tmp_path / 'h.sqlite'}"}
    with open(tmp_path / "killed.err", "w") as err:
        killed = subprocess.Popen([*STORETUNE, *tune, "--runtime", "60"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                  stderr=err, start_new_session=True)
    workdir = loop_dir / f"run-{killed.pid}"
    try:
        fio = fio_of(workdir, killed)
        [device] = leftovers(loop_dir)["loops"]
        assert queue_settings(device) == {"scheduler": "none mq-deadline kyber [bfq]", "read_ahead_kb": "16",
                                          "nr_requests": "64"}
    finally:
        os.killpg(killed.pid, signal.SIGKILL)  # the runner's process group; fio has a session of its own
        killed.wait()
    assert fio.alive()  # the kill left the benchmark running, on a mounted file system
    left = leftovers(loop_dir)
    assert left["loops"] == [device] and left["mounts"] == [str(workdir / "mnt")]
    assert {"run-" + str(killed.pid), f"storetune-{killed.pid}-0.img"} <= set(left["files"])
    [log] = state.glob(f"device-{killed.pid}-*.json")
    restores = [f"restored {e['path']} = {e['original']}" for e in json.loads(log.read_text())["entries"]
                if e["kind"] == "sysfs"]
    assert len(restores) == 3  # undone last first, but the scheduler first of all (it resets nr_requests)

    after = run_cli(*tune, "--runtime", "1", env={"STORETUNE_DATABASE_URL": env["STORETUNE_DATABASE_URL"]})
    assert after.returncode == 0, after.stderr  # the next start reaps, then measures and closes its own
    said = [line.split("cleaned up after a runner that was killed: ", 1)[1] for line in after.stderr.splitlines()
            if "cleaned up after a runner that was killed: " in line]
    said = [re.sub(r" \(lazily: .*\)$", "", line) for line in said]  # a busy mount may still need the lazy way
    assert said == [f"killed process group {fio.pid}", restores[0], *restores[:0:-1], f"unmounted {workdir / 'mnt'}",
                    f"removed {workdir}", f"detached {device}", f"removed {loop_dir}/storetune-{killed.pid}-0.img"]
    assert "still in effect" not in after.stderr
    assert not fio.alive() and group(killed.pid) == [] and group(fio.pid) == []
    assert leftovers(loop_dir) == NOTHING  # no loop device, mount, process, image, work folder or setup log


def test_tune_stopped_by_the_host_exits_75_and_its_resume_measures_the_same_configuration(loop_dir, tmp_path):
    """A real `storetune tune` whose run cannot use the host-settings lock (a lock file anyone may write,
    as a planted one would be) stops with EX_TEMPFAIL (75), not the user-error 2: one error line that
    names the lock and the command that finishes the campaign, no configuration blamed, the device torn
    down. With the lock file put right, that command measures the same configuration."""
    from conftest import run_cli
    from storetune.tuner import History

    lock = tmp_path / "host.lock"  # a private lock: only this test's runs
    lock.touch()
    lock.chmod(0o666)
    db = f"sqlite:///{tmp_path / 'h.sqlite'}"
    env = {"STORETUNE_HOST_LOCK": str(lock)}
    proc = run_cli("tune", "--runner", "device", "--loop-dir", str(loop_dir), "--loop-size-mib", "320",
                   "--fileset-mib", "16", "--workload", "varmail", "--runtime", "1", "--fix", "fs=ext4",
                   "--budget", "1", "--seed", "1", "--json", db=db, env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 75, proc.stderr
    (error,) = [line for line in lines if line.startswith("error:")]
    assert f"refusing the host-settings lock {lock}" in error and "mode 666" in error
    assert leftovers(loop_dir) == NOTHING
    history = History(db)
    (campaign,) = history.campaigns()
    assert "no configuration is blamed" in error and error.endswith(f"Finish it with: storetune tune --resume {campaign.id} --db {db}")
    (stopped,) = history.trials(campaign.id)
    assert campaign.state == "failed" and stopped.status == "STALE"
    summary = json.loads(proc.stdout.strip().splitlines()[-1])  # --json: the line a script reads, here too
    assert summary["state"] == "failed" and summary["resume"] == f"storetune tune --resume {campaign.id} --db {db}"

    lock.chmod(0o600)
    again = run_cli("tune", "--resume", str(campaign.id), "--json", db=db, env=env)
    assert again.returncode == 0, again.stderr
    (retry,) = [t for t in history.trials(campaign.id) if t.retry_of == stopped.id]
    assert retry.status == "SUCCEEDED" and retry.config == stopped.config
    assert leftovers(loop_dir) == NOTHING


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["--device", "/dev/nope", "--allow-device", "/dev/nope"], {}, "/dev/nope: no such device"),
        (["--loop-size-mib", "100"], {}, "loop_size_mib: Input should be greater than or equal to 300"),
        (["--workload", "mailserver"], {}, "device runner: workload: Input should be 'fileserver', 'varmail'"),
        ([], {"PATH": "/usr/bin/nothing"}, "fio is not installed: apt-get install fio"),
    ],
)
def test_device_bad_input_is_one_line(sqlite_url, tmp_path, args, env, message):
    from conftest import run_cli
    from storetune.tuner import History

    extra = {"STORETUNE_STATE_DIR": str(tmp_path / "state"), **env}
    old = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        proc = run_cli("tune", "--runner", "device", "--loop-dir", str(tmp_path / "loops"), "--budget", "1", *args,
                       db=sqlite_url)
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    assert History(sqlite_url).campaigns() == []
