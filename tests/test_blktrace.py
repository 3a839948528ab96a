"""The traced run (runners/device/blktrace.py): blkparse's output read into a Trace, the error when blktrace
is missing, and short traced runs on loop devices each test makes (marked as tests/test_device.py marks its
device tests; they check only what they made)."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from storetune.runners.device import blkparse, blktrace, tracefs
from storetune.runners.device.blkparse import BLKPARSE_FORMAT, TraceUnavailable, parse_blkparse
from storetune.runners.device.blktrace import traced_run
from storetune.runners.device.host import FTRACE_LOCK
from storetune.runners.settings import DeviceSettings
from test_device import _read, _read_bytes

FIXTURE = Path(__file__).parent / "data" / "blktrace" / "varmail-ext4.txt"  # make_fixture.sh beside it


def test_blkparse_output_becomes_one_io_per_issued_request():
    run = parse_blkparse(FIXTURE.read_text(), source=str(FIXTURE))
    trace, meta = run.trace, run.meta
    lines = FIXTURE.read_text().splitlines()
    issued = [line.split() for line in lines if line.split()[0] == "D"]
    with_data = [f for f in issued if int(f[3]) > 0]
    assert len(trace) == meta["ios"] == len(with_data) > 0
    assert meta["flushes_without_data"] == len(issued) - len(with_data)
    assert meta["reads"] > 0 and meta["writes"] > 0 and meta["metadata_ios"] > 0
    assert (trace.size % 512 == 0).all() and (trace.size > 0).all() and (trace.offset % 512 == 0).all()
    assert (np.diff(trace.ts_ms) >= 0).all() and (trace.submit_ms >= trace.ts_ms).all()
    assert (trace.latency_us > 0).all() and (trace.returned == trace.size).all()
    assert run.pid is not None and len(run.pid) == len(trace)
    # the first request, by hand: Q RAM 520 8 at 0 s, D at the first "D" line, its C after
    q = next(f for f in (line.split() for line in lines) if f[0] == "Q")
    d = next(f for f in issued if f[2] == q[2])
    c = next(f for f in (line.split() for line in lines) if f[0] == "C" and f[2] == q[2] and f[3] == d[3])
    ns = lambda f: int(f[4]) * 10**9 + int(f[5])  # noqa: E731
    assert trace.ts_ms[0] == 0.0 and trace.is_read[0] == ("R" in d[1])
    assert trace.offset[0] == int(q[2]) * 512 and trace.size[0] == int(d[3]) * 512
    assert trace.submit_ms[0] == pytest.approx(ns(d) / 1e6)
    assert trace.latency_us[0] == pytest.approx((ns(c) - ns(d)) / 1e3)


def test_a_request_without_its_completion_has_no_latency_and_unknown_returned():
    text = "Q W 100 8 0 000000100 7 0 fio\nD W 100 8 0 000000200 7 0 fio\n" \
           "Q R 300 16 0 000000300 8 0 jbd2/loop0-8\nD R 300 16 0 000000400 8 0 jbd2/loop0-8\n" \
           "C R 300 16 0 000001400 0 0 swapper/0\n"
    run = parse_blkparse(text)
    assert list(run.trace.size) == [4096, 8192] and list(run.trace.is_read) == [False, True]
    assert np.isnan(run.trace.latency_us[0]) and run.trace.latency_us[1] == pytest.approx(1.0)
    assert list(run.trace.returned) == [-1, 8192] and run.meta["without_completion"] == 1
    assert run.meta["by_command"] == {"fio": 1, "jbd2/loop0-8": 1} and list(run.pid) == [7, 8]


def test_a_few_hundred_thousand_events_parse_in_seconds():
    lines = FIXTURE.read_text().splitlines()
    copies = 300_000 // len(lines)
    text = []
    for k in range(copies):  # the fixture again and again, each copy a second later and elsewhere on the device
        for line in lines:
            f = line.split(None, 8)
            f[2] = str(int(f[2]) + k * 10**6) if int(f[2]) else f[2]
            f[4] = str(int(f[4]) + k)
            text.append(" ".join(f))
    started = time.monotonic()
    run = parse_blkparse("\n".join(text) + "\n")
    took = time.monotonic() - started
    assert len(run.trace) == copies * parse_blkparse(FIXTURE.read_text()).meta["ios"]
    assert took < 15, f"{len(text)} events took {took:.1f} s"


def test_without_blktrace_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(blktrace.shutil, "which", lambda tool: None if tool == "blktrace" else f"/usr/bin/{tool}")
    with pytest.raises(TraceUnavailable) as e:
        traced_run(DeviceSettings(workload="varmail"))
    message = str(e.value)
    assert "\n" not in message and "apt-get install blktrace" in message and "make setup-devices" in message
    # Filebench has no log of its own to fall back to
    with pytest.raises(TraceUnavailable, match="Filebench has no per-I/O log"):
        traced_run(DeviceSettings(workload="varmail", engine="filebench"), fallback=True)


def test_the_format_has_one_field_per_column():
    assert len(BLKPARSE_FORMAT.split("%")) - 1 == blkparse.FIELDS


# --- on loop devices -------------------------------------------------------------------------------------
@pytest.fixture
def loop_dir(tmp_path_factory, monkeypatch) -> Path:
    monkeypatch.setenv("STORETUNE_STATE_DIR", str(tmp_path_factory.mktemp("state")))
    return Path(tmp_path_factory.mktemp("loops"))


def settings(loop_dir: Path) -> DeviceSettings:
    return DeviceSettings(workload="varmail", loop_dir=str(loop_dir), loop_size_mib=512, fileset_mib=32)


def nothing_left(loop_dir: Path) -> None:
    """No loop device over a file in loop_dir, no mount under it, no file in it, no setup log, no blktrace
    of one of its devices."""
    here = f"{os.path.realpath(loop_dir)}/"
    loops = [n.name for n in Path("/sys/block").glob("loop*") if _read(n / "loop" / "backing_file").startswith(here)]
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if f"{line.split()[4]}/".startswith(here)]
    blktraces = [p.name for p in Path("/proc").glob("[0-9]*") if b"blktrace" in _read_bytes(p / "cmdline")
                 and here.encode() in _read_bytes(p / "cmdline")]
    assert (loops, mounts, blktraces) == ([], [], [])
    assert list(loop_dir.rglob("*")) == [] and list(Path(os.environ["STORETUNE_STATE_DIR"]).iterdir()) == []


def check_trace(run, device_bytes: int) -> None:
    t = run.trace
    assert len(t) > 0 and t.is_read.any() and (~t.is_read).any()  # varmail reads and writes
    assert (t.size % 512 == 0).all() and (t.size > 0).all()
    assert (t.offset >= 0).all() and (t.offset + t.size <= device_bytes).all()
    assert run.meta["runtime_s"] == 2 and run.meta["engine"] == "fio" and run.meta["submitters"] >= 1


@pytest.mark.device
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the device runner needs root")
@pytest.mark.skipif(shutil.which("fio") is None or shutil.which("blktrace") is None,
                    reason="needs fio and blktrace (make setup-devices)")
def test_a_traced_varmail_run_on_a_loop_device(loop_dir):
    try:
        run = traced_run(settings(loop_dir), runtime_s=2)
    except TraceUnavailable as e:
        nothing_left(loop_dir)  # refused before anything was measured, and torn down
        pytest.skip(f"this kernel refuses blktrace: {e}")
    nothing_left(loop_dir)
    assert run.source == "blktrace"
    check_trace(run, 512 * 2**20)
    assert run.meta["dropped_events"] is not None and "journal" in run.meta["sees"]


@pytest.mark.device
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the device runner needs root")
@pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio (make setup-devices)")
def test_the_fio_log_fallback_when_asked(loop_dir, monkeypatch):
    which = shutil.which  # blktrace.shutil is shutil: keep the real one
    monkeypatch.setattr(blktrace.shutil, "which", lambda tool: None if tool == "blktrace" else which(tool))
    run = traced_run(settings(loop_dir), runtime_s=2, fallback=True)
    nothing_left(loop_dir)
    assert run.source == "fio-log" and "apt-get install blktrace" in run.meta["fallback"]
    assert "file offsets" in run.meta["offsets"] and run.meta["submitters"] == 16  # varmail's 16 threads
    check_trace(run, 32 * 2**20 * 2)  # file offsets: within a 16 KiB mail
    assert (run.trace.offset + run.trace.size <= 16 * 1024).all()


# --- the kernel's blk tracer through tracefs -------------------------------------------------------------
def test_the_blk_tracers_classic_text_becomes_blkparse_lines():
    text = (b"# tracer: blk\n"
            b"  7,0    1   885.070042079 10889  Q  WS 0 + 8 [dd]\n"
            b"  7,0    1   885.070060137 10889  P   N [dd]\n"
            b"  7,0    1   885.070060696 10889  U   N [dd] 1\n"
            b"  7,0    1   885.070061745 10889  D  WS 0 + 8 [dd]\n"
            b"  7,1    0   885.070061800   500  D  WS 64 + 8 [other]\n"  # another device: not ours
            b"CPU:0 [LOST 3 EVENTS]\n"
            b"  7,0    1   885.070240591    22  C  WS 0 + 8 [0]\n"
            b"  7,0    0   885.070300000   301  D FWS [jbd2/loop0-8]\n"
            b"  7,0    0   885.070400000    22  C  RM 8 + 8 [-5]\n")
    lines, counts = tracefs.blk_text_to_blkparse(text, 7, 0)
    assert lines.splitlines() == [
        "Q WS 0 8 885 070042079 10889 0 dd", "P N 0 0 885 070060137 10889 0 dd", "U N 0 0 885 070060696 10889 0 dd",
        "D WS 0 8 885 070061745 10889 0 dd", "C WS 0 8 885 070240591 22 0 ",
        "D FWS 0 0 885 070300000 301 0 jbd2/loop0-8", "C RM 8 8 885 070400000 22 -5 "]
    assert counts == {"skipped_lines": 1, "lost_lines": 3}  # the header is skipped, the LOST line counted
    run = parse_blkparse(lines)
    assert len(run.trace) == 1 and run.trace.latency_us[0] == pytest.approx(178.846)
    assert run.meta["by_command"] == {"dd": 1} and run.meta["flushes_without_data"] == 1


def test_the_refusal_of_blktrace_names_the_tracefs_tracer():
    message = blktrace.refusal("/dev/loop0", "BLKTRACESETUP(2) /dev/loop0 failed: 1/Operation not permitted")
    assert 'tracer="tracefs"' in message and "--tracer tracefs" in message and "--fallback" in message


def ftrace_state(root: Path, device: str | None = None) -> dict[str, str]:
    """Every ftrace setting the tracefs tracer may change, and the device's trace/enable."""
    state = {name: (root / name).read_text().strip()
             for name in ("current_tracer", "tracing_on", "trace_clock", "buffer_size_kb", "set_event")}
    state |= {f"options/{p.name}": p.read_text().strip() for p in sorted((root / "options").iterdir())}
    if device:
        state["enable"] = (Path("/sys/block") / Path(device).name / "trace" / "enable").read_text().strip()
    return state


def assert_restored(after: dict[str, str], before: dict[str, str]) -> None:
    """``after`` is ``before`` again, but for the one change the kernel cannot undo: a ring buffer never
    yet used reads "7 (expanded: 1408)", and once a tracer has used it, it stays expanded; written back,
    its nominal 1408 reads as the kernel rounds it to whole sub-buffers (1410 on 6.18), within 1%."""
    unexpanded = re.fullmatch(r"\d+ \(expanded: (\d+)\)", before.get("buffer_size_kb", ""))
    if unexpanded:
        nominal, now = int(unexpanded[1]), after.get("buffer_size_kb", "")
        assert now.isdigit() and nominal <= int(now) <= nominal * 1.01, (now, before["buffer_size_kb"])
        after = {**after, "buffer_size_kb": before["buffer_size_kb"]}
    assert after == before


def test_a_ring_buffer_expanded_by_the_first_tracer_counts_as_restored():
    """A freshly booted host's buffer cannot be put back unexpanded (a first CI run on a new VM found it);
    anything else that differs still fails."""
    fresh = {"buffer_size_kb": "7 (expanded: 1408)", "current_tracer": "nop"}
    assert_restored({"buffer_size_kb": "1410", "current_tracer": "nop"}, fresh)
    for after in ({"buffer_size_kb": "4096", "current_tracer": "nop"},
                  {"buffer_size_kb": "1410", "current_tracer": "blk"},
                  {"buffer_size_kb": "7 (expanded: 1408)", "current_tracer": "blk"}):
        with pytest.raises(AssertionError):
            assert_restored(after, fresh)
    expanded = {"buffer_size_kb": "1408", "current_tracer": "nop"}
    with pytest.raises(AssertionError):  # an expanded buffer must come back exactly
        assert_restored({"buffer_size_kb": "1410", "current_tracer": "nop"}, expanded)


def tracefs_mounts() -> list[str]:
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if " - tracefs " in line]


@pytest.fixture
def tracefs_root():
    """tracefs mounted for the test (unmounted after it if it was not before): where to read ftrace's settings."""
    root = tracefs.tracefs_mount()
    mounted = root is None
    if mounted:
        root = tracefs.TRACEFS
        assert os.system(f"mount -t tracefs nodev {root}") == 0
    try:
        yield root
    finally:
        if mounted:
            os.system(f"umount {root}")


@pytest.mark.device
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the device runner needs root")
@pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio (make setup-devices)")
def test_a_varmail_run_traced_through_tracefs(loop_dir, tracefs_root):
    mounts_before = tracefs_mounts()
    before = ftrace_state(tracefs_root)
    if before["current_tracer"] != "nop" or before["set_event"]:
        pytest.skip(f"ftrace is in use on this host: {before['current_tracer']}, events {before['set_event']!r}")
    enables = {p: p.read_text() for p in Path("/sys/block").glob("loop*/trace/enable")}
    run = traced_run(settings(loop_dir), runtime_s=2, tracer="tracefs")
    nothing_left(loop_dir)
    assert_restored(ftrace_state(tracefs_root), before)
    assert tracefs_mounts() == mounts_before
    assert {p: p.read_text() for p in enables if p.exists()} == {p: t for p, t in enables.items() if p.exists()}
    assert run.source == "tracefs" and run.trace.source.startswith("tracefs blk tracer of /dev/loop")
    assert "blk tracer" in run.meta["source_is"] and "same block events blktrace records" in run.meta["source_is"]
    check_trace(run, 512 * 2**20)
    completed = ~np.isnan(run.trace.latency_us)
    assert completed.sum() >= 0.99 * len(run.trace)  # the run drained before tracing stopped, nearly all
    assert np.isfinite(run.trace.latency_us[completed]).all() and (run.trace.latency_us[completed] > 0).all()
    # the journal's I/O: ftrace names the submitting processes (its saved command lines)
    assert any(c.startswith("jbd2/") for c in run.meta["by_command"]) and run.meta["by_command"].get("fio", 0) > 0
    assert run.meta["dropped_events"] == 0 and run.meta["complete"]
    assert set(run.meta["lost_by_cpu"]) == {f"cpu{n}" for n in range(len(run.meta["lost_by_cpu"]))}
    # what it changed, each put back: the tracer, the clock, blk_classic and the device's trace/enable at least
    assert {"current_tracer", "trace_clock", "options/blk_classic"} <= set(run.meta["ftrace_restored"])
    assert any(k.endswith("/trace/enable") for k in run.meta["ftrace_restored"])


@pytest.mark.device
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the device runner needs root")
@pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio (make setup-devices)")
def test_the_tracefs_tracer_refuses_while_someone_else_traces(loop_dir, tracefs_root):
    tracers = (tracefs_root / "available_tracers").read_text().split()
    other = next((t for t in ("blk", "wakeup", "function") if t in tracers), None)  # blk: no device, no cost
    if other is None:
        pytest.skip(f"no tracer besides nop here: {tracers}")
    original = (tracefs_root / "current_tracer").read_text().strip()
    if original != "nop":
        pytest.skip(f"ftrace is in use on this host: {original}")
    tracing_on = (tracefs_root / "tracing_on").read_text().strip()
    try:
        (tracefs_root / "tracing_on").write_text("0")  # someone's tracer, paused: cheap while it lasts
        (tracefs_root / "current_tracer").write_text(other)
        before, mounts_before = ftrace_state(tracefs_root), tracefs_mounts()
        with pytest.raises(TraceUnavailable) as e:
            traced_run(settings(loop_dir), runtime_s=2, tracer="tracefs")
        assert "\n" not in str(e.value) and f"current_tracer is {other!r}" in str(e.value)
        assert ftrace_state(tracefs_root) == before and tracefs_mounts() == mounts_before  # refused: nothing changed
        nothing_left(loop_dir)
    finally:
        (tracefs_root / "current_tracer").write_text("nop")
        (tracefs_root / "tracing_on").write_text(tracing_on)


@pytest.mark.device
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the device runner needs root")
@pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio (make setup-devices)")
def test_a_traced_run_waits_for_another_storetunes_and_gives_up_in_one_line(loop_dir, tracefs_root, monkeypatch):
    """ftrace is one per host: a traced run waits while another StoreTune's holds it (the ftrace lock), gives
    up after its wait with one line and nothing changed, and traces once the other is done."""
    import fcntl
    import threading

    from storetune.runners.device.host import open_lock

    before, mounts_before = ftrace_state(tracefs_root), tracefs_mounts()
    if before["current_tracer"] != "nop" or before["set_event"]:
        pytest.skip(f"ftrace is in use on this host: {before['current_tracer']}, events {before['set_event']!r}")
    other = open_lock(FTRACE_LOCK, "ftrace lock")  # another StoreTune's traced run
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(other)
        pytest.skip("another traced run holds ftrace on this host now")
    freed = threading.Event()

    def free() -> None:
        os.close(other)
        freed.set()

    released = threading.Timer(2.0, free)
    try:
        monkeypatch.setattr(tracefs, "FTRACE_WAIT_S", 0.5)
        started = time.monotonic()
        with pytest.raises(TraceUnavailable) as e:
            traced_run(settings(loop_dir), runtime_s=2, tracer="tracefs")
        assert str(e.value) == (f"another traced run on this host kept ftrace ({FTRACE_LOCK}) for more than "
                                "0.5 s; try again when it ends")
        assert time.monotonic() - started >= 0.5
        assert ftrace_state(tracefs_root) == before and tracefs_mounts() == mounts_before  # nothing changed
        nothing_left(loop_dir)

        monkeypatch.setattr(tracefs, "FTRACE_WAIT_S", 60.0)
        released.start()  # the other run ends in 2 s: this one waits for it, then traces
        run = traced_run(settings(loop_dir), runtime_s=2, tracer="tracefs")
        assert freed.is_set() and run.source == "tracefs" and len(run.trace) > 0
        assert_restored(ftrace_state(tracefs_root), before)
        nothing_left(loop_dir)
    finally:
        released.cancel()
        if released.is_alive():
            released.join()
        if not freed.is_set():
            free()
    mine = open_lock(FTRACE_LOCK, "ftrace lock")
    try:  # the traced run gave ftrace back
        fcntl.flock(mine, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(mine)


def read_ftrace(device: str | None = None) -> dict[str, str]:
    """ftrace_state, mounting tracefs for the moment if it is not mounted (and unmounting it again)."""
    root = tracefs.tracefs_mount()
    if root is not None:
        return ftrace_state(root, device)
    assert os.system(f"mount -t tracefs nodev {tracefs.TRACEFS}") == 0
    try:
        return ftrace_state(tracefs.TRACEFS, device)
    finally:
        os.system(f"umount {tracefs.TRACEFS}")


@pytest.mark.device
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the device runner needs root")
@pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio (make setup-devices)")
def test_a_traced_run_killed_mid_trace_is_reaped_by_the_next_start(loop_dir, tmp_path):
    """SIGKILLed while the blk tracer records: the tracer, the clock, the options, the buffer, the device's
    trace/enable and tracing_on stay as it set them, and the tracefs mount; the next start's reaper restores
    and unmounts them all."""
    import signal
    import subprocess
    import sys

    from storetune.runners.device.shell import Shell
    from storetune.runners.device.state import reap_and_say

    before, mounts_before = read_ftrace(), tracefs_mounts()
    if before["current_tracer"] != "nop" or before["set_event"]:
        pytest.skip(f"ftrace is in use on this host: {before['current_tracer']}, events {before['set_event']!r}")
    script = tmp_path / "victim.py"
    script.write_text(
        "from runners.device.blktrace import traced_run\nfrom runners.settings import DeviceSettings\n"
        f"traced_run(DeviceSettings(workload='varmail', loop_dir={str(loop_dir)!r}, loop_size_mib=512, "
        "fileset_mib=32), runtime_s=60, tracer='tracefs')\n")
    root = Path(__file__).resolve().parent.parent
    victim = subprocess.Popen([sys.executable, str(script)], env={**os.environ, "PYTHONPATH": str(root)},
                              start_new_session=True)
    here = f"{os.path.realpath(loop_dir)}/"
    enabled = None
    try:
        deadline = time.monotonic() + 120
        while enabled is None and time.monotonic() < deadline and victim.poll() is None:
            for node in Path("/sys/block").glob("loop*"):
                if _read(node / "loop" / "backing_file").startswith(here) and _read(node / "trace" / "enable") == "1":
                    enabled = node
            time.sleep(0.2)
        assert enabled is not None, "the victim never started tracing"
        time.sleep(1)  # tracing now
    finally:
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
    left = read_ftrace(f"/dev/{enabled.name}")
    assert left["current_tracer"] == "blk" and left["enable"] == "1"  # it left the trace set up
    # a start while another StoreTune's traced run holds ftrace leaves ftrace alone (that run's clock,
    # tracer and mount are in use) and keeps it for the next start
    import fcntl

    from storetune.runners.device.host import open_lock

    other = open_lock(FTRACE_LOCK, "ftrace lock")
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        waiting = reap_and_say(Shell())
        assert read_ftrace()["current_tracer"] == "blk" and any(
            "another traced run on this host holds ftrace" in line for line in waiting.failed), waiting.failed
    finally:
        os.close(other)
    reap_and_say(Shell())  # what the next start does
    assert_restored(read_ftrace(), before)
    assert tracefs_mounts() == mounts_before
    assert _read(enabled / "trace" / "enable") in ("", "0")  # put back, or the device is gone
    nothing_left(loop_dir)


@pytest.mark.device
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the device runner needs root")
@pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio (make setup-devices)")
def test_storetune_fingerprint_of_a_device_workload_is_recorded_under_its_campaigns_key(loop_dir, tracefs_root,
                                                                                       tmp_path):
    """`storetune fingerprint --workload varmail --device loop --tracer tracefs`: the features of a short
    traced run, recorded under the key a `tune --runner device --workload varmail` campaign of the same
    options has, so that recommend and --warm-start similar find it."""
    import json

    from conftest import run_cli
    from storetune.runners import make_runner
    from storetune.tuner import History

    if ftrace_state(tracefs_root)["current_tracer"] != "nop":
        pytest.skip("ftrace is in use on this host")
    db = f"sqlite:///{tmp_path / 'h.sqlite'}"
    options = ["--workload", "varmail", "--device", "loop", "--loop-dir", str(loop_dir), "--loop-size-mib", "512",
               "--fileset-mib", "32", "--runtime", "7"]
    proc = run_cli("fingerprint", *options, "--tracer", "tracefs", "--seconds", "2", "--json", "--db", db,
                   env={"STORETUNE_STATE_DIR": os.environ["STORETUNE_STATE_DIR"]})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["source"] == "tracefs" and out["ios"] > 100 and out["meta"]["runtime_s"] == 2
    assert 0 <= out["features"]["read_ratio"] < 0.5 and out["features"]["concurrency"] > 0
    key = make_runner("device", workload="varmail", loop_dir=str(loop_dir), loop_size_mib=512, fileset_mib=32,
                      runtime_s=7, dry_run=True, echo=lambda _line: None).workload.fingerprint()
    assert out["workload_fingerprint"] == key and key in History(db, migrate=False).fingerprints()
    nothing_left(loop_dir)


@pytest.mark.device
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the device runner needs root")
@pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio (make setup-devices)")
def test_post_fingerprints_traces_a_device_workload_under_the_servers_policy(loop_dir, tracefs_root, tmp_path):
    """POST /fingerprints with a workload: a traced run on a loop device in the server's loop directory,
    recorded under the campaigns' key; the client may not pick the directory or an unlisted disk."""
    from fastapi.testclient import TestClient

    from storetune.api.service.app import create_app
    from storetune.api.settings import Settings as ServiceSettings
    from storetune.runners import make_runner

    if ftrace_state(tracefs_root)["current_tracer"] != "nop":
        pytest.skip("ftrace is in use on this host")
    settings = {"loop_size_mib": 512, "fileset_mib": 32, "runtime_s": 7}
    app = create_app(ServiceSettings(database_url=f"sqlite:///{tmp_path / 'h.sqlite'}", data_dirs=str(tmp_path)))
    with TestClient(app) as client:
        assert client.post("/fingerprints", json={}).status_code == 422  # neither a trace nor a workload
        stray = client.post("/fingerprints", json={"workload": "varmail", "runner_settings": {"loop_dir": "/tmp"}})
        assert stray.status_code == 422 and "server's to set" in stray.text
        disk = client.post("/fingerprints", json={"workload": "varmail", "runner_settings": {"device": "/dev/sda"}})
        assert disk.status_code == 403 and "allow list" in disk.text
        done = client.post("/fingerprints", json={"workload": "varmail", "runner_settings": settings,
                                                  "tracer": "tracefs", "seconds": 2})
        assert done.status_code == 201, done.text
        body = done.json()
        key = make_runner("device", workload="varmail", **settings, dry_run=True,
                          echo=lambda _line: None).workload.fingerprint()
        assert body["source"] == "tracefs" and body["ios"] > 100 and body["workload_fingerprint"] == key
        assert client.get("/fingerprints").json()[0]["workload_fingerprint"] == key
    pid = os.getpid()  # what this test's runner made in the server's loop directory, and only that
    ours = [p for p in Path("/var/tmp/storetune").glob(f"*{pid}*")] if Path("/var/tmp/storetune").exists() else []
    assert ours == [] and list(Path(os.environ["STORETUNE_STATE_DIR"]).iterdir()) == []
