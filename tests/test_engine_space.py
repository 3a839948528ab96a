"""The engines on a file system that fills: Filebench's and fio's own words, and the free-space watch that
says how full it got during the run. Marked `device`: they need root (they mount small tmpfs)."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.device,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root"),
]


@pytest.mark.skipif(shutil.which("filebench") is None,
                    reason="filebench is not on PATH (no package registry has it: build it from source)")
def test_a_full_file_system_under_filebench_fails_with_filebenchs_own_words(tmp_path):
    from storetune.runners.device.engines import EngineOutputError, run_filebench
    from storetune.runners.device.personalities import KIB, MIB, Personality
    from storetune.runners.device.shell import Shell

    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(small)], check=True)
    from storetune.runners.device.host import HostSettings

    host = HostSettings(Shell())  # ASLR is the host's: changed as a measurement changes it, under the lock
    try:
        with host.hold(exclusive=True, timeout_s=600), host.changed(Path("/proc/sys/kernel/randomize_va_space"), "0"):
            web = Personality("webserver", 100, 20, 16 * KIB, 2, MIB)  # 1.6 MB of pages and a log appended to
            with pytest.raises(EngineOutputError) as e:
                run_filebench(Shell(), web, str(small), tmp_path, 5, 120)
    finally:
        subprocess.run(["umount", str(small)], check=True)
    # a thread's write() either returns short (errno untouched: "Success") or fails with ENOSPC, whichever
    # comes first; a short write among the errors is explained
    reason = str(e.value)
    assert re.match(r"Filebench: Failed to write \d+ bytes on fd \d+: (Success|No space left on device); .*"
                    r"flowop appendlog-\d failed", reason)
    assert re.search(r"\((a short write: )?the file system filled during the run: as little as [01] of 3 MiB free "
                     r"\(sampled every 0.2 s\), \d+ MiB free after it\)$", reason), reason
    assert (": Success" in reason) == ("(a short write: " in reason)


def test_fio_out_of_space_says_how_full_the_file_system_got(tmp_path):
    """fio's ENOSPC is the FAILED reason, with what the free-space watch saw during the run."""
    from storetune.runners.device.engines import EngineOutputError, run_fio
    from storetune.runners.device.personalities import KIB, MIB, Personality
    from storetune.runners.device.shell import Shell

    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(small)], check=True)
    try:
        web = Personality("webserver", 20, 20, 16 * KIB, 2, MIB)  # 320 KiB of pages, a 64 MiB log
        with pytest.raises(EngineOutputError) as e:
            run_fio(Shell(), web, str(small), tmp_path, 3, 1, 120)
    finally:
        subprocess.run(["umount", str(small)], check=True)
    assert re.match(r"fio ran out of space \(the file system filled during the run: as little as 0 of 3 MiB free "
                    r"\(sampled every 0.2 s\), \d MiB free after it\): fio failed \(exit 1\): .*No space left on "
                    r"device", str(e.value)), str(e.value)
    assert e.value.errno == errno.ENOSPC


def test_the_free_space_watch_sees_a_file_system_fill_and_empty_during_a_run(tmp_path):
    """xfs under Filebench's fileserver fills a 1 GiB device for a moment and has half of it free after the
    run: the watch must see the moment, not only the after."""
    from storetune.runners.device.engines import FreeSpaceWatch

    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small)], check=True)
    try:
        with FreeSpaceWatch(str(small), every_s=0.05) as watch:
            time.sleep(0.2)
            with pytest.raises(OSError):  # ENOSPC
                (small / "fill").write_bytes(b"x" * (16 << 20))
            time.sleep(0.3)  # full for a few samples
            (small / "fill").unlink()
            time.sleep(0.2)
        words = watch.explain()
    finally:
        subprocess.run(["umount", str(small)], check=True)
    assert watch.least_free is not None and watch.least_free < 64 * 1024, watch.least_free
    assert re.fullmatch(r"the file system filled during the run: as little as 0 of 8 MiB free \(sampled every "
                        r"0.05 s\), 8 MiB free after it", words), words
