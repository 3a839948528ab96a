"""HostSettings (runners/device/host.py), the lock that makes host-wide settings one measurement's at a time,
on a private lock and stand-in "settings" in a temporary folder: no root, no device."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT
from storetune.runners.device.shell import Shell
from storetune.runners.device.host import HostBusy, HostSettings


@pytest.fixture
def lock(tmp_path) -> Path:
    return tmp_path / "host.lock"


def holder(lock: Path, setting: Path, value: str) -> subprocess.Popen:
    """Another process that takes the lock exclusively, changes ``setting`` and then only sleeps."""
    proc = subprocess.Popen([sys.executable, "-c", f"""
import time
from pathlib import Path
from storetune.runners.device.shell import Shell
from storetune.runners.device.host import HostSettings
host = HostSettings(Shell(), Path({str(lock)!r}), frozenset({{{str(setting)!r}}}))
held = host.hold(exclusive=True, timeout_s=5)
held.__enter__()
change = host.changed(Path({str(setting)!r}), {value!r})
change.__enter__()
print("changed", flush=True)
time.sleep(300)
"""], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout.readline().strip() == "changed"
    return proc


@pytest.mark.parametrize("next_holder", ["shared", "exclusive"])
def test_a_killed_holders_setting_is_put_back_by_whoever_holds_the_lock_next(lock, tmp_path, next_holder):
    """SIGKILL frees the lock at once but leaves the setting changed: the next holder, even one that only
    shares the lock to measure, first restores the original the killed holder journalled."""
    setting = tmp_path / "randomize_va_space"
    setting.write_text("2\n")
    proc = holder(lock, setting, "0")
    try:
        assert setting.read_text().strip() == "0"
        with pytest.raises(HostBusy, match="kept its host-wide settings"):  # held: a bounded wait, then one line
            with HostSettings(Shell(), lock, frozenset({str(setting)})).hold(exclusive=False, timeout_s=0.3):
                pass
    finally:
        proc.kill()
        proc.wait()
    assert setting.read_text().strip() == "0"  # the kill left it changed
    host = HostSettings(Shell(), lock, frozenset({str(setting)}))
    with host.hold(exclusive=next_holder == "exclusive", timeout_s=5):
        assert setting.read_text().strip() == "2" and host.restored == {str(setting): "2"}
    assert lock.read_text() == ""  # nothing left journalled
    with host.hold(exclusive=True, timeout_s=5):
        with host.changed(setting, "0") as original:
            assert original == "2" and setting.read_text().strip() == "0"
            assert host.pending(setting)
        assert setting.read_text().strip() == "2" and not host.pending(setting)


def test_a_stream_of_shared_holders_does_not_starve_one_that_waits_to_change_settings(lock):
    """Two measurements that overlap without end would keep a flock shared forever; the turnstile makes them
    wait behind a run that waits for the lock exclusively."""
    stop = threading.Event()

    def measure_forever(offset: float) -> None:
        time.sleep(offset)
        while not stop.is_set():
            with HostSettings(Shell(), lock).hold(exclusive=False, timeout_s=30):
                time.sleep(0.3)

    streams = [threading.Thread(target=measure_forever, args=(offset,)) for offset in (0.0, 0.15)]
    for t in streams:
        t.start()
    try:
        time.sleep(0.5)
        with HostSettings(Shell(), lock).hold(exclusive=True, timeout_s=10) as waited:
            assert waited < 5
    finally:
        stop.set()
        for t in streams:
            t.join()


def test_only_the_host_settings_storetune_changes_are_restored_from_a_safe_lock_file(lock, tmp_path):
    """Root restores what the lock file journals, so the file must be root's alone, and a journal naming
    anything but the settings StoreTune changes (or a value that is not a number) is left alone."""
    setting, other = tmp_path / "setting", tmp_path / "core_pattern"
    setting.write_text("5\n")
    other.write_text("core\n")
    lock.write_text(f'{{"{setting}": "7", "{other}": "|/tmp/x"}}')
    os.chmod(lock, 0o600)
    host = HostSettings(Shell(), lock, frozenset({str(setting)}))
    with host.hold(exclusive=True, timeout_s=5):
        pass
    assert setting.read_text().strip() == "7" and other.read_text().strip() == "core" and lock.read_text() == ""
    with pytest.raises(RuntimeError, match="not a host setting"):
        with host.hold(exclusive=True, timeout_s=5), host.changed(other, "x"):
            pass
    lock.write_text("[1, 2]")  # parsable, not a journal: said, and nothing restored
    with host.hold(exclusive=True, timeout_s=5):
        pass
    os.chmod(lock, 0o666)  # writable by anyone: refused
    with pytest.raises(OSError, match="refusing the host-settings lock"):
        with host.hold(exclusive=False, timeout_s=5):
            pass
    os.chmod(lock, 0o600)
    lock.unlink()
    lock.symlink_to(tmp_path / "elsewhere")  # a planted link: refused, not followed
    with pytest.raises(OSError, match="cannot open the host-settings lock"):
        with host.hold(exclusive=False, timeout_s=5):
            pass
    assert not (tmp_path / "elsewhere").exists()
