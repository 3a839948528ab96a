"""The reaper (runners/device/state.py) on states written by hand: what it cannot undo stays recorded
and is said, it never undoes what a live runner holds, and it removes a work folder only after its
mount and never through a symlink. Real loop devices and mounts, so marked `device` like test_device."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from contextlib import nullcontext
from pathlib import Path

import pytest

from storetune.runners import Status
from storetune.runners.device.shell import Result, Shell
from storetune.runners.device.state import Reaped, reap
from test_device import NOTHING, _read, leftovers, loop_dir, pytestmark, state_files  # noqa: F401 - fixture, marks


def dead_pid() -> int:
    """The pid of a process that has ended (recorded with a start time no live process has)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def write_state(pid: int, *entries: dict) -> Path:
    state = Path(os.environ["STORETUNE_STATE_DIR"])
    state.mkdir(parents=True, exist_ok=True)
    path = state / f"device-{pid}-0-0.json"
    path.write_text(json.dumps({"pid": pid, "start": "0", "entries": [{"id": i, **e} for i, e in enumerate(entries)]}))
    return path


class Refusing(Shell):
    """Runs commands for real, except the ones it refuses as a busy system would."""

    def __init__(self, *refused: str):
        super().__init__()
        self.refused = refused

    def run(self, argv, *, timeout=None, check=True):
        if argv[0] in self.refused:
            return Result(tuple(argv), 32, "", f"{argv[0]}: {argv[-1]}: target is busy.\n", 0.0)
        return super().run(argv, timeout=timeout, check=check)


def test_the_reaper_keeps_what_it_could_not_undo_and_says_so(loop_dir, tmp_path):
    not_a_setting = tmp_path / "scheduler"
    not_a_setting.mkdir()  # a write to it fails, as the kernel's refusal would
    busy = tmp_path / "busy"
    (busy / "inside").mkdir(parents=True)
    path = write_state(dead_pid(), {"kind": "sysfs", "path": str(not_a_setting), "original": "mq-deadline"},
                       {"kind": "sysfs", "path": "/sys/block/loop999/queue/scheduler", "original": "none"},
                       {"kind": "file", "path": str(busy)}, {"kind": "file", "path": str(tmp_path / "gone.img")})
    garbage = path.with_name("device-1-0-0.json")
    garbage.write_text('{"pid": 1, "entr')  # written by something else, or a disk that failed
    reaped = reap(Shell())
    assert reaped.done == []  # the vanished sysfs node and file left nothing to undo
    assert reaped.failed == [f"could not read {garbage}: Unterminated string starting at: line 1 column 12 (char 11);"
                             " left in place, nothing it records was undone",
                             f"could not remove {busy}: Is a directory",
                             f"could not restore {not_a_setting} = mq-deadline: Is a directory"]
    assert [e["path"] for e in json.loads(path.read_text())["entries"]] == [str(not_a_setting), str(busy)]
    assert garbage.exists()
    not_a_setting.rmdir()  # its device went away: nothing left to undo
    shutil.rmtree(busy)
    garbage.unlink()
    assert reap(Shell()) == Reaped() and state_files() == []


def test_what_a_live_runner_holds_is_never_reaped_for_a_dead_one_of_the_same_pid(loop_dir):
    """A reused pid reuses the names run-<pid> and storetune-<pid>-<n>.img: a dead runner's entry
    whose undo failed must not remove the live runner's folder (the review's finding)."""
    workdir = loop_dir / "run-4242"
    (workdir / "mnt").mkdir(parents=True)
    write_state(dead_pid(), {"kind": "tree", "path": str(workdir)})
    live = Path(os.environ["STORETUNE_STATE_DIR"]) / f"device-{os.getppid()}-live.json"
    start = Path(f"/proc/{os.getppid()}/stat").read_text().rsplit(")", 1)[1].split()[19]
    live.write_text(json.dumps({"pid": os.getppid(), "start": start, "entries": [{"id": 1, "kind": "tree",
                                                                                  "path": str(workdir)}]}))
    try:
        assert reap(Shell()) == Reaped()
        assert workdir.is_dir()
    finally:
        live.unlink()
        workdir.joinpath("mnt").rmdir()
        workdir.rmdir()


def test_the_work_folder_is_reaped_only_after_its_mount_and_never_through_a_symlink(loop_dir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not the runner's")
    workdir = loop_dir / "run-4242"
    (workdir / "mnt").mkdir(parents=True)
    (workdir / "varmail.fio").write_text("[global]\n")
    (workdir / "to-outside").symlink_to(outside)
    (workdir / "to-keep").symlink_to(outside / "keep")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(workdir / "mnt")], check=True)
    try:
        (workdir / "mnt" / "data").write_text("on the mounted file system")
        path = write_state(dead_pid(), {"kind": "tree", "path": str(workdir)},
                           {"kind": "mount", "path": str(workdir / "mnt"), "device": "tmpfs"})
        reaped = reap(Refusing("umount"))
        assert reaped.failed == [f"could not unmount {workdir / 'mnt'}: umount: {workdir / 'mnt'}: target is busy.",
                                 f"could not remove {workdir}: {workdir / 'mnt'} is still mounted"]
        assert (workdir / "mnt" / "data").exists() and len(json.loads(path.read_text())["entries"]) == 2
        reaped = reap(Shell())
        assert reaped == Reaped(done=[f"unmounted {workdir / 'mnt'}", f"removed {workdir}"])
    finally:
        if (workdir / "mnt").is_mount():
            subprocess.run(["umount", str(workdir / "mnt")], check=True)
    assert not workdir.exists() and (outside / "keep").read_text() == "not the runner's"
    assert leftovers(loop_dir) == NOTHING


def test_a_loop_device_that_stays_attached_stays_recorded(loop_dir):
    image = loop_dir / "storetune-4242-0.img"
    subprocess.run(["truncate", "-s", "1M", str(image)], check=True)
    device = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True,
                            check=True).stdout.strip()
    try:  # killed after losetup attached it, before the runner knew which device it was
        write_state(dead_pid(), {"kind": "file", "path": str(image)},
                    {"kind": "loop", "file": str(image), "device": None})
        reaped = reap(Refusing("losetup"))
        assert reaped.failed == [f"could not detach {device} ({image}): losetup: {device}: target is busy."]
        assert reaped.done == [f"removed {image}"]  # the kernel keeps the deleted file while it is attached
        assert reap(Shell()) == Reaped(done=[f"detached {device}"])
    finally:
        if _read(Path("/sys/block") / Path(device).name / "loop" / "backing_file").startswith(str(image)):
            subprocess.run(["losetup", "-d", device], check=True)
    assert leftovers(loop_dir) == NOTHING


def test_a_killed_runners_queue_comes_back_scheduler_first(loop_dir):
    """Writing a scheduler resets nr_requests to its default: the reaper restores the scheduler
    before the nr_requests recorded after it, so a queue set off its scheduler's default comes back."""
    from test_device import queue_set_off_default, queue_settings, runner

    r = runner(loop_dir)
    target = r.target()
    with queue_set_off_default(target.device) as queue:
        original = queue_settings(target.device)
        (queue / "scheduler").write_text("bfq")  # what the killed runner set
        (queue / "nr_requests").write_text("64")
        write_state(dead_pid(),
                    {"kind": "sysfs", "path": str(queue / "scheduler"), "original": "mq-deadline",
                     "backing_file": target.backing_file},
                    {"kind": "sysfs", "path": str(queue / "nr_requests"), "original": "128",
                     "backing_file": target.backing_file})
        reaped = reap(Shell())
        assert reaped.failed == [] and len(reaped.done) == 2
        assert queue_settings(target.device) == original
        r.close()
    assert leftovers(loop_dir) == NOTHING


def test_a_killed_test_session_s_loop_devices_are_detached_by_the_next_session(loop_dir, tmp_path):
    """Each test keeps its runners' state in its own folder under pytest's temporary folder, which no
    later runner reads: the next session reaps the folders of sessions whose `.lock` names a dead pid,
    and leaves a live session's alone."""
    from conftest import reap_killed_sessions

    image = loop_dir / "storetune-4242-1.img"
    subprocess.run(["truncate", "-s", "1M", str(image)], check=True)
    device = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True,
                            check=True).stdout.strip()
    killed, live = tmp_path / "pytest-7", tmp_path / "pytest-8"
    entry = {"id": 1, "kind": "loop", "file": str(image), "device": device}
    for session, owner in ((killed, dead_pid()), (live, os.getpid())):
        state = session / "popen-gw1" / "test_x0" / "state"
        state.mkdir(parents=True)
        (session / ".lock").write_text(str(owner))
        runner = dead_pid()
        (state / f"device-{runner}-0-0.json").write_text(json.dumps({"pid": runner, "start": "0", "entries": [entry]}))
    try:
        assert reap_killed_sessions(tmp_path) == [f"detached {device}"]
        assert not list(killed.rglob("device-*.json")) and len(list(live.rglob("device-*.json"))) == 1
        assert reap_killed_sessions(tmp_path) == []  # the live session's dead runner is its own to reap
    finally:
        if _read(Path("/sys/block") / Path(device).name / "loop" / "backing_file").startswith(str(image)):
            subprocess.run(["losetup", "-d", device], check=True)
    assert leftovers(loop_dir)["loops"] == []



def test_host_wide_settings_are_one_measurement_s_at_a_time(loop_dir, monkeypatch):
    """vm.dirty_bytes (and ASLR for Filebench) are the host's: a run that changes them waits until no other
    measurement on the host runs, and a plain run waits while another run has them changed, so no
    measurement runs under another's setting or takes it for the host's own (HostSettings, the real lock:
    the test's holds stand for another StoreTune's measurements)."""
    import fcntl
    import threading

    import storetune.runners.device.runner as device_runner
    from storetune.runners.device.host import HostSettings
    from test_device import runner

    dirty = Path("/proc/sys/vm/dirty_bytes")
    with HostSettings(Shell()).hold(exclusive=False, timeout_s=600):  # not in the middle of another's change
        before = dirty.read_text().strip()
    seen = []
    blocked = threading.Event()
    flock = fcntl.flock

    def noting_flock(fd, operation):  # tells the test when the run finds the lock taken
        try:
            return flock(fd, operation)
        except BlockingIOError:
            blocked.set()
            raise

    def benchmark(*args, **kwargs):  # stands in for fio: what the host is set to while it would run
        seen.append(dirty.read_text().strip())
        return {"ops_per_s": 1.0}, None

    monkeypatch.setattr(device_runner, "run_fio", benchmark)
    for limited, other_changes in ((True, False), (False, True)):
        r = runner(loop_dir, dirty_limit_mib=64 if limited else 0, warmup_runs=0)
        config = r.space.validate({"fs": "ext2"}, fill_defaults=True)
        drops, write = [], r.shell.write

        def noting_write(path, value, _write=write, _drops=drops):  # the page-cache drops, which are host-wide
            if "drop_caches" in str(path):
                _drops.append(time.monotonic())
            return _write(path, value)

        r.shell.write = noting_write
        out, other = [], HostSettings(Shell())
        blocked.clear()
        with other.hold(exclusive=other_changes, timeout_s=60):
            # dirty_bytes is 0 (unset) by default, and 0 cannot be written back: the ratio restores it
            restore = dirty if before != "0" else Path("/proc/sys/vm/dirty_ratio")
            with other.changed(dirty, str(96 * 2**20), restore) if other_changes else nullcontext():
                monkeypatch.setattr(fcntl, "flock", noting_flock)
                run = threading.Thread(target=lambda: out.append(r.run(config, r.workload, seed=1)))  # noqa: B023
                run.start()
                assert blocked.wait(timeout=60)
                time.sleep(0.5)
                assert seen == []  # it waits
                assert drops == []  # and drops no page cache under the holder's run: that is under the lock too
                assert dirty.read_text().strip() == (str(96 * 2**20) if other_changes else before)  # untouched
                monkeypatch.setattr(fcntl, "flock", flock)
        run.join(timeout=120)
        r.close()
        m = out[0]
        assert m.status is Status.SUCCEEDED, m.reason
        timings = m.env["timings_s"]
        assert timings["host_lock_wait"] >= 0.5 and timings["benchmark"] < timings["host_lock_wait"]
        assert len(drops) == 1 and "settle" in timings  # fio, which drops it again after its layout, is stood in for
        assert seen.pop() == (str(64 * 2**20) if limited else before)  # its own limit, or the host's own value
        assert dirty.read_text().strip() == before
    assert leftovers(loop_dir) == NOTHING


def test_a_dead_runners_host_wide_setting_is_reaped_from_the_lock_s_journal_never_beneath_a_live_one(
        loop_dir, tmp_path, monkeypatch):
    """The reaper restores a dead runner's host-wide entry through the lock: while a live measurement holds
    the host's settings it waits for the next start; then the journal's original is put back, or, for an
    entry never journalled, the setup log's."""
    from storetune.runners.device.host import HOST_LOCK, HostSettings

    real = HostSettings(Shell(), Path(HOST_LOCK))  # the test writes a real setting (its own value): as a measurement
    monkeypatch.setenv("STORETUNE_HOST_LOCK", str(tmp_path / "host.lock"))  # a private lock: its journal is ours
    with real.hold(exclusive=True, timeout_s=600):
        dirty, background = "/proc/sys/vm/dirty_ratio", "/proc/sys/vm/dirty_background_ratio"
        now = Path(dirty).read_text().strip()  # "restored" to its own value: the host is left as it is
        also = Path(background).read_text().strip()
        path = write_state(dead_pid(), {"kind": "sysfs", "path": background, "original": "1", "journalled": True},
                           {"kind": "sysfs", "path": dirty, "original": "1", "journalled": True})
        holder = HostSettings(Shell())
        with holder.hold(exclusive=True, timeout_s=5):  # a live measurement, later killed
            holder._save({background: also, dirty: now})  # journalled, never restored: as a killed holder leaves it
            reaped = reap(Shell())
        assert reaped.done == [] and reaped.failed == [
            f"could not check {p} yet (to restore 1): another measurement on this host holds its host-wide settings"
            for p in (dirty, background)]
        assert len(json.loads(path.read_text())["entries"]) == 2  # kept for the next start
        # the journal's originals, the whole journal said once
        assert reap(Shell()) == Reaped(done=[f"restored {background} = {also}, {dirty} = {now}"], failed=[])
        assert not path.exists() and (tmp_path / "host.lock").read_text() == ""
        path = write_state(dead_pid(), {"kind": "sysfs", "path": dirty, "original": "1", "journalled": True})
        assert reap(Shell()) == Reaped(done=[], failed=[]) and not path.exists()  # restored already: left alone
        write_state(dead_pid(), {"kind": "sysfs", "path": dirty, "original": now})  # killed before it journalled
        assert reap(Shell()) == Reaped(done=[f"restored {dirty} = {now}"], failed=[])
        assert Path(dirty).read_text().strip() == now


def test_a_run_that_waits_too_long_for_the_host_stops_its_campaign_and_blames_no_configuration(
        loop_dir, tmp_path, monkeypatch, sqlite_url):
    """A run that cannot get the host-settings lock in time (another measurement keeps it) is not the
    configuration's failure: the campaign stops, resumable, with nothing FAILED and the device torn down,
    and on resume the same configuration is measured."""
    import storetune.runners.device.runner as device_runner
    from storetune.runners import HostUnavailable
    from storetune.runners.device.host import HostSettings
    from test_device import runner
    from storetune.tuner import Campaign, CampaignSpec, History

    class Impatient(HostSettings):  # a one-second wait instead of the run's timeout plus 300 s
        def hold(self, *, exclusive, timeout_s):
            return super().hold(exclusive=exclusive, timeout_s=1.0)

    monkeypatch.setenv("STORETUNE_HOST_LOCK", str(tmp_path / "host.lock"))  # a private lock: only this test's runs
    monkeypatch.setattr(device_runner, "HostSettings", Impatient)
    monkeypatch.setattr(device_runner, "run_fio", lambda *a, **kw: ({"ops_per_s": 1.0, "mb_per_s": 1.0,
                                                                      "lat_mean_us": 1.0, "lat_p99_us": 1.0}, None))
    history = History(sqlite_url)
    r = runner(loop_dir, warmup_runs=0)
    config = r.space.validate({"fs": "ext2"}, fill_defaults=True)  # one configuration the device takes
    campaign = Campaign.create(history, CampaignSpec(runner="device", runner_settings=r.settings(), budget=1,
                                                     fixed=dict(config)), runner=r)
    with HostSettings(Shell()).hold(exclusive=True, timeout_s=5):  # another measurement, changing the host
        with pytest.raises(HostUnavailable, match="kept its host-wide settings .* no configuration is blamed"):
            campaign.run()
    assert leftovers(loop_dir) == NOTHING
    record = history.campaign(campaign.id)
    assert record.state == "failed" and f"--resume {campaign.id}" in record.note
    (stopped,) = history.trials(campaign.id)
    assert stopped.status == "STALE"

    summary = Campaign.resume(history, campaign.id).run()
    assert summary.trials_by_status == {"SUCCEEDED": 1, "STALE": 1}
    (retry,) = [t for t in history.trials(campaign.id) if t.retry_of == stopped.id]
    assert retry.config == stopped.config == config and retry.status == "SUCCEEDED"
    assert leftovers(loop_dir) == NOTHING
