"""Trace replay on a loop device: the io_uring replayer keeps the trace's pace and the queue depth, and
a malformed trace or a missing compiler is one line. Real loop devices, so marked `device` like test_device."""

from __future__ import annotations

from dataclasses import replace

import pytest

from test_device import NOTHING, leftovers, loop_dir, pytestmark  # noqa: F401 - fixture, marks


def test_replay_a_trace_on_a_loop_device(loop_dir, tmp_path):
    from conftest import run_cli, shared
    from storetune.runners.traces import read_trace

    source = shared("heimdall_msr/msr.cut.per_10k.rw_20_80.105.trace.txt")
    head = tmp_path / "head.trace"
    head.write_text("".join(source.read_text().splitlines(keepends=True)[:400]))
    out = tmp_path / "replayed.csv"
    proc = run_cli("replay", "--trace", str(head), "--device", "loop", "--loop-dir", str(loop_dir),
                   "--loop-size-mib", "512", "--speed", "0", "--queue-depth", "4", "--out", str(out), "--json",
                   check=True)
    summary = __import__("json").loads(proc.stdout.strip().splitlines()[-1])
    original, replayed = read_trace(head), read_trace(out)
    assert len(replayed) == 400 and replayed.has_latency and (replayed.latency_us > 0).all()
    assert (replayed.returned == original.size).all()  # every I/O completed in full
    assert (replayed.ts_ms == original.ts_ms).all() and (replayed.is_read == original.is_read).all()
    assert (replayed.offset + replayed.size <= 512 * 2**20).all()
    assert summary["wrapped_offsets"] == int((original.offset + original.size > 512 * 2**20).sum()) > 0
    assert summary["errors"] == 0
    assert "Traceback" not in proc.stderr  # no replayer thread died, even while closing its buffer
    assert leftovers(loop_dir) == NOTHING


def test_the_replayer_keeps_the_trace_pace_and_the_queue_depth(loop_dir):
    import numpy as np

    from storetune.runners.device.replay import replay
    from storetune.runners.device.shell import Shell
    from storetune.runners.device.state import SetupLog
    from storetune.runners.device.target import close_loop, open_loop
    from storetune.runners.traces import Trace

    shell, log = Shell(), SetupLog()
    target = open_loop(shell, log, loop_dir, 512 * 2**20)
    try:
        n = 60
        offsets = np.random.default_rng(0).integers(0, 2**17, n) * 4096
        paced = Trace(np.arange(n) * 5.0, np.ones(n, bool), np.full(n, 4096), offsets, np.full(n, np.nan),
                      np.full(n, np.nan), np.full(n, -1))
        done = replay(paced, target.device, speed=1, queue_depth=4).trace
        lateness_ms = done.submit_ms - paced.ts_ms
        assert (lateness_ms >= 0).all() and np.median(lateness_ms) < 1  # due, not before, and on time
        fast = replay(paced, target.device, speed=0, queue_depth=4).trace
        starts, ends = fast.submit_ms, fast.submit_ms + fast.latency_us / 1e3
        in_flight = [np.count_nonzero((starts <= t) & (ends > t)) for t in starts]
        assert max(in_flight) <= 4 and (fast.returned == 4096).all()
        writes = replace(paced, is_read=np.zeros(n, bool), offset=np.full(n, 2**40))  # far beyond: wrapped
        result = replay(writes, target.device, speed=0, queue_depth=2)
        assert result.wrapped == n and result.errors == 0 and (result.trace.returned == 4096).all()
    finally:
        close_loop(shell, log, target)
    assert leftovers(loop_dir) == NOTHING


def test_the_replayer_without_a_compiler_says_what_to_install(tmp_path, monkeypatch):
    from storetune.runners.device import replay

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(replay.shutil, "which", lambda name: None)
    with pytest.raises(replay.ReplayerUnavailable, match="apt-get install gcc liburing-dev"):
        replay.replayer_binary()


def test_a_malformed_trace_is_one_line_naming_its_line(tmp_path):
    from conftest import run_cli

    bad = tmp_path / "bad.trace"
    bad.write_text("0.000 0 200626176 4096 0\n1.5 0 12 nope 1\n")
    proc = run_cli("replay", "--trace", str(bad), "--out", str(tmp_path / "o.csv"))
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: {bad}: line 2: msr field size is 'nope', not an integer"


@pytest.mark.parametrize("args, message", [
    (["--window", "0"], "error: a window of 0 I/Os is too small; use at least 2"),
    (["--out", "{tmp}/no/such/folder/o.csv"], "error: --out {tmp}/no/such/folder/o.csv: the folder "
                                              "{tmp}/no/such/folder does not exist"),
    (["--out", "{tmp}"], "error: --out {tmp} is a folder: name the file to write"),
])
def test_a_replay_that_could_not_report_is_refused_before_it_starts(tmp_path, args, message):
    """A window of 0 used to replay the whole trace and then end in a ZeroDivisionError; an --out in a
    missing folder was found out only after the replay (its measurements lost)."""
    from conftest import run_cli

    trace = tmp_path / "ok.trace"
    trace.write_text("".join(f"{i * 0.5:.3f} 0 {i * 4096} 4096 1\n" for i in range(100)))
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    out = [] if "--out" in args else ["--out", str(tmp_path / "o.csv")]
    proc = run_cli("replay", "--trace", str(trace), *out, "--loop-dir", str(tmp_path / "loops"), *args)
    assert proc.returncode == 2 and proc.stderr.strip() == message.replace("{tmp}", str(tmp_path))
    assert not (tmp_path / "loops").exists()  # no device was set up


def test_a_replay_reports_where_the_workloads_fingerprint_shifts(loop_dir, tmp_path):
    """Two phases in one trace (random 4 KiB reads, then sequential 64 KiB writes): the replay's summary
    names the window where the second begins, counted in I/Os."""
    import json

    import numpy as np

    from conftest import run_cli

    rng = np.random.default_rng(0)
    lines = [f"{i * 0.5:.3f} 0 {int(rng.integers(0, 2**16)) * 4096} 4096 1\n" for i in range(2000)]
    lines += [f"{1000 + i * 0.5:.3f} 0 {i * 65536} 65536 0\n" for i in range(2000)]
    trace = tmp_path / "phases.trace"
    trace.write_text("".join(lines))
    proc = run_cli("replay", "--trace", str(trace), "--device", "loop", "--loop-dir", str(loop_dir),
                   "--loop-size-mib", "512", "--speed", "0", "--queue-depth", "8", "--window", "500",
                   "--out", str(tmp_path / "out.csv"), "--json", check=True)
    changes = json.loads(proc.stdout.strip().splitlines()[-1])["changes"]
    assert changes["window"] == 500 and changes["windows"] == 8
    assert [c["window"] for c in changes["at"]] == [4] and changes["at"][0]["first_io"] == 2000
    assert leftovers(loop_dir) == NOTHING
