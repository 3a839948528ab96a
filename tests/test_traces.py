"""Trace formats: reading, writing, round trips and malformed lines; fio and Filebench reports."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import ROOT, shared
from storetune.runners.device.engines import EngineOutputError, parse_filebench, parse_fio
from storetune.runners.traces import TraceError, read_trace, write_flashnet

FIO = ROOT / "tests" / "data" / "fio"


def test_flashnet_round_trip_is_byte_identical(tmp_path):
    path = shared("flashnet_tencent/tencent.cut.per_50k.rw_60_40.490.trace.csv")
    trace = read_trace(path)
    assert len(trace) == 50_000 and trace.has_latency
    out = tmp_path / "again.csv"
    write_flashnet(out, trace)
    assert out.read_bytes() == path.read_bytes()


def test_msr_input_has_no_latency_and_offsets_beyond_a_small_device():
    trace = read_trace(shared("heimdall_msr/msr.cut.per_10k.rw_20_80.105.trace.txt"))
    assert len(trace) == 10_000 and not trace.has_latency
    assert trace.is_read.mean() == pytest.approx(0.202, abs=0.01)  # its stats file: R:W = 20/80
    assert trace.offset.max() > 10 * 2**30


def test_original_msr_csv(tmp_path):
    path = tmp_path / "msr.csv"
    path.write_text("128166372003061629,hm,1,Read,383516672,32768,41286\n"
                    "128166372016382155,hm,1,Write,3058061312,4096,1963\n")
    trace = read_trace(path)
    assert trace.is_read.tolist() == [True, False]
    assert trace.ts_ms[1] == pytest.approx(1332.0526)
    assert trace.latency_us.tolist() == pytest.approx([4128.6, 196.3])


@pytest.mark.parametrize(
    "text, message",
    [
        ("0.000 0 200626176 4096 0\n0.1 0 12 4096\n", "line 2: expected 5 fields for msr"),
        ("0.000 0 200626176 4096 0\n0.1 0 12 4096 7\n", "line 2: msr field op is '7', not one of 0, 1"),
        ("0.000,120,1,4096,4923392,0.091,4096\n0.1,x,1,4096,0,0.1,4096\n",
         "line 2: flashnet field latency is 'x', not a number"),
        ("hello\n", "line 1: neither FlashNet"),
        ("", "the trace is empty"),
        # the findings: a NaN latency, a negative one, arrival times out of order
        ("0.000,120,1,4096,0,0.091,4096\n0.1,nan,1,4096,0,0.1,4096\n",
         "line 2: flashnet field latency is 'nan', not a finite number"),
        ("0.000,120,1,4096,0,0.091,4096\n0.1,-5,1,4096,0,0.1,4096\n",
         "line 2: flashnet field latency is '-5', below 0 \\(and not -1, which means unknown\\)"),
        ("0.000,120,1,4096,0,0.091,4096\n0.1,5,1,4096,0,inf,4096\n",
         "line 2: flashnet field ts_submit is 'inf', not a finite number"),
        ("5.000 0 0 4096 0\n8.000 0 0 4096 1\n6.000 0 0 4096 1\n",
         "line 3: timestamp 6 is 2 ms before line 2's \\(8\\); .* at most \\(1 ms\\)"),
        # a slow slide backwards, each step within one tick (the review's finding)
        ("5000.000 0 0 4096 0\n4000.000 0 0 4096 1\n3000.000 0 0 4096 1\n",
         "line 3: timestamp 3000 is 2000 ms before line 1's \\(5000\\)"),
        ("0.000,120,1,4096,0,0.091,4096\n0.100,120,1,4096,0,1e9,4096\n0.200,120,1,4096,0,0.3,4096\n",
         "line 3: ts_submit 0.3 is 1e\\+09 ms before line 2's \\(1e\\+09\\); ts_submit may go back by 1000 ms"),
        ("0.5 0 0 4096 0\n1_0.5 0 0 4096 1\n", "line 2: msr field timestamp is '1_0.5', not a number"),
        ("0.000 0 0 4096 0\n0.100 0 0 4096 1", "line 2, the last, has no newline at its end"),
        ("0.000 0 0 4096 0\n0.1\x00 0 0 4096 1\n", "line 2: not text \\(character 0x00\\)"),
        ("128166372003061629,hm,1,Read,383516672,32768,41286\n128166372003061629,hm,1,Erase,0,1,1\n",
         "line 2: msr-csv field Type is 'Erase', neither Read nor Write"),
        # a CSV export's header was "msr-csv field Type is 'size', neither Read nor Write"
        ("ts,lat,op,size,offset,sub,sz\n0.000,120,1,4096,0,0.091,4096\n",
         "line 1 is a header, 'ts,lat,op,size,offset,sub,sz': a FlashNet or MSR trace has none"),
        ("timestamp devno offset size op\n0.5 0 0 4096 0\n", "line 1 is a header, 'timestamp devno offset size op'"),
        # latency and size swapped read as a valid trace of 120-byte I/Os (a newcomer's trial): whole sectors only
        ("0.000,4096,1,120,4923392,0.091,4096\n0.1,4096,1,130,0,0.1,4096\n",
         "line 1: flashnet size 120 is not a multiple of 512 bytes, as every block I/O's is \\(2 such I/Os\\): "
         "are the columns in flashnet's order, ts_record, latency, io_type, size, offset,"),
        ("0.000 0 0 4096 0\n0.5 0 1000 4096 1\n", "line 2: msr offset 1000 is not a multiple of 512 bytes"),
    ],
)
def test_malformed_traces_name_the_line(tmp_path, text, message):
    path = tmp_path / "bad.trace"
    path.write_text(text)
    with pytest.raises(TraceError, match=f"^{path}: {message}") as raised:
        read_trace(path)
    assert "\n" not in str(raised.value)


def test_a_coarse_clock_may_step_back_one_tick_and_minus_one_means_not_measured(tmp_path):
    path = tmp_path / "t.csv"  # FlashNet's Tencent traces are stamped in whole seconds: 12000 before 11000
    path.write_text("11000.000,120,1,4096,0,11000.091,4096\n12000.000,-1,1,4096,0,-1,4096\n"
                    "11000.000,80,0,4096,4096,11000.300,4096\n")
    trace = read_trace(path)
    assert trace.ts_ms.tolist() == [11000, 12000, 11000] and trace.line.tolist() == [1, 2, 3]
    assert np.isnan(trace.latency_us[1]) and np.isnan(trace.submit_ms[1]) and trace.latency_us[2] == 80
    path.write_text("10000.000,120,1,4096,0,0.091,4096\n12000.000,5,1,4096,0,1,4096\n10000.000,5,1,4096,0,1,4096\n")
    with pytest.raises(TraceError, match="line 3: timestamp 10000 is 2000 ms before line 2's"):
        read_trace(path)


def test_line_numbers_count_only_newlines_and_a_bom_is_not_a_field(tmp_path):
    path = tmp_path / "t.trace"
    path.write_bytes("\ufeff0.5 0 0 4096 0\n0.6 0 0 4096 1\n".encode())
    assert read_trace(path).ts_ms.tolist() == [0.5, 0.6]
    path.write_text("0.5 0 0 4096 0\n0.6 0 0 4096 1\n0.7 0 0 40\u202896 1\n0.8 0 0 4096 x\n")
    with pytest.raises(TraceError, match=r": line 3: msr field size is '40.*', not an integer"):
        read_trace(path)


@pytest.mark.parametrize("name", ["varmail", "oltp"])
def test_fio_reports_are_summed_over_directions(name):
    text = (FIO / f"{name}.json").read_text()
    metrics = parse_fio(text)
    job = json.loads(text)["jobs"][0]  # group_reporting: one entry for all jobs
    assert metrics["read_ops_per_s"] == pytest.approx(job["read"]["iops"])
    assert metrics["ops_per_s"] == pytest.approx(job["read"]["iops"] + job["write"]["iops"])
    assert metrics["mb_per_s"] == pytest.approx((job["read"]["bw_bytes"] + job["write"]["bw_bytes"]) / 1e6)
    p99 = max(job[d]["clat_ns"]["percentile"]["99.000000"] for d in ("read", "write")) / 1e3
    assert metrics["lat_p99_us"] == pytest.approx(p99)
    ios = job["read"]["total_ios"] + job["write"]["total_ios"]
    mean = (job["read"]["clat_ns"]["mean"] * job["read"]["total_ios"]
            + job["write"]["clat_ns"]["mean"] * job["write"]["total_ios"]) / ios / 1e3
    assert metrics["lat_mean_us"] == pytest.approx(mean)


def test_reads_that_verify_each_write_inline_are_counted_over_the_run():
    """fio's varmail reads each write back (verify_backlog=1); fio rates those reads over the time spent
    reading alone (8.8 M/s here), so they are counted over the writes' runtime: one read per write."""
    text = (FIO / "varmail-verify.json").read_text()
    job = json.loads(text)["jobs"][0]
    assert job["read"]["iops"] > 1e6 and job["read"]["total_ios"] == job["write"]["total_ios"]
    metrics = parse_fio(text)
    assert metrics["read_ops_per_s"] == pytest.approx(metrics["write_ops_per_s"], rel=0.01)
    assert metrics["ops_per_s"] == pytest.approx(2 * job["write"]["total_ios"] / (job["write"]["runtime"] / 1000))
    assert metrics["read_mb_per_s"] == pytest.approx(metrics["write_mb_per_s"], rel=0.01)


def test_fio_notes_before_the_json_are_skipped_and_garbage_is_an_error():
    text = "note: both iodepth >= 1 and synchronous I/O engine are selected\n" + (FIO / "oltp.json").read_text()
    assert parse_fio(text)["ops_per_s"] > 0
    with pytest.raises(EngineOutputError):
        parse_fio("fio: failed to lay out files")
    report = json.loads((FIO / "oltp.json").read_text())
    report["jobs"][0]["error"] = 2  # fio exits 0 when a job could not run: that is a failure
    with pytest.raises(EngineOutputError, match=r"fio job shadow failed: error 2 \(No such file or directory\)"):
        parse_fio(json.dumps(report))


def test_filebench_summary():
    text = "42.004: IO Summary: 1063894 ops 17729.734 ops/s 1612/3224 rd/wr 428.5mb/s 2.8ms/op\n"
    metrics = parse_filebench(text)
    assert metrics["ops_per_s"] == 17729.734 and metrics["lat_mean_us"] == pytest.approx(2800.0)
    assert metrics["mb_per_s"] == pytest.approx(428.5 * 1.048576)
    with pytest.raises(EngineOutputError, match="IO Summary"):
        parse_filebench("Filebench Version 1.5-alpha3\n")
    assert np.isfinite(metrics["read_ops_per_s"])


def test_filebench_errors_are_the_failure_reason():
    """Filebench logs errors to stderr and exits 0; these are its words on a full file system."""
    stderr = ("1.026: Failed to write 15006 bytes on fd 7: Success\n"
              "1.026: Failed to write 13565 bytes on fd 6: Success\n"
              "1.026: filereaderthread-2: flowop appendfilerand1-1 failed\n"
              "1.026: filereaderthread-1: flowop appendfilerand1-1 failed\n"
              "2.017: NO VALID RESULTS! Filebench run terminated prematurely around line 12\n")
    with pytest.raises(EngineOutputError) as e:
        parse_filebench("2.017: Shutting down processes\n", stderr)
    assert str(e.value) == ("Filebench: Failed to write 15006 bytes on fd 7: Success; filereaderthread-2: flowop "
                            "appendfilerand1-1 failed; NO VALID RESULTS! Filebench run terminated prematurely "
                            "around line 12")
    summary = "42.004: IO Summary: 1063894 ops 17729.734 ops/s 1612/3224 rd/wr 428.5mb/s 2.8ms/op\n"
    with pytest.raises(EngineOutputError, match="flowop appendfilerand1-1 failed"):  # a summary after an error
        parse_filebench(summary, stderr.splitlines()[2])
    shmmax = "WARNING: Could not open /proc/sys/kernel/shmmax file!\nIt means that you probably ran Filebench not\n"
    assert parse_filebench(summary, shmmax)["ops_per_s"] == 17729.734  # a warning is not an error
