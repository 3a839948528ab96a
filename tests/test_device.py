"""The device runner on real loop devices: mkfs, mount, sysfs, fio, teardown, safety, reaping.

Marked `device`: they need root, fio, xfsprogs and btrfs-progs (`make test` installs them) and
take a few seconds each. Select them with `-m device`, skip them with `-m "not device"`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT
from storetune.runners import Status, make_runner
from storetune.runners.device.safety import UnsafeDevice, check_block_device
from storetune.runners.device.target import DeviceError

pytestmark = [
    pytest.mark.device,
    pytest.mark.skipif(os.geteuid() != 0, reason="the device runner needs root"),
    pytest.mark.skipif(shutil.which("fio") is None or shutil.which("mkfs.xfs") is None
                       or shutil.which("mkfs.btrfs") is None, reason="needs fio, xfsprogs, btrfs-progs (make test)"),
]


NOTHING = {"loops": [], "mounts": [], "processes": [], "files": [], "state": []}


def leftovers(loop_dir: Path) -> dict[str, list]:
    """What this test's runners left behind, and only that (other StoreTunes may be measuring on this
    machine): loop devices over a file in its loop directory, mounts under it, processes naming it,
    files in it, and entries in its private state directory."""
    here = f"{os.path.realpath(loop_dir)}/"
    loops = sorted(f"/dev/{node.name}" for node in Path("/sys/block").glob("loop*")
                   if _read(node / "loop" / "backing_file").startswith(here))
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    processes = [int(cmdline.parent.name) for cmdline in Path("/proc").glob("[0-9]*/cmdline")
                 if here.encode() in _read_bytes(cmdline)]
    files = sorted(str(p.relative_to(loop_dir)) for p in loop_dir.rglob("*")) if loop_dir.exists() else []
    state = Path(os.environ["STORETUNE_STATE_DIR"])
    return {"loops": loops, "mounts": [m for m in mounts if f"{m}/".startswith(here)], "processes": processes,
            "files": files, "state": sorted(p.name for p in state.iterdir()) if state.exists() else []}


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


@dataclass(frozen=True)
class Process:
    pid: int
    start: str

    def alive(self) -> bool:
        """Running (a zombie is dead: killed, its files closed, waiting for a parent to collect it)."""
        fields = _read(Path(f"/proc/{self.pid}/stat")).rsplit(")", 1)[-1].split()
        return len(fields) > 19 and fields[19] == self.start and fields[0] != "Z"


def fio_of(workdir: Path, run: subprocess.Popen, timeout_s: float = 120) -> Process:
    """The fio a runner started on a job file in its work folder to measure (not its create_only pass that
    lays the files out), once it runs, and a second more."""
    prefix = f"{workdir}/".encode()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert run.poll() is None, f"the run ended ({run.returncode}) before fio started"
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            argv = _read_bytes(cmdline).split(b"\0")
            job = [a for a in argv[1:] if a.startswith(prefix) and a.endswith(b".fio")]
            if job and os.path.basename(argv[0]) == b"fio" and b"--create_only=1" not in argv:
                pid = int(cmdline.parent.name)
                time.sleep(1.0)
                return Process(pid, _start_time(pid) or "gone")
        time.sleep(0.1)
    raise AssertionError(f"no fio ran on a job file in {workdir} within {timeout_s:g} s")


def group(pgid: int) -> list[int]:
    """The live processes of a process group."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _read(stat).rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


def _start_time(pid: int) -> str | None:
    fields = _read(Path(f"/proc/{pid}/stat")).rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def scheduler(device: str) -> str:
    return Path(f"/sys/block/{Path(device).name}/queue/scheduler").read_text().strip()


def state_files() -> list[Path]:
    return sorted(Path(os.environ["STORETUNE_STATE_DIR"]).glob("device-*.json"))


def queue_settings(device: str) -> dict[str, str]:
    queue = Path(f"/sys/block/{Path(device).name}/queue")
    return {name: (queue / name).read_text().strip() for name in ("scheduler", "read_ahead_kb", "nr_requests")}


@contextmanager
def queue_set_off_default(device: str) -> Iterator[Path]:
    """The device at mq-deadline with nr_requests 128 (mq-deadline's default is 256), as a user may
    have set it; whatever the test does, the device's queue is put back as it was before."""
    queue = Path(f"/sys/block/{Path(device).name}/queue")
    before = queue_settings(device)
    (queue / "scheduler").write_text("mq-deadline")
    (queue / "nr_requests").write_text("128")
    try:
        yield queue
    finally:
        (queue / "scheduler").write_text(re.search(r"\[(.+)\]", before["scheduler"]).group(1))
        (queue / "nr_requests").write_text(before["nr_requests"])


@pytest.fixture
def loop_dir(tmp_path_factory, monkeypatch) -> Path:
    monkeypatch.setenv("STORETUNE_STATE_DIR", str(tmp_path_factory.mktemp("state")))
    return Path(tmp_path_factory.mktemp("loops"))


def runner(loop_dir: Path, **kw):
    settings = dict(workload="varmail", runtime_s=2, loop_dir=str(loop_dir), loop_size_mib=512, fileset_mib=32)
    return make_runner("device", **{**settings, **kw})


@pytest.mark.parametrize("fs", ["ext2", "ext3", "ext4", "xfs", "btrfs"])
def test_each_file_system_is_built_measured_and_torn_down(loop_dir, fs):
    r = runner(loop_dir)
    config = r.space.validate({"fs": fs, "io_scheduler": "mq-deadline"}, fill_defaults=True)
    m = r.run(config, r.workload, seed=1)
    assert m.status is Status.SUCCEEDED, m.reason
    assert m.metrics["ops_per_s"] > 0 and m.metrics["lat_p99_us"] > 0
    assert m.env["engine"] == "fio" and m.env["loop_direct_io"] is True and m.env["fio_version"]
    assert m.env["kernel"] and m.env["device_size_bytes"] == 512 * 2**20 and m.env["loop_backing_fs"]
    left = leftovers(loop_dir)
    assert left["mounts"] == [] and left["processes"] == [] and len(left["loops"]) == 1  # unmounted after the run
    r.close()
    assert leftovers(loop_dir) == NOTHING  # its loop device, image, work folder and setup log are gone


def test_the_scheduler_is_switched_then_restored(loop_dir, caplog):
    r = runner(loop_dir)
    device = r.target().device
    original = queue_settings(device)
    config = r.space.validate({"fs": "ext4", "io_scheduler": "bfq", "read_ahead_kb": 16, "nr_requests": 64},
                              fill_defaults=True)
    m = r.run(config, r.workload, seed=2)
    assert m.status is Status.SUCCEEDED, m.reason
    assert m.env["queue"] == {"scheduler": "bfq", "read_ahead_kb": "16", "nr_requests": "64"}
    assert queue_settings(device) == original
    # the original nr_requests (256) is refused under 'none' until the original scheduler is back
    config = r.space.validate({"fs": "ext4", "io_scheduler": "none", "nr_requests": 32}, fill_defaults=True)
    m = r.run(config, r.workload, seed=2)
    assert m.status is Status.SUCCEEDED, m.reason
    assert queue_settings(device) == original and "could not restore" not in caplog.text
    [log] = state_files()  # nothing recorded but the loop device, its file and the work folder
    assert [e["kind"] for e in json.loads(log.read_text())["entries"]] == ["file", "loop", "tree"]
    r.close()
    assert leftovers(loop_dir) == NOTHING


def test_a_queue_set_off_its_scheduler_default_is_restored_as_it_was(loop_dir):
    """Writing a scheduler resets nr_requests to that scheduler's default, so the scheduler is
    restored first: a device at mq-deadline with nr_requests 128 (its default is 256) comes back so."""
    r = runner(loop_dir)
    with queue_set_off_default(r.target().device):
        original = queue_settings(r.target().device)
        config = r.space.validate({"fs": "ext4", "io_scheduler": "bfq", "nr_requests": 64}, fill_defaults=True)
        m = r.run(config, r.workload, seed=2)
        assert m.status is Status.SUCCEEDED, m.reason
        assert queue_settings(r.target().device) == original
        r.close()
    assert leftovers(loop_dir) == NOTHING


def test_a_runners_first_measurement_follows_a_discarded_warm_up(loop_dir):
    r = runner(loop_dir)
    refused = r.space.validate({"fs": "ext4", "io_scheduler": "none", "nr_requests": 256}, fill_defaults=True)
    assert r.run(refused, r.workload, seed=1).status is Status.INVALID  # no warm-up is spent on it
    config = r.space.validate({"fs": "ext4"}, fill_defaults=True)
    first, second = (r.run(config, r.workload, seed=s) for s in (1, 2))
    assert first.status is second.status is Status.SUCCEEDED
    assert len(first.env["warmup_ops_per_s"]) == 1 and first.env["warmup_ops_per_s"][0] > 0
    assert "warmup_ops_per_s" not in second.env and first.env["protocol"] == 2
    r.close()
    cold = runner(loop_dir, warmup_runs=0)
    assert "warmup_ops_per_s" not in cold.run(config, cold.workload, seed=1).env
    cold.close()
    assert leftovers(loop_dir) == NOTHING


def test_the_dirty_limit_holds_during_the_run_and_the_hosts_comes_back(loop_dir, monkeypatch):
    import storetune.runners.device.runner as device_runner

    from storetune.runners.device.shell import Shell
    from storetune.runners.device.host import HostSettings

    vm = Path("/proc/sys/vm")
    names = ("dirty_bytes", "dirty_background_bytes", "dirty_ratio", "dirty_background_ratio")
    with HostSettings(Shell()).hold(exclusive=False, timeout_s=600):  # not in the middle of another's change
        before = {n: (vm / n).read_text().strip() for n in names}
    during = {}

    def benchmark(*args, **kwargs):  # stands in for fio: what the host is set to while it would run
        during.update({n: (vm / n).read_text().strip() for n in names})
        return {"ops_per_s": 1.0}, None

    monkeypatch.setattr(device_runner, "run_fio", benchmark)
    r = runner(loop_dir, dirty_limit_mib=64, warmup_runs=0)
    m = r.run(r.space.validate({"fs": "ext4"}, fill_defaults=True), r.workload, seed=1)
    r.close()
    assert m.status is Status.SUCCEEDED, m.reason
    assert during["dirty_bytes"] == str(64 * 2**20) and during["dirty_background_bytes"] == str(16 * 2**20)
    assert {n: (vm / n).read_text().strip() for n in names} == before
    assert leftovers(loop_dir) == NOTHING


def test_a_setting_the_kernel_refuses_is_invalid(loop_dir):
    r = runner(loop_dir)
    # with no scheduler, nr_requests cannot exceed the loop device's hardware queue depth (128)
    config = r.space.validate({"fs": "ext4", "io_scheduler": "none", "nr_requests": 256}, fill_defaults=True)
    m = r.run(config, r.workload, seed=3)
    assert m.status is Status.INVALID
    assert "the kernel refused nr_requests=256" in m.reason
    r.close()
    assert leftovers(loop_dir) == NOTHING


def test_a_file_system_mkfs_refuses_is_invalid(loop_dir):
    r = runner(loop_dir, loop_size_mib=300)  # btrfs with mixed metadata/data dup needs more room than this
    config = r.space.validate({"fs": "xfs", "xfs_agcount": 16, "block_size": 1024}, fill_defaults=True)
    m = r.run(config, r.workload, seed=4)
    r.close()
    assert leftovers(loop_dir) == NOTHING
    if m.status is Status.SUCCEEDED:
        pytest.skip("this mkfs.xfs accepts 16 allocation groups of 18 MiB")
    assert m.status is Status.INVALID and m.reason.startswith("mkfs.xfs refused:")
    # the device's size is the cause, and the reason says what to change (it named only mkfs's words)
    assert m.reason.endswith("(on a 300 MiB loop device: a larger `loop_size_mib` may let it through)")
    # not where the configuration is at fault, whatever the size (mke2fs's and mkfs.btrfs's own words)
    assert r._size_hint("128 byte inodes are too small for inline data; specify larger size") == ""
    assert r._size_hint("ERROR: nodesize too small: 2048 < 4096") == ""


def test_a_timeout_tears_down(loop_dir):
    r = runner(loop_dir, runtime_s=30, timeout_s=3)
    m = r.run(r.space.default(), r.workload, seed=5)
    assert m.status is Status.TIMEOUT
    assert leftovers(loop_dir)["processes"] == []  # fio was killed with its process group
    r.close()
    assert leftovers(loop_dir) == NOTHING


def test_block_devices_must_be_allow_listed_unused_and_resolved_once(loop_dir, tmp_path):
    with pytest.raises(DeviceError, match="is not allow-listed"):
        runner(loop_dir, device="/dev/loop7")
    root = _root_disk()
    with pytest.raises(DeviceError, match="mounted on /"):
        runner(loop_dir, device=root, allow_device=[root])
    link = tmp_path / "by-id-disk"
    link.symlink_to(root)
    with pytest.raises(UnsafeDevice, match="mounted on /"):  # an allowed symlink to the root disk
        check_block_device(str(link), [str(link)])
    with pytest.raises(UnsafeDevice, match="not allow-listed"):  # a symlink to an allowed device is not allowed
        check_block_device(str(link), [root])
    spare = subprocess.run(["losetup", "-f"], capture_output=True, text=True).stdout.strip()
    spare_link = tmp_path / "spare"
    spare_link.symlink_to(spare)
    # the runner keeps the resolved device, so re-pointing the symlink later redirects nothing
    assert check_block_device(str(spare_link), [str(spare_link)]) == os.path.realpath(spare)


def _root_disk() -> str:
    from storetune.runners.device.safety import root_disks

    return f"/dev/{sorted(root_disks())[0]}"


def test_sigkill_mid_run_is_reaped_by_the_next_start(loop_dir, tmp_path):
    state = Path(os.environ["STORETUNE_STATE_DIR"])
    script = tmp_path / "victim.py"
    script.write_text(
        "from runners import make_runner\n"
        f"r = make_runner('device', workload='varmail', runtime_s=60, loop_dir={str(loop_dir)!r}, "
        "loop_size_mib=512, fileset_mib=32)\n"
        "r.run(r.space.validate({'fs': 'ext4', 'io_scheduler': 'kyber'}, fill_defaults=True), r.workload, seed=1)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    victim = subprocess.Popen([sys.executable, str(script)], env=env, start_new_session=True)
    try:
        fio = fio_of(loop_dir / f"run-{victim.pid}", victim)
        [device] = leftovers(loop_dir)["loops"]
        assert "[kyber]" in scheduler(device)
    finally:
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
    left = leftovers(loop_dir)
    assert left["mounts"] and left["loops"] and fio.pid in left["processes"]  # it left all that behind
    assert list(state.glob(f"device-{victim.pid}-*.json"))
    survivor = runner(loop_dir)  # the next start reaps
    left = leftovers(loop_dir)
    assert left["mounts"] == [] and left["processes"] == [] and not fio.alive() and not group(victim.pid)
    assert [d for d in left["loops"] if f"storetune-{victim.pid}-" in Path(d).name] == []
    assert [f for f in left["files"] if str(victim.pid) in f] == []  # its image and its work folder
    assert not list(state.glob(f"device-{victim.pid}-*.json"))
    survivor.close()
    assert leftovers(loop_dir) == NOTHING


def test_dry_run_touches_nothing(loop_dir, capsys):
    r = runner(loop_dir, dry_run=True, echo=print)
    m = r.run(r.space.validate({"fs": "btrfs", "btrfs_compress": "zstd"}, fill_defaults=True), r.workload, seed=1)
    r.close()
    out = capsys.readouterr().out
    assert "losetup --find --show --direct-io=on" in out and "mkfs.btrfs" in out and "compress=zstd" in out
    assert "fio --output-format=json" in out and "[global]" in out
    assert leftovers(loop_dir) == NOTHING
    assert m.status is Status.SUCCEEDED and m.metrics == {}
    # the warm-up a real run makes first is shown, not left out (a newcomer trial): two runs, each said
    warmup, measured = out.index("# warm-up run 1 of 1: this configuration, measured and discarded"), \
        out.index("# the measured run")
    assert out[:warmup].count("mkfs.btrfs") == 0 and out[warmup:measured].count("mkfs.btrfs") == 1
    assert out[measured:].count("mkfs.btrfs") == 1
    cold = runner(loop_dir, dry_run=True, echo=print, warmup_runs=0)
    cold.run(cold.space.default(), cold.workload, seed=1)
    cold.close()
    assert "warm-up" not in capsys.readouterr().out


@pytest.mark.parametrize("workload", ["fileserver", "varmail", "webserver", "oltp"])
def test_every_personality_runs_cleanly_under_fio(loop_dir, workload):
    r = runner(loop_dir, workload=workload, fileset_mib=256, loop_size_mib=1024)
    m = r.run(r.space.validate({"fs": "ext4"}, fill_defaults=True), r.workload, seed=1)
    r.close()
    assert leftovers(loop_dir) == NOTHING
    assert m.status is Status.SUCCEEDED, m.reason  # a fio job that could not run fails the measurement
    assert m.metrics["read_ops_per_s"] > 0 and m.metrics["write_ops_per_s"] > 0
    assert m.env["timings_s"]["benchmark"] >= 2  # it ran for its whole runtime


def test_a_fio_run_keeps_its_per_second_series_and_its_steady_state(loop_dir):
    """fio's per-second IOPS and bandwidth logs, summed over its jobs: one value a second of the run, whose mean
    is the run's figure (fio divides by its own clock: they differ by the seconds' edges and the last part
    second), and SNIA's steady-state test on it."""
    r = runner(loop_dir, workload="fileserver", runtime_s=6, fileset_mib=64)
    m = r.run(r.space.validate({"fs": "ext4"}, fill_defaults=True), r.workload, seed=1)
    r.close()
    assert m.status is Status.SUCCEEDED, m.reason
    s = m.series
    assert s is not None and s.interval_s == 1.0 and 5 <= len(s) <= 6, s
    assert all(v > 0 for v in s.values["ops_per_s"]) and len(s.values["mb_per_s"]) == len(s)
    assert s.mean("ops_per_s", len(s)) == pytest.approx(m.metrics["ops_per_s"], rel=0.25)
    assert s.mean("mb_per_s", len(s)) == pytest.approx(m.metrics["mb_per_s"], rel=0.25)
    assert set(s.to_dict()["steady"]) == {"reached", "from_s", "rule"}
    assert leftovers(loop_dir) == NOTHING


def test_a_watched_run_is_interrupted_at_the_rung_where_it_is_told_to_stop(loop_dir):
    """fio reports every second; at the 2 s rung the run is judged on its ops/s so far and, told to stop, fio is
    interrupted: the measurement is what it did in those seconds, and the device is freed at once."""
    from storetune.runners import WatchedRunner

    r = runner(loop_dir, workload="fileserver", runtime_s=8, fileset_mib=64, warmup_runs=0)
    assert isinstance(r, WatchedRunner) and r.full_length_s() == 8
    config = r.space.validate({"fs": "ext4"}, fill_defaults=True)
    spans, judged = [], []  # spans: the timed runs alone (the runner's seam for a traced run), not the layout

    @contextmanager
    def timed():
        started = time.monotonic()
        yield
        spans.append(time.monotonic() - started)

    r.timed = timed
    stopped = r.run_watched(config, r.workload, seed=1, rungs=(2, 8),
                            go_on=lambda k, metrics: judged.append((k, metrics)) or False)
    whole = r.run_watched(config, r.workload, seed=1, rungs=(2, 8), go_on=lambda k, metrics: True)
    r.close()
    assert stopped.status is Status.SUCCEEDED, stopped.reason
    assert [k for k, _ in judged] == [0] and judged[0][1]["ops_per_s"] > 0
    assert stopped.env["stopped_at_rung"] == 0 and stopped.env["run_length_s"] == 2
    # fio wrote its per-second logs up to the interruption: a second or two of the 8, or none whole
    assert stopped.metrics["ops_per_s"] > 0 and (stopped.series is None or len(stopped.series) <= 3)
    assert whole.status is Status.SUCCEEDED and "stopped_at_rung" not in whole.env and whole.env["run_length_s"] == 8
    assert whole.env["timings_s"]["benchmark"] >= 8 and whole.series is not None and len(whole.series) >= 7
    # fio was interrupted, not run whole: 6 s less of timed run (the layout, before it, takes what the load lets it)
    assert len(spans) == 2 and spans[0] + 4 < spans[1] and spans[1] >= 8, spans
    assert leftovers(loop_dir) == NOTHING


def test_fileserver_fits_btrfs_on_the_default_device(loop_dir):
    """fio's appenders once preallocated 640 MiB: fileserver ran out of space on btrfs at 1 GiB."""
    r = runner(loop_dir, workload="fileserver", fileset_mib=256, loop_size_mib=1024)
    m = r.run(r.space.validate({"fs": "btrfs"}, fill_defaults=True), r.workload, seed=1)
    r.close()
    assert m.status is Status.SUCCEEDED, m.reason


def test_a_run_that_would_fill_the_file_system_is_refused_before_it_starts(loop_dir):
    with pytest.raises(DeviceError, match=r"filebench's webserver with a 15 MiB fileset appends to its log "
                                          r"without bound \(about 100 MiB/s\), so a 10 s run needs a device of at "
                                          r"least 1600 MiB .*; loop has 1024 MiB: use `loop_size_mib` 1600 or a "
                                          r"smaller `fileset_mib`"):
        runner(loop_dir, workload="webserver", engine="filebench", runtime_s=10, loop_size_mib=1024, dry_run=True)
    with pytest.raises(DeviceError, match="fio's fileserver with a 253 MiB fileset needs a device of at least 449 MiB"):
        runner(loop_dir, workload="fileserver", loop_size_mib=400, fileset_mib=256, dry_run=True)
    runner(loop_dir, workload="fileserver", loop_size_mib=1024, fileset_mib=256, dry_run=True)  # fits
    assert leftovers(loop_dir) == NOTHING


def test_a_job_version_past_1_joins_the_workload_fingerprint(loop_dir, monkeypatch):
    """fio's job files are at version 2, varmail's at 3: its campaigns' fingerprints say so. Filebench's
    never changed, so its workload is the one recorded before versions existed, and those campaigns resume."""
    from storetune.runners.device.personalities import JOB_VERSIONS

    from storetune.runners.device.personalities import PERSONALITIES

    fio, fb = runner(loop_dir, dry_run=True), runner(loop_dir, engine="filebench", dry_run=True)
    assert JOB_VERSIONS["fio"] == {"fileserver": 2, "varmail": 3, "webserver": 2, "oltp": 2}
    assert set(JOB_VERSIONS["filebench"].values()) == {1}
    assert all(set(JOB_VERSIONS[e]) == set(PERSONALITIES) for e in JOB_VERSIONS)  # one per personality
    assert fio.workload.params["jobs"] == 3
    monkeypatch.setitem(JOB_VERSIONS["fio"], "varmail", 4)  # versions are per personality
    assert runner(loop_dir, dry_run=True).workload.params["jobs"] == 4
    assert runner(loop_dir, workload="oltp", dry_run=True).workload.params["jobs"] == 2
    assert set(fb.workload.params) == {"runtime_s", "fileset_mib", "nfiles", "nthreads", "filesize", "protocol"}
    assert leftovers(loop_dir) == NOTHING


@pytest.mark.skipif(shutil.which("filebench") is None,
                    reason="filebench is not on PATH (no package registry has it: build it from source)")
def test_filebench_engine_runs_the_real_binary(loop_dir):
    aslr = Path("/proc/sys/kernel/randomize_va_space")
    before = aslr.read_text()
    r = runner(loop_dir, workload="varmail", engine="filebench", runtime_s=3)
    m = r.run(r.space.validate({"fs": "xfs"}, fill_defaults=True), r.workload, seed=1)
    r.close()
    assert m.status is Status.SUCCEEDED, m.reason
    assert m.metrics["ops_per_s"] > 0 and m.env["engine"] == "filebench" and m.env["filebench_version"]
    assert aslr.read_text() == before  # Filebench runs with ASLR off; it is restored


def test_without_root_the_device_runner_says_so(loop_dir, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(DeviceError, match=r"^the device runner needs root \(losetup, mkfs, mount, sysfs\): run it "
                                          r"as root or with sudo$"):
        runner(loop_dir)


def test_storage_full_measures_the_ends_of_its_ranges_and_puts_the_dirty_limits_back(loop_dir):
    """storage_full's many-valued knobs at both ends of their ranges (the smallest loop device the runner makes,
    the largest journal, the deepest queue, the longest commit, the tightest and loosest dirty limits) are
    measured, not refused; the dirty limits are the configuration's during the run and the host's after it."""
    vm = Path("/proc/sys/vm")
    before = {name: (vm / name).read_text() for name in ("dirty_bytes", "dirty_ratio", "dirty_background_bytes",
                                                           "dirty_background_ratio")}
    r = runner(loop_dir, space="storage_full", runtime_s=1, loop_size_mib=300, fileset_mib=16)
    space = r.space
    ends = {p.name: (p.low, p.high) if p.low is not None else (p.values[0], p.values[-1])
            for p in space.parameters if p.name in ("inode_size", "commit_s", "journal_mib", "read_ahead_kb",
                                                    "nr_requests", "dirty_mib", "dirty_background_pct")}
    for end, block in ((0, 1024), (1, 4096)):
        config = space.validate({"fs": "ext4", "block_size": block, "io_scheduler": "mq-deadline",
                                 **{name: pair[end] for name, pair in ends.items()}}, fill_defaults=True)
        m = r.run(config, r.workload, seed=1)
        assert m.status is Status.SUCCEEDED, (config, m.reason)
        assert f"-J size={config['journal_mib']}" in m.env["mkfs"] and f"commit={config['commit_s']}" in m.env["mount_options"]
        assert m.env["queue"]["nr_requests"] == str(config["nr_requests"])
        limit = config["dirty_mib"]
        background = max(1, limit * config["dirty_background_pct"] // 100)  # in whole MiB
        assert m.env["dirty_mib"] == {"background": background, "limit": limit}
    assert {name: (vm / name).read_text() for name in before} == before
    r.close()
